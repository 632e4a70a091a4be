package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/tlsfiles"
)

// TestTLSInit: `toolmesh tls init` lays out a CA and a folder per name whose files load as a
// service's --tls.* files, keeps them on a second run, and refuses bad input with the flag named.
func TestTLSInit(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append([]string{"tls"}, args...), strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	dir := t.TempDir()
	code, out, errOut := run("init", "--dir", dir, "--names", "executor, api")
	if code != 0 || strings.Count(out, "issued ") != 2 {
		t.Fatalf("first init: exit %d, stdout %q, stderr %q; want two certificates issued", code, out, errOut)
	}
	for _, name := range []string{"api", "executor"} {
		sub := filepath.Join(dir, name)
		src, err := tlsfiles.Load(tlsfiles.Files{
			Cert: filepath.Join(sub, tlsfiles.CertFile), Key: filepath.Join(sub, tlsfiles.KeyFile), CA: filepath.Join(sub, tlsfiles.CACertFile),
		}, nil)
		if err != nil {
			t.Fatalf("%s's files do not load as --tls.* files: %v", name, err)
		}
		if err := src.Certificate().Leaf.VerifyHostname(name); err != nil {
			t.Errorf("%s's certificate: %v", name, err)
		}
	}
	if code, out, _ := run("init", "--dir", dir, "--names", "api,executor"); code != 0 || strings.Count(out, "kept ") != 2 {
		t.Errorf("second init: exit %d, stdout %q; want both certificates kept", code, out)
	}

	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"init", "--names", "api"}, 2, "--dir: required"},
		{[]string{"init", "--dir", t.TempDir()}, 1, "--names: no names given"},
		{[]string{"init", "--dir", t.TempDir(), "--names", "API_1"}, 1, `--names: "API_1" is not a lower-case DNS name`},
		{[]string{"init", "--dir", t.TempDir(), "--names", "api", "--valid-for", "1m"}, 1, "--valid-for"},
		{[]string{"renew"}, 2, `unknown command "renew"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errOut := run(tc.args...)
			if code != tc.wantCode || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, tc.wantCode, tc.want)
			}
		})
	}
}
