package modelfetch_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

// closedPort is a loopback address nothing listens on (a moment ago).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestPullUnreachable: a hub that cannot be reached at all (a closed port, a name that does not
// resolve) fails the pull at once, without the five retries meant for a hub that answered
// and then failed, with one line that names the reference once, the host and the cause in
// words, and neither Go's quoted URL nor its dial jargon (issue 31 items 3 and 5).
func TestPullUnreachable(t *testing.T) {
	closed := closedPort(t)
	for _, tc := range []struct {
		name, endpoint, host, cause string
	}{
		{"closed port", "http://" + closed, closed, "connection refused"},
		// .invalid never resolves (RFC 6761); without a resolver the cause is the lookup's.
		{"no such host", "http://hub.invalid", "hub.invalid", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			f := &modelfetch.Fetcher{Endpoint: tc.endpoint, BackoffMin: 200 * time.Millisecond, BackoffMax: time.Second,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			r := ref(t, pinned())
			began := time.Now()
			_, err := f.Pull(context.Background(), modelfetch.Cache{Dir: t.TempDir()}, r)
			took := time.Since(began)
			if !errors.Is(err, modelfetch.ErrUnreachable) || modelfetch.Permanent(err) {
				t.Fatalf("Pull: %v; want ErrUnreachable, not permanent", err)
			}
			msg := err.Error()
			want := r.String() + ": cannot reach the hub at " + tc.host + ": " + tc.cause
			if !strings.HasPrefix(msg, want) {
				t.Errorf("error %q; want it to start %q", msg, want)
			}
			for _, raw := range []string{"HEAD", "dial tcp", "/resolve/", `"`, "\n", "giving up"} {
				if strings.Contains(msg, raw) {
					t.Errorf("error %q holds %q", msg, raw)
				}
			}
			if n := strings.Count(msg, r.String()); n != 1 {
				t.Errorf("error %q names the reference %d times, want once", msg, n)
			}
			if strings.Contains(logs.String(), "trying again") || took > 5*time.Second {
				t.Errorf("Pull took %s and logged:\n%s\nwant one try, no retries", took, logs.String())
			}
		})
	}
}

// TestPullGivesUpOneLine: a hub that keeps answering 503 is retried, and the error that ends
// the pull names the reference once and who answered what, without the request's URL.
func TestPullGivesUpOneLine(t *testing.T) {
	hub, f, c, _, _ := setup(t)
	hub.Fail5xx(100)
	f.Attempts = 2
	r := ref(t, pinned())
	_, err := f.Pull(context.Background(), c, r)
	if err == nil {
		t.Fatal("Pull against a hub that keeps failing succeeded")
	}
	msg := err.Error()
	host := strings.TrimPrefix(hub.URL, "http://")
	if !strings.Contains(msg, "the hub at "+host+" answered HEAD with 503 Service Unavailable;") || !strings.Contains(msg, "giving up after 2 tries") {
		t.Errorf("error %q; want the hub's host, its 503 and the give-up", msg)
	}
	if strings.Count(msg, r.String()) != 1 || strings.Contains(msg, "/resolve/") {
		t.Errorf("error %q; want the reference once and no URL", msg)
	}
}

// TestCheckFile: a local model file is checked before anything runs it: it must exist and
// start as GGUF files do, and the error says what it is instead (issue 31 item 4).
func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"gguf", write("ok.gguf", "GGUF\x03\x00\x00\x00rest"), ""},
		{"missing", filepath.Join(dir, "missing.gguf"), "does not exist"},
		{"folder", dir, "is a folder"},
		{"empty", write("empty.gguf", ""), "is empty"},
		{"lfs pointer", write("lfs.gguf", "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 4\n"), "Git LFS pointer"},
		{"web page", write("page.gguf", "\n<!DOCTYPE html><html>"), "web page"},
		{"other bytes", write("zip.gguf", "PK\x03\x04rest"), `it starts with "PK\x03\x04"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := modelfetch.CheckFile(tc.path)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckFile: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path)):
				t.Errorf("CheckFile: %v; want the path and %q", err, tc.want)
			}
		})
	}
}
