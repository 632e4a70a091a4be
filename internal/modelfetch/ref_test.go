package modelfetch_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

func TestParseRef(t *testing.T) {
	abs, _ := filepath.Abs("my/own.gguf")
	gorilla, _ := modelfetch.Lookup(modelfetch.Default)
	tests := []struct {
		in      string
		want    modelfetch.Ref
		wantErr string
	}{
		{in: "gorilla-openfunctions-v2", want: gorilla.Ref()},
		{in: "Gorilla-OpenFunctions-V2", want: gorilla.Ref()},
		{in: "hf://acme/m-GGUF/sub/m.Q4_K_M.gguf@" + commit,
			want: modelfetch.Ref{Repo: "acme/m-GGUF", File: "sub/m.Q4_K_M.gguf", Revision: commit}},
		{in: "hf://acme/m/m.gguf@main#sha256:" + strings.Repeat("AB", 32),
			want: modelfetch.Ref{Repo: "acme/m", File: "m.gguf", Revision: "main", SHA256: strings.Repeat("ab", 32)}},
		{in: "hf://gorilla-llm/gorilla-openfunctions-v2-gguf/gorilla-openfunctions-v2-q4_K_M.gguf@" + gorilla.Revision,
			want: modelfetch.Ref{Repo: gorilla.Repo, File: gorilla.File, Revision: gorilla.Revision}},
		{in: "my/own.gguf", want: modelfetch.Ref{Path: abs}},
		{in: "", wantErr: "empty"},
		{in: "llama3", wantErr: "unknown model"},
		{in: "hf://acme/m/m.gguf", wantErr: "no @REVISION"},
		{in: "hf://acme/m.gguf@main", wantErr: "OWNER/REPO/FILE"},
		{in: "hf://acme/m/../x.gguf@main", wantErr: "not a clean path"},
		{in: "hf://acme/m/m.bin@main", wantErr: "not a .gguf"},
		{in: "hf://acme/m/m.gguf@main#sha256:abc", wantErr: "64 hex digits"},
		{in: "hf://ac me/m/m.gguf@main", wantErr: "not a valid owner"},
		{in: "hf://acme/m/m.gguf@", wantErr: "revision"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := modelfetch.ParseRef(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseRef(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseRef(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if again, err := modelfetch.ParseRef(got.String()); err != nil || again != got {
				t.Errorf("ParseRef(%q.String() = %q) = %+v, %v; want the same reference back", tc.in, got.String(), again, err)
			}
		})
	}
}

func TestRegistryPins(t *testing.T) {
	for _, k := range modelfetch.Registry() {
		r := k.Ref()
		if !r.Pinned() {
			t.Errorf("%s: revision %q is not a commit id", k.Name, k.Revision)
		}
		if k.SHA256 != "" && len(k.SHA256) != 64 {
			t.Errorf("%s: sha256 %q is not 64 hex digits", k.Name, k.SHA256)
		}
		if k.Source == "" || k.About == "" {
			t.Errorf("%s: say where the pins come from and what the model is", k.Name)
		}
	}
	g, ok := modelfetch.Lookup(modelfetch.Default)
	if !ok || g.Repo != "gorilla-llm/gorilla-openfunctions-v2-gguf" || g.File != "gorilla-openfunctions-v2-q4_K_M.gguf" ||
		g.Revision != "bab1cf50a4dd54be06c5ea16fd00e60e872bcd9a" {
		t.Errorf("the default model is %+v", g)
	}
	if _, ok := modelfetch.Lookup(modelfetch.DefaultEmbedding); !ok {
		t.Errorf("no registry entry for %s", modelfetch.DefaultEmbedding)
	}
}
