package modelfetch_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/modelfetch/hubtest"
)

const (
	repoID  = "acme/tiny-gguf"
	commit  = "0123456789abcdef0123456789abcdef01234567"
	commit2 = "89abcdef0123456789abcdef0123456789abcdef"
	file    = "tiny-q4.gguf"
)

func randomBytes(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

// setup starts a hub double holding one LFS file and returns a fetcher for it.
func setup(t *testing.T) (*hubtest.Hub, *modelfetch.Fetcher, modelfetch.Cache, []byte, string) {
	t.Helper()
	hub := hubtest.New(t)
	data := randomBytes(300_000)
	sum := hub.File(repoID, commit, file, data, true)
	f := &modelfetch.Fetcher{Endpoint: hub.URL, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond}
	return hub, f, modelfetch.Cache{Dir: t.TempDir()}, data, sum
}

func ref(t *testing.T, s string) modelfetch.Ref {
	t.Helper()
	r, err := modelfetch.ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func pinned() string { return "hf://" + repoID + "/" + file + "@" + commit }

func count(reqs []hubtest.Request, host, method string) int {
	n := 0
	for _, r := range reqs {
		if r.Host == host && r.Method == method {
			n++
		}
	}
	return n
}

// leftovers lists what is in the file's folder besides the file and its manifest.
func leftovers(t *testing.T, c modelfetch.Cache) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(c.Dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".lock") {
			out = append(out, filepath.Base(p))
		}
		return nil
	})
	return out
}

func TestPullFresh(t *testing.T) {
	hub, f, c, data, sum := setup(t)
	e, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(e.Path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("pulled file: %d bytes (err %v), want the %d served", len(got), err, len(data))
	}
	if want := c.FilePath(repoID, commit, file); e.Path != want {
		t.Errorf("path %s, want %s", e.Path, want)
	}
	if e.SHA256 != sum || e.Commit != commit || e.Size != int64(len(data)) || e.Verified != "hub" {
		t.Errorf("entry %+v, want sha256 %s, commit %s, %d bytes, verified against the hub", e, sum, commit, len(data))
	}
	reqs := hub.Requests()
	if count(reqs, "hub", "HEAD") != 1 || count(reqs, "cdn", "GET") != 1 {
		t.Errorf("requests %+v, want one HEAD to the hub and one GET to the CDN", reqs)
	}

	// A second pull finds the verified file; Ensure does not even ask the hub.
	if _, err := f.Pull(context.Background(), c, ref(t, pinned())); err != nil {
		t.Fatal(err)
	}
	p, err := modelfetch.Ensure(context.Background(), f, c, ref(t, pinned()))
	if err != nil || p != e.Path {
		t.Fatalf("Ensure = %q, %v; want %s", p, err, e.Path)
	}
	if n := count(hub.Requests(), "cdn", "GET"); n != 1 {
		t.Errorf("%d downloads after pulling twice and Ensure, want 1", n)
	}
	if got := len(hub.Requests()); got != 3 {
		t.Errorf("%d requests, want 3 (HEAD, GET, HEAD of the second pull; none for Ensure)", got)
	}
	entries, err := c.List()
	if err != nil || len(entries) != 1 || entries[0].Path != e.Path {
		t.Errorf("List = %+v, %v; want the one file", entries, err)
	}
}

func TestPullResumesAfterCut(t *testing.T) {
	t.Run("connection cut mid-file", func(t *testing.T) {
		hub, f, c, data, _ := setup(t)
		hub.CutAfter(100_000, 1)
		e, err := f.Pull(context.Background(), c, ref(t, pinned()))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(e.Path)
		if !bytes.Equal(got, data) {
			t.Fatalf("resumed file has %d bytes, want the %d served", len(got), len(data))
		}
		var ranges []string
		for _, r := range hub.Requests() {
			if r.Host == "cdn" {
				ranges = append(ranges, r.Range)
			}
		}
		if len(ranges) != 2 || ranges[0] != "" || ranges[1] != "bytes=100000-" {
			t.Errorf("CDN ranges %q, want a full GET then one resuming at byte 100000", ranges)
		}
	})
	t.Run("partial file left by an earlier run", func(t *testing.T) {
		hub, f, c, data, _ := setup(t)
		part := c.FilePath(repoID, commit, file) + ".part"
		if err := os.MkdirAll(filepath.Dir(part), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(part, data[:123_456], 0o644); err != nil {
			t.Fatal(err)
		}
		e, err := f.Pull(context.Background(), c, ref(t, pinned()))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(e.Path); !bytes.Equal(got, data) {
			t.Fatalf("resumed file has %d bytes, want %d", len(got), len(data))
		}
		reqs := hub.Requests()
		if last := reqs[len(reqs)-1]; last.Host != "cdn" || last.Range != "bytes=123456-" {
			t.Errorf("last request %+v, want a CDN GET resuming at byte 123456", last)
		}
	})
}

func TestPullRefusesCorruptBytes(t *testing.T) {
	hub, f, c, _, sum := setup(t)
	hub.Corrupt(1)
	_, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if !errors.Is(err, modelfetch.ErrIntegrity) || !strings.Contains(err.Error(), "want "+sum) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("Pull of corrupted bytes: %v; want ErrIntegrity naming sha256 %s and saying the download was removed", err, sum)
	}
	if left := leftovers(t, c); len(left) != 0 {
		t.Errorf("files left after a refused download: %v", left)
	}
	if _, ok, _ := c.Lookup(ref(t, pinned()), f.Hub()); ok {
		t.Error("a refused file is found in the cache")
	}
}

func TestPullRefusesWrongRevision(t *testing.T) {
	t.Run("revision the hub does not have", func(t *testing.T) {
		_, f, c, _, _ := setup(t)
		_, err := f.Pull(context.Background(), c, ref(t, "hf://"+repoID+"/"+file+"@"+commit2))
		if !errors.Is(err, modelfetch.ErrNotFound) || !strings.Contains(err.Error(), "revision "+commit2) {
			t.Errorf("Pull of an unknown commit: %v; want ErrNotFound naming the revision", err)
		}
	})
	t.Run("hub answers for another commit", func(t *testing.T) {
		hub, f, c, _, _ := setup(t)
		hub.ClaimCommit(commit2)
		_, err := f.Pull(context.Background(), c, ref(t, pinned()))
		if !errors.Is(err, modelfetch.ErrRevision) || !strings.Contains(err.Error(), commit2) {
			t.Errorf("Pull when the hub claims %s: %v; want ErrRevision", commit2, err)
		}
		if n := count(hub.Requests(), "cdn", "GET"); n != 0 {
			t.Errorf("%d downloads of a file from the wrong revision", n)
		}
		if left := leftovers(t, c); len(left) != 0 {
			t.Errorf("files left: %v", left)
		}
	})
	t.Run("pinned sha256 differs from the hub's", func(t *testing.T) {
		hub, f, c, _, sum := setup(t)
		wrong := strings.Repeat("ab", 32)
		_, err := f.Pull(context.Background(), c, ref(t, pinned()+"#sha256:"+wrong))
		if !errors.Is(err, modelfetch.ErrIntegrity) || !strings.Contains(err.Error(), sum) || !strings.Contains(err.Error(), wrong) {
			t.Errorf("Pull with a pinned sha256 the hub contradicts: %v", err)
		}
		if n := count(hub.Requests(), "cdn", "GET"); n != 0 {
			t.Errorf("%d downloads although the checksums disagree up front", n)
		}
	})
}

func TestTokenGoesToTheHubOnly(t *testing.T) {
	hub, f, c, _, _ := setup(t)
	hub.Gate(repoID, "hf_secret")
	_, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if !errors.Is(err, modelfetch.ErrAccess) || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Fatalf("Pull of a gated repository without a token: %v; want ErrAccess naming HF_TOKEN", err)
	}
	f.Token = "hf_secret"
	if _, err := f.Pull(context.Background(), c, ref(t, pinned())); err != nil {
		t.Fatal(err)
	}
	var cdn int
	for _, r := range hub.Requests() {
		switch r.Host {
		case "cdn":
			cdn++
			if r.Authorization != "" {
				t.Errorf("the CDN got Authorization %q", r.Authorization)
			}
		case "hub":
			if r.Authorization != "" && r.Authorization != "Bearer hf_secret" {
				t.Errorf("the hub got Authorization %q", r.Authorization)
			}
		}
	}
	if cdn == 0 {
		t.Error("nothing was downloaded from the CDN")
	}
	f.Token = "hf_other"
	_, err = f.Pull(context.Background(), modelfetch.Cache{Dir: t.TempDir()}, ref(t, pinned()))
	if !errors.Is(err, modelfetch.ErrAccess) || strings.Contains(err.Error(), "hf_other") {
		t.Errorf("Pull with a token the repository refuses: %v; want ErrAccess that does not quote the token", err)
	}
}

func TestPullRetries5xx(t *testing.T) {
	hub, f, c, data, _ := setup(t)
	hub.Fail5xx(3)
	e, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(e.Path); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes after retries")
	}
	hub.Fail5xx(100)
	f.Attempts = 2
	_, err = f.Pull(context.Background(), modelfetch.Cache{Dir: t.TempDir()}, ref(t, pinned()))
	if err == nil || !strings.Contains(err.Error(), "giving up after 2 tries") || !strings.Contains(err.Error(), "503") {
		t.Errorf("Pull against a hub that keeps failing: %v; want it to give up after 2 tries naming the 503", err)
	}
}

func TestPullBranchAndAPI(t *testing.T) {
	hub, f, c, data, sum := setup(t)
	hub.Branch(repoID, "main", commit)
	e, err := f.Pull(context.Background(), c, ref(t, "hf://"+repoID+"/"+file+"@main"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Commit != commit || e.Revision != "main" || e.Path != c.FilePath(repoID, commit, file) {
		t.Errorf("entry %+v, want main resolved to %s and stored under it", e, commit)
	}
	if got, ok, err := c.Lookup(ref(t, "hf://"+repoID+"/"+file+"@main"), f.Hub()); err != nil || !ok || got.Path != e.Path {
		t.Errorf("Lookup by branch = %+v, %v, %v", got, ok, err)
	}

	// A non-LFS file: its ETag is a git blob id, and the model API has no lfs.sha256 for it.
	hub.File(repoID, commit, "small.gguf", data[:1000], false)
	_, err = f.Pull(context.Background(), c, ref(t, "hf://"+repoID+"/small.gguf@"+commit))
	if !errors.Is(err, modelfetch.ErrIntegrity) || !strings.Contains(err.Error(), "states no SHA-256") {
		t.Errorf("Pull of a file the hub states no SHA-256 for: %v", err)
	}
	small := sum256(data[:1000])
	e, err = f.Pull(context.Background(), c, ref(t, "hf://"+repoID+"/small.gguf@"+commit+"#sha256:"+small))
	if err != nil || e.Verified != "reference" {
		t.Errorf("Pull with the checksum pinned in the reference: %+v, %v", e, err)
	}
	if e, _, _ := c.Lookup(ref(t, pinned()), f.Hub()); e.SHA256 != "" && e.SHA256 != sum {
		t.Errorf("cached sha256 %s, want %s", e.SHA256, sum)
	}
}

func TestPullChecksumFromModelAPI(t *testing.T) {
	hub, f, c, _, sum := setup(t)
	hub.OmitLinkedEtag()
	e, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if err != nil || e.SHA256 != sum || e.Verified != "hub" {
		t.Fatalf("Pull without X-Linked-Etag = %+v, %v; want the model API's lfs.sha256 %s", e, err, sum)
	}
	var api bool
	for _, r := range hub.Requests() {
		api = api || (r.Path == "/api/models/"+repoID+"/revision/"+commit)
	}
	if !api {
		t.Error("the model API was not asked")
	}
	hub.Corrupt(1)
	_, err = f.Pull(context.Background(), modelfetch.Cache{Dir: t.TempDir()}, ref(t, pinned()))
	if !errors.Is(err, modelfetch.ErrIntegrity) {
		t.Errorf("corrupt bytes checked against the model API's sha256: %v, want ErrIntegrity", err)
	}
}

func TestHFEndpointFromEnv(t *testing.T) {
	hub, _, c, _, _ := setup(t)
	t.Setenv(modelfetch.EnvEndpoint, hub.URL+"/")
	t.Setenv(modelfetch.EnvToken, "")
	f := modelfetch.FetcherFromEnv(nil)
	if _, err := f.Pull(context.Background(), c, ref(t, pinned())); err != nil {
		t.Fatalf("pull through HF_ENDPOINT: %v", err)
	}
	if n := count(hub.Requests(), "hub", "HEAD"); n != 1 {
		t.Errorf("%d HEADs reached the hub named by HF_ENDPOINT, want 1", n)
	}
}

func TestProgress(t *testing.T) {
	hub, f, c, data, _ := setup(t)
	hub.CutAfter(150_000, 1) // two downloads: progress starts again from the resumed byte
	var logs bytes.Buffer
	logProgress := modelfetch.LogProgress(slog.New(slog.NewTextHandler(&logs, nil)), 0)
	var term bytes.Buffer
	termProgress := modelfetch.TerminalProgress(&term)
	var calls []modelfetch.Progress
	f.ProgressEvery = time.Nanosecond
	f.Progress = func(p modelfetch.Progress) {
		calls = append(calls, p)
		logProgress(p)
		termProgress(p)
	}
	if _, err := f.Pull(context.Background(), c, ref(t, pinned())); err != nil {
		t.Fatal(err)
	}
	if len(calls) < 2 {
		t.Fatalf("%d progress calls, want several", len(calls))
	}
	last := calls[len(calls)-1]
	if !last.Complete || last.Done != int64(len(data)) || last.Total != int64(len(data)) || last.Rate <= 0 {
		t.Errorf("last progress %+v, want complete with %d of %d bytes and a rate", last, len(data), len(data))
	}
	for i := 1; i < len(calls); i++ {
		if calls[i].Done < calls[i-1].Done {
			t.Errorf("progress went back from %d to %d bytes", calls[i-1].Done, calls[i].Done)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if !strings.Contains(lines[0], `msg="downloading model"`) || !strings.Contains(lines[0], "total=300000") ||
		!strings.Contains(lines[0], "rate=") || !strings.Contains(logs.String(), "eta=") {
		t.Errorf("first log line %q, want bytes, total, rate (and an ETA on some line)", lines[0])
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, `msg="model downloaded"`) || !strings.Contains(last, "bytes=300000") {
		t.Errorf("last log line %q, want the download complete", last)
	}
	out := term.String()
	if !strings.HasPrefix(out, "\r") || !strings.HasSuffix(out, "\n") || !strings.Contains(out, "300.0 kB of 300.0 kB (100%)") ||
		!strings.Contains(out, "/s") || !strings.Contains(out, "done") {
		t.Errorf("terminal progress %q, want lines redrawn with \\r, bytes of total, rate, ending with a newline", out)
	}
}

func TestRemove(t *testing.T) {
	_, f, c, _, _ := setup(t)
	e, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if err != nil {
		t.Fatal(err)
	}
	removed, err := c.Remove(ref(t, pinned()))
	if err != nil || len(removed) != 1 || removed[0] != e.Path {
		t.Fatalf("Remove = %v, %v; want [%s]", removed, err, e.Path)
	}
	entries, err := os.ReadDir(c.Dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("cache folder after Remove: %v (%v), want empty", entries, err)
	}
}

func sum256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
