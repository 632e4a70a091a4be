package modelfetch_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

// The fetcher's bounds (issue 26 item 6): what the hub does not state is not downloaded, what
// it states bounds the bytes, the disk, and the time a pull may take.

func TestPullRefusesUnstatedSize(t *testing.T) {
	hub, f, c, _, _ := setup(t)
	hub.OmitSize()
	_, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if !errors.Is(err, modelfetch.ErrIntegrity) || !strings.Contains(err.Error(), "states no size") {
		t.Fatalf("Pull of a file the hub states no size for: %v; want ErrIntegrity saying the hub states no size", err)
	}
	if n := count(hub.Requests(), "cdn", "GET"); n != 0 {
		t.Errorf("%d downloads of a file of unknown size, want none", n)
	}
	if left := leftovers(t, c); len(left) != 0 {
		t.Errorf("files left: %v", left)
	}
}

func TestPullCapsAtStatedSize(t *testing.T) {
	hub, f, c, data, _ := setup(t)
	hub.Overlong(4096)
	_, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if !errors.Is(err, modelfetch.ErrIntegrity) || !strings.Contains(err.Error(), "300000 bytes") {
		t.Fatalf("Pull when the CDN sends more than stated: %v; want ErrIntegrity naming the %d bytes stated", err, len(data))
	}
	if left := leftovers(t, c); len(left) != 0 {
		t.Errorf("files left after a download longer than stated: %v", left)
	}
	if n := count(hub.Requests(), "cdn", "GET"); n != 1 {
		t.Errorf("%d downloads, want 1 (a longer body is not retried)", n)
	}
}

func TestPullChecksFreeSpace(t *testing.T) {
	tests := []struct {
		name    string
		part    int   // bytes of an earlier download already in FILE.part
		free    int64 // bytes free on the models folder's disk
		wantErr bool
	}{
		{name: "room for the file", free: 300_000},
		{name: "short of room", free: 299_999, wantErr: true},
		{name: "room for the rest of a partial download", part: 200_000, free: 100_000},
		{name: "short of room for the rest", part: 200_000, free: 99_999, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hub, f, c, data, _ := setup(t)
			final := c.FilePath(repoID, commit, file)
			if tt.part > 0 {
				if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(final+".part", data[:tt.part], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var asked []string
			f.FreeSpace = func(dir string) (int64, error) {
				asked = append(asked, dir)
				return tt.free, nil
			}
			_, err := f.Pull(context.Background(), c, ref(t, pinned()))
			if len(asked) == 0 || asked[0] != filepath.Dir(final) {
				t.Errorf("free space asked for %q, want the file's folder %s", asked, filepath.Dir(final))
			}
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("Pull with %d bytes free: %v", tt.free, err)
				}
				return
			}
			need := int64(len(data) - tt.part)
			if !errors.Is(err, modelfetch.ErrSpace) || !modelfetch.Permanent(err) || !strings.Contains(err.Error(), modelfetch.Bytes(need)) ||
				!strings.Contains(err.Error(), filepath.Dir(final)) || !strings.Contains(err.Error(), "--models-dir") {
				t.Fatalf("Pull with %d bytes free: %v; want ErrSpace naming the %s needed, the folder and --models-dir", tt.free, err, modelfetch.Bytes(need))
			}
			if n := count(hub.Requests(), "cdn", "GET"); n != 0 {
				t.Errorf("%d downloads started without the room for them", n)
			}
		})
	}
}

// TestPullDeadline: a CDN that sends a byte just often enough to keep the idle timer quiet
// (one byte every 59 s kept a pull alive forever) is stopped by the pull's deadline; what came
// is kept for the next pull to resume.
func TestPullDeadline(t *testing.T) {
	hub, f, c, _, _ := setup(t)
	hub.Trickle(5 * time.Millisecond)
	f.IdleTimeout = time.Second
	f.Deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := f.Pull(ctx, c, ref(t, pinned()))
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("Pull of a trickle still running after %s: no deadline", took.Round(time.Millisecond))
	}
	if !errors.Is(err, modelfetch.ErrDeadline) || !strings.Contains(err.Error(), "300ms") || !strings.Contains(err.Error(), "resume") {
		t.Fatalf("Pull of a trickle: %v; want ErrDeadline naming the 300ms and that the next pull resumes", err)
	}
	if took > 3*time.Second {
		t.Errorf("Pull took %s with a 300ms deadline", took.Round(time.Millisecond))
	}
	parts, perr := c.Partials()
	if perr != nil || len(parts) != 1 || parts[0].Size == 0 {
		t.Errorf("partial downloads after the deadline: %+v, %v; want the bytes that came kept", parts, perr)
	}
}

func TestPullDeadlineDefault(t *testing.T) {
	tests := []struct {
		size int64
		want time.Duration
	}{
		{0, 10 * time.Minute},
		{46_000_000, 10*time.Minute + 460*time.Second},
		{4_300_000_000, 10*time.Minute + 43_000*time.Second}, // about 12 h for the 4.3 GB model
	}
	for _, tt := range tests {
		if got := modelfetch.PullDeadline(tt.size); got != tt.want {
			t.Errorf("PullDeadline(%d) = %s, want %s", tt.size, got, tt.want)
		}
	}
}

// TestPartials: a download cut short leaves FILE.part, which Partials reports (for `model ls`)
// with the reference that resumes it.
func TestPartials(t *testing.T) {
	hub, f, c, _, _ := setup(t)
	hub.CutAfter(100_000, 100)
	f.Attempts = 1
	if _, err := f.Pull(context.Background(), c, ref(t, pinned())); err == nil {
		t.Fatal("Pull succeeded through a cut connection")
	}
	parts, err := c.Partials()
	if err != nil || len(parts) != 1 {
		t.Fatalf("Partials = %+v, %v; want the one cut download", parts, err)
	}
	p := parts[0]
	if p.Size != 100_000 || p.Path != c.FilePath(repoID, commit, file)+".part" || p.Ref.String() != pinned() {
		t.Errorf("partial %+v (ref %s), want 100000 bytes in FILE.part, resumed by %s", p, p.Ref, pinned())
	}
	if entries, _ := c.List(); len(entries) != 0 {
		t.Errorf("List shows a partial download as pulled: %+v", entries)
	}
	if _, err := c.Remove(p.Ref); err != nil {
		t.Fatal(err)
	}
	if parts, _ := c.Partials(); len(parts) != 0 {
		t.Errorf("Partials after Remove: %+v", parts)
	}
}
