package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/modelfetch/hubtest"
)

// TestModelCommands pulls from the hub double through HF_ENDPOINT, then lists and removes.
func TestModelCommands(t *testing.T) {
	hub := hubtest.NewFromEnv(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	data := bytes.Repeat([]byte("GGUF tiny model "), 20_000)
	sum := hub.File("acme/tiny", commit, "tiny.gguf", data, true)
	ref := "hf://acme/tiny/tiny.gguf@" + commit
	dir := t.TempDir()
	t.Setenv(modelfetch.EnvDir, dir)

	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, errOut := run("model", "pull", ref, "--progress-every=0s")
	path := modelfetch.Cache{Dir: dir}.FilePath("acme/tiny", commit, "tiny.gguf")
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
		!strings.Contains(out, "Not pulled: "+modelfetch.Default) {
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

// runMain runs the toolmesh command line in the test.
func runMain(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestModelListTrust: `model ls` says which files were checked against a pinned digest and
// which only against the hub's word, and where each came from; it reports a download left
// unfinished with the commands that resume or remove it (issue 26 items 6 and 7).
func TestModelListTrust(t *testing.T) {
	hub := hubtest.NewFromEnv(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	data := bytes.Repeat([]byte("GGUF tiny model "), 1000)
	sum := hub.File("acme/tiny", commit, "tiny.gguf", data, true)
	hub.File("acme/tiny", commit, "other.gguf", data[1:], true)
	dir := t.TempDir()
	t.Setenv(modelfetch.EnvDir, dir)
	pinnedRef := "hf://acme/tiny/tiny.gguf@" + commit + "#sha256:" + sum
	hubRef := "hf://acme/tiny/other.gguf@" + commit
	for _, r := range []string{pinnedRef, hubRef} {
		if code, _, errOut := runMain("model", "pull", r); code != 0 {
			t.Fatalf("model pull %s: exit %d:\n%s", r, code, errOut)
		}
	}
	part := modelfetch.Cache{Dir: dir}.FilePath("acme/cut", commit, "cut.gguf") + ".part"
	if err := os.MkdirAll(filepath.Dir(part), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(part, make([]byte, 1500), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runMain("model", "ls")
	if code != 0 {
		t.Fatalf("model ls: exit %d:\n%s", code, errOut)
	}
	lines := strings.Split(out, "\n")
	line := func(s string) string {
		for _, l := range lines {
			if strings.Contains(l, s) {
				return l
			}
		}
		return ""
	}
	if l := line("tiny.gguf@"); !strings.Contains(l, "pinned sha256 (reference)") || !strings.Contains(l, hub.URL) {
		t.Errorf("model ls line of the pinned file: %q; want it checked against a pinned sha256, from %s", l, hub.URL)
	}
	if l := line("other.gguf@"); !strings.Contains(l, "hub only, not pinned") {
		t.Errorf("model ls line of the file the hub vouched for: %q; want it marked not pinned", l)
	}
	if !strings.Contains(out, "--print-pin") {
		t.Errorf("model ls does not say how to pin the unpinned file:\n%s", out)
	}
	cutRef := "hf://acme/cut/cut.gguf@" + commit
	if l := line(part); !strings.Contains(l, "1.5 kB") || !strings.Contains(out, "toolmesh model pull "+cutRef) || !strings.Contains(out, "toolmesh model rm "+cutRef) {
		t.Errorf("model ls does not report the partial download %s (1.5 kB) with how to resume or remove it:\n%s", part, out)
	}

	code, out, _ = runMain("model", "ls", "--json")
	var rows []struct {
		Ref     string `json:"ref"`
		Path    string `json:"path"`
		Size    int64  `json:"size"`
		Pinned  bool   `json:"pinned"`
		Partial bool   `json:"partial"`
	}
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != 3 {
		t.Fatalf("model ls --json: exit %d, %v:\n%s", code, err, out)
	}
	for _, r := range rows {
		switch {
		case strings.HasPrefix(r.Ref, "hf://acme/tiny/tiny.gguf"):
			if !r.Pinned || r.Partial {
				t.Errorf("pinned file's row %+v", r)
			}
		case strings.HasPrefix(r.Ref, "hf://acme/tiny/other.gguf"):
			if r.Pinned || r.Partial {
				t.Errorf("hub-vouched file's row %+v", r)
			}
		case r.Ref == cutRef:
			if !r.Partial || r.Path != part || r.Size != 1500 {
				t.Errorf("partial download's row %+v, want partial, %s, 1500 bytes", r, part)
			}
		default:
			t.Errorf("unexpected row %+v", r)
		}
	}

	if code, out, _ := runMain("model", "rm", cutRef); code != 0 || !strings.Contains(out, "removed "+part) {
		t.Errorf("model rm of a partial download: exit %d, %q", code, out)
	}
}

// TestModelPrintPin: `model pull --print-pin` prints what a maintainer pastes into the registry
// and what a user appends to a reference, after hashing the bytes again (issue 26 item 7).
func TestModelPrintPin(t *testing.T) {
	hub := hubtest.NewFromEnv(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	data := bytes.Repeat([]byte("GGUF tiny model "), 1000)
	sum := hub.File("acme/tiny", commit, "tiny.gguf", data, true)
	hub.Branch("acme/tiny", "main", commit)
	t.Setenv(modelfetch.EnvDir, t.TempDir())
	code, out, errOut := runMain("model", "pull", "--print-pin", "hf://acme/tiny/tiny.gguf@main")
	if code != 0 {
		t.Fatalf("model pull --print-pin: exit %d:\n%s", code, errOut)
	}
	for _, want := range []string{
		"hf://acme/tiny/tiny.gguf@" + commit + "#sha256:" + sum,
		`SHA256: "` + sum + `",`,
		"Size:   " + strconv.Itoa(len(data)) + ",",
		hub.URL,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("model pull --print-pin lacks %q:\n%s", want, out)
		}
	}
	// A second time the file is in the cache: it is hashed again, and the hub asked again.
	heads := len(hub.Requests())
	if code, out2, _ := runMain("model", "pull", "--print-pin", "hf://acme/tiny/tiny.gguf@main"); code != 0 || out2 != out {
		t.Errorf("second --print-pin: exit %d:\n%s\nwant the same pin", code, out2)
	}
	if len(hub.Requests()) == heads {
		t.Error("--print-pin of a cached file did not ask the hub")
	}
}

// TestModelPullSecrets: HF_ENDPOINT's credentials and the CDN's signed query reach neither
// the log of `model pull` (its retry warning included) nor what it prints, nor the manifest
// (issue 26 item 8).
func TestModelPullSecrets(t *testing.T) {
	hub := hubtest.NewFromEnv(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	hub.File("acme/tiny", commit, "tiny.gguf", bytes.Repeat([]byte("GGUF"), 1000), true)
	t.Setenv(modelfetch.EnvEndpoint, strings.Replace(hub.URL, "://", "://user:secret@", 1))
	dir := t.TempDir()
	t.Setenv(modelfetch.EnvDir, dir)
	hub.Hangup(1) // one retry, whose warning quotes Go's error
	code, out, errOut := runMain("model", "pull", "hf://acme/tiny/tiny.gguf@"+commit)
	if code != 0 || !strings.Contains(errOut, "trying again") {
		t.Fatalf("model pull: exit %d, want 0 after one retry:\n%s", code, errOut)
	}
	_, ls, _ := runMain("model", "ls", "--json")
	manifest, _ := os.ReadFile(modelfetch.Cache{Dir: dir}.FilePath("acme/tiny", commit, "tiny.gguf") + ".toolmesh.json")
	for what, text := range map[string]string{"stdout": out, "stderr": errOut, "model ls --json": ls, "the manifest": string(manifest)} {
		for _, secret := range []string{hub.Signature, "secret"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds %q:\n%s", what, secret, text)
			}
		}
	}
}

// TestLoggerRedacts: every command's logger masks URL credentials, whatever logs through it.
func TestLoggerRedacts(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		newLogger(&buf, slog.LevelInfo, format).Info("pulling", "hub", "https://user:S3CRET@mirror.example/",
			"err", fmt.Errorf("get %q: EOF", "https://cdn.example/blob?X-Amz-Signature=S3CRET"))
		if strings.Contains(buf.String(), "S3CRET") || !strings.Contains(buf.String(), "mirror.example") {
			t.Errorf("%s log: %s; want the host without the secrets", format, buf.String())
		}
	}
}
