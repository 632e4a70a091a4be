package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestModelEnv: deploy/model/gorilla.env names the Q4_K_M file of the Gorilla project's GGUF
// repository, and its checksum is either still to be filled in or a SHA-256.
func TestModelEnv(t *testing.T) {
	env := readEnvFile(t, filepath.Join(repoRoot(t), modelEnv))
	file, u, sum := env["MODEL_FILE"], env["MODEL_URL"], env["MODEL_SHA256"]
	if !strings.Contains(file, "q4_K_M") || !strings.HasSuffix(file, ".gguf") {
		t.Errorf("MODEL_FILE = %q, want the Q4_K_M GGUF", file)
	}
	if !strings.HasPrefix(u, "https://huggingface.co/gorilla-llm/gorilla-openfunctions-v2-gguf/resolve/") || !strings.HasSuffix(u, "/"+file) {
		t.Errorf("MODEL_URL = %q, want MODEL_FILE from gorilla-llm/gorilla-openfunctions-v2-gguf", u)
	}
	if sum != "" && !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(sum) {
		t.Errorf("MODEL_SHA256 = %q, want empty (to be filled in) or 64 lowercase hex digits", sum)
	}
}

// modelServer serves one file with range requests (for resumed downloads) and counts requests.
type modelServer struct {
	*httptest.Server
	mu     sync.Mutex
	gets   int
	ranges []string
}

func newModelServer(t *testing.T, content []byte) *modelServer {
	m := &modelServer{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.gets++
		if rg := r.Header.Get("Range"); rg != "" {
			m.ranges = append(m.ranges, rg)
		}
		m.mu.Unlock()
		http.ServeContent(w, r, "model.gguf", time.Unix(0, 0), bytes.NewReader(content))
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *modelServer) requests() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gets
}

// runFetch runs deploy/model/fetch-model.sh as model-init does, with the models volume in dir.
func runFetch(t *testing.T, dir, url, sum string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", filepath.Join(repoRoot(t), "deploy/model/fetch-model.sh"))
	cmd.Env = append(os.Environ(), "MODEL_DIR="+dir, "MODEL_FILE=model.gguf", "MODEL_URL="+url, "MODEL_SHA256="+sum)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestFetchModel runs model-init's script against a local file server: it downloads a
// missing file, resumes a partial one, never installs a file whose checksum it could not
// check or that does not match, and does not download or hash a verified file again.
func TestFetchModel(t *testing.T) {
	for _, tool := range []string{"sh", "curl", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (the llama.cpp image has it): %v", tool, err)
		}
	}
	content := bytes.Repeat([]byte("gguf model bytes "), 64<<10)
	h := sha256.Sum256(content)
	sum := hex.EncodeToString(h[:])
	srv := newModelServer(t, content)
	url := srv.URL + "/model.gguf"
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	t.Run("no checksum yet", func(t *testing.T) {
		dir := t.TempDir()
		out, err := runFetch(t, dir, url, "")
		if err == nil || !strings.Contains(out, sum) || !strings.Contains(out, "MODEL_SHA256 is empty") {
			t.Fatalf("fetch without MODEL_SHA256: err %v, output:\n%s\nwant a failure printing the file's sha256 %s", err, out, sum)
		}
		if exists(filepath.Join(dir, "model.gguf")) {
			t.Error("an unverified download was installed as model.gguf")
		}
		before := srv.requests()
		out, err = runFetch(t, dir, url, sum)
		if err != nil {
			t.Fatalf("fetch once MODEL_SHA256 is filled in: %v\n%s", err, out)
		}
		if srv.requests() != before {
			t.Errorf("the complete unverified download was fetched again")
		}
		got, _ := os.ReadFile(filepath.Join(dir, "model.gguf"))
		if !bytes.Equal(got, content) {
			t.Errorf("model.gguf has %d bytes, want the %d served", len(got), len(content))
		}
	})

	t.Run("download, then nothing to do", func(t *testing.T) {
		dir := t.TempDir()
		if out, err := runFetch(t, dir, url, strings.ToUpper(sum)); err != nil {
			t.Fatalf("fetch: %v\n%s", err, out)
		}
		before := srv.requests()
		out, err := runFetch(t, dir, url, sum)
		if err != nil || !strings.Contains(out, "was verified") || srv.requests() != before {
			t.Errorf("second start: err %v, %d new requests, output:\n%s\nwant nothing downloaded or hashed", err, srv.requests()-before, out)
		}
	})

	t.Run("resume a partial download", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "model.gguf.part"), content[:len(content)/3], 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := runFetch(t, dir, url, sum); err != nil {
			t.Fatalf("fetch: %v\n%s", err, out)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "model.gguf"))
		if !bytes.Equal(got, content) {
			t.Errorf("resumed model.gguf has %d bytes, want %d", len(got), len(content))
		}
		srv.mu.Lock()
		ranges := strings.Join(srv.ranges, " ")
		srv.mu.Unlock()
		if !strings.Contains(ranges, "bytes="+strconv.Itoa(len(content)/3)+"-") {
			t.Errorf("range requests %q, want one resuming at byte %d", ranges, len(content)/3)
		}
	})

	t.Run("wrong checksum", func(t *testing.T) {
		dir := t.TempDir()
		wrong := strings.Repeat("0", 64)
		out, err := runFetch(t, dir, url, wrong)
		if err == nil || !strings.Contains(out, "want "+wrong) {
			t.Errorf("fetch with a wrong MODEL_SHA256: err %v, output:\n%s", err, out)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 0 {
			t.Errorf("files left after a checksum mismatch: %v", entries)
		}
	})

	t.Run("a different file already there", func(t *testing.T) {
		dir := t.TempDir()
		other := filepath.Join(dir, "model.gguf")
		if err := os.WriteFile(other, []byte("something else"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := runFetch(t, dir, url, sum)
		if err == nil || !strings.Contains(out, "want "+sum) {
			t.Errorf("fetch over a different file: err %v, output:\n%s", err, out)
		}
		if got, _ := os.ReadFile(other); string(got) != "something else" {
			t.Error("the existing file was changed")
		}
	})

	t.Run("malformed checksum", func(t *testing.T) {
		out, err := runFetch(t, t.TempDir(), url, "abc")
		if err == nil || !strings.Contains(out, "not 64 hex digits") {
			t.Errorf("fetch with MODEL_SHA256=abc: err %v, output:\n%s", err, out)
		}
	})
}
