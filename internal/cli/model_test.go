package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/model"
	"github.com/toolmesh/toolmesh/internal/model/hubtest"
)

// TestModelCommands pulls from the hub double through HF_ENDPOINT, then lists and removes.
func TestModelCommands(t *testing.T) {
	hub := hubtest.NewFromEnv(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	data := bytes.Repeat([]byte("GGUF tiny model "), 20_000)
	sum := hub.File("acme/tiny", commit, "tiny.gguf", data, true)
	ref := "hf://acme/tiny/tiny.gguf@" + commit
	dir := t.TempDir()
	t.Setenv(model.EnvDir, dir)

	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, errOut := run("model", "pull", ref, "--progress-every=0s")
	path := model.Cache{Dir: dir}.FilePath("acme/tiny", commit, "tiny.gguf")
	if code != 0 || strings.TrimSpace(out) != path {
		t.Fatalf("model pull: exit %d, stdout %q, stderr:\n%s\nwant the path %s", code, out, errOut, path)
	}
	for _, want := range []string{"pulling model", "downloading model", "model downloaded", "model verified", "sha256=" + sum} {
		if !strings.Contains(errOut, want) {
			t.Errorf("model pull stderr lacks %q:\n%s", want, errOut)
		}
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
		t.Errorf("pulled file has %d bytes, want %d", len(got), len(data))
	}
	if code, out, _ := run("model", "pull", ref); code != 0 || strings.TrimSpace(out) != path {
		t.Errorf("second pull: exit %d, stdout %q", code, out)
	}

	code, out, _ = run("model", "ls")
	if code != 0 || !strings.Contains(out, ref) || !strings.Contains(out, sum[:12]) || !strings.Contains(out, "hub") ||
		!strings.Contains(out, "Not pulled: "+model.Default) {
		t.Errorf("model ls: exit %d:\n%s", code, out)
	}
	code, out, _ = run("model", "ls", "--json")
	if code != 0 || !strings.Contains(out, `"sha256": "`+sum+`"`) || !strings.Contains(out, `"path": "`+path+`"`) {
		t.Errorf("model ls --json: exit %d:\n%s", code, out)
	}

	if code, out, _ := run("model", "rm", ref); code != 0 || !strings.Contains(out, "removed "+path) {
		t.Errorf("model rm: exit %d, %q", code, out)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the file is still there after rm: %v", err)
	}
	if code, _, errOut := run("model", "rm", ref); code != 1 || !strings.Contains(errOut, "is not pulled") {
		t.Errorf("rm of a model not pulled: exit %d, %q", code, errOut)
	}

	hub.Corrupt(1)
	code, out, errOut = run("model", "pull", ref)
	if code != 1 || out != "" || !strings.Contains(errOut, "failed verification") || !strings.Contains(errOut, "want "+sum) {
		t.Errorf("pull of corrupted bytes: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"model", "pull", "llama3"}, "unknown model"},
		{[]string{"model", "pull", "./mine.gguf"}, "local file"},
		{[]string{"model", "frob"}, `unknown command "frob"`},
		{[]string{"model", "rm"}, "usage: toolmesh model rm"},
	} {
		if code, _, errOut := run(tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
