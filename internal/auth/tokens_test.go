package auth

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func names(tokens []Token) []string {
	var out []string
	for _, t := range tokens {
		out = append(out, t.Name)
	}
	return out
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name      string
		path, env string
		want      []string // token names in order
	}{
		{name: "nothing configured is auth off", want: nil},
		{name: "named file entries", path: "testdata/tokens", want: []string{"ci", "ops"}},
		{name: "bare file entry named after its line", path: "testdata/bare", want: []string{"file:2"}},
		{name: "env named and bare", env: "a:" + tokenCI + ", " + tokenOps, want: []string{"a", "env:2"}},
		{name: "env blank entries skipped", env: " ," + tokenCI + ",,", want: []string{"env:2"}},
		{name: "file and env combined", path: "testdata/tokens", env: "env:" + tokenEnv, want: []string{"ci", "ops", "env"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(tt.path, tt.env)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !slices.Equal(names(got), tt.want) {
				t.Errorf("names = %v, want %v", names(got), tt.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name      string
		path, env string
		secret    string // must not appear in the error
		want      string // the error contains this
	}{
		{name: "weak token names the line", path: "testdata/weak", secret: "short-secret", want: "testdata/weak line 3: token is too weak"},
		{name: "weak bare env token", env: tokenCI + ",tiny", secret: "tiny", want: EnvTokens + " entry 2: token is too weak"},
		{name: "space-separated NAME TOKEN", path: write("space", "ci "+tokenCI+"\n"), secret: tokenCI, want: "line 1: token contains a space"},
		{name: "bad name", path: write("badname", "c i:"+tokenCI+"\n"), secret: tokenCI, want: "line 1: the text before the first ':' is not a name"},
		{name: "token with colon needs a name", env: "abc!def:" + tokenCI, secret: "abc!def", want: "entry 1: the text before the first ':' is not a name"},
		{name: "empty token", env: "ci:", want: "entry 1: empty token"},
		{name: "control character", env: "ci:" + tokenCI + "\x01", secret: tokenCI, want: "visible ASCII"},
		{name: "duplicate name", path: "testdata/tokens", env: "ci:" + tokenEnv, secret: tokenEnv, want: `entry 1: name "ci" is also used by tokens file testdata/tokens line 3`},
		{name: "duplicate token", path: "testdata/tokens", env: "again:" + tokenCI, secret: tokenCI, want: "entry 1: same token as tokens file testdata/tokens line 3"},
		{name: "missing file", path: filepath.Join(dir, "nope"), want: "tokens file: open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.path, tt.env)
			if err == nil {
				t.Fatal("Load: no error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want it to contain %q", err, tt.want)
			}
			if tt.secret != "" && strings.Contains(err.Error(), tt.secret) {
				t.Errorf("error %q contains the token", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{cfg: Config{RateLimit: 5, RateBurst: 10}},
		{cfg: Config{RateLimit: -1, prefix: "api."}, want: "api.rate-limit"},
		{cfg: Config{RateBurst: -1, prefix: "api."}, want: "api.rate-burst"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", tt.cfg, err, tt.want)
		}
	}
}
