package scripts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBufVersion: scripts/buf runs the buf go.mod pins from Buf's release on npm, and falls
// back to `go tool buf` (here a stand-in go that says how it was called: compiling buf would
// cost the minutes the script saves) when told to or when the registry cannot be reached.
func TestBufVersion(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/bufbuild/buf v(\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod does not require github.com/bufbuild/buf")
	}
	want := string(m[1])
	fakeGo := t.TempDir()
	if err := os.WriteFile(filepath.Join(fakeGo, "go"), []byte("#!/bin/sh\necho \"go $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := "PATH=" + fakeGo + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, c := range []struct {
		name, out string
		env       []string
	}{
		{"release", want, nil},
		{"compiled when asked", "go tool buf --version", []string{"TOOLMESH_BUF=go", path}},
		{"compiled when npm fails", "go tool buf --version", []string{"npm_config_registry=" + closed, path}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache := t.TempDir()
			code, out, errOut := run(t, append(c.env, "TOOLMESH_SHARED_CACHE="+cache), "buf", "--version")
			if code != 0 || strings.TrimSpace(out) != c.out {
				t.Fatalf("scripts/buf --version: exit %d, %q, want %q\n%s", code, out, c.out, errOut)
			}
			cached, _ := filepath.Glob(filepath.Join(cache, "buf", "*", "bin", "buf"))
			if (c.name == "release") != (len(cached) == 1) {
				t.Errorf("release binaries cached: %v", cached)
			}
		})
	}
}
