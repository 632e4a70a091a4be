package modelfetch_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/modelfetch/hubtest"
)

// Trust in the cache (issue 26 item 7): a file the hub's word vouched for is reused only for
// that hub; a file whose digest is pinned is reused from anywhere, and says so.

// otherHub is a second hub (another mirror) with other bytes under the same coordinates.
func otherHub(t *testing.T) (*hubtest.Hub, *modelfetch.Fetcher, []byte) {
	t.Helper()
	hub := hubtest.New(t)
	data := randomBytes(300_000)
	data[0] ^= 0xff
	hub.File(repoID, commit, file, data, true)
	return hub, &modelfetch.Fetcher{Endpoint: hub.URL, BackoffMin: 1, BackoffMax: 1}, data
}

func TestCacheTiedToEndpoint(t *testing.T) {
	t.Run("the hub's word is reused for that hub only", func(t *testing.T) {
		hubA, fA, c, _, sumA := setup(t)
		hubB, fB, dataB := otherHub(t)
		r := ref(t, pinned())
		e, err := fA.Pull(context.Background(), c, r)
		if err != nil {
			t.Fatal(err)
		}
		if e.Endpoint != hubA.URL {
			t.Errorf("entry endpoint %q, want %s", e.Endpoint, hubA.URL)
		}
		if _, ok, _ := c.Lookup(r, fA.Hub()); !ok {
			t.Error("Lookup for the hub it came from misses")
		}
		if got, ok, _ := c.Lookup(r, fB.Hub()); ok {
			t.Fatalf("Lookup for another hub found %+v (sha256 %s from %s)", got, sumA, hubA.URL)
		}
		p, err := modelfetch.Ensure(context.Background(), fB, c, r)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); !bytes.Equal(got, dataB) {
			t.Error("Ensure through hub B serves hub A's bytes")
		}
		if n := count(hubB.Requests(), "cdn", "GET"); n != 1 {
			t.Errorf("%d downloads from hub B, want 1", n)
		}
		if e, ok, _ := c.Lookup(r, fB.Hub()); !ok || e.Endpoint != hubB.URL {
			t.Errorf("after pulling from hub B: %+v, %v; want the entry tied to %s", e, ok, hubB.URL)
		}
	})
	t.Run("a pinned digest is reused from any hub", func(t *testing.T) {
		_, fA, c, _, sumA := setup(t)
		hubB, fB, _ := otherHub(t)
		r := ref(t, pinned()+"#sha256:"+sumA)
		if _, err := fA.Pull(context.Background(), c, r); err != nil {
			t.Fatal(err)
		}
		if _, err := modelfetch.Ensure(context.Background(), fB, c, r); err != nil {
			t.Fatal(err)
		}
		if n := len(hubB.Requests()); n != 0 {
			t.Errorf("%d requests to hub B for a file whose pinned digest is in the cache, want 0", n)
		}
	})
	t.Run("credentials in the endpoint do not split the cache", func(t *testing.T) {
		hub, f, c, _, _ := setup(t)
		r := ref(t, pinned())
		if _, err := f.Pull(context.Background(), c, r); err != nil {
			t.Fatal(err)
		}
		withUser := &modelfetch.Fetcher{Endpoint: strings.Replace(hub.URL, "://", "://user:pw@", 1) + "/"}
		if _, ok, _ := c.Lookup(r, withUser.Hub()); !ok {
			t.Errorf("Lookup through %s misses a file pulled from %s", withUser.Hub(), hub.URL)
		}
	})
}

func TestPinnedDigestReported(t *testing.T) {
	_, f, c, data, sum := setup(t)
	modelfetch.SetRegistry(t, []modelfetch.Known{{Name: "tiny", Repo: repoID, File: file, Revision: commit, SHA256: sum, Size: int64(len(data))}})
	tiny := ref(t, "tiny")
	e, err := f.Pull(context.Background(), c, tiny)
	if err != nil {
		t.Fatal(err)
	}
	if e.Verified != "registry" || !e.Pinned() {
		t.Errorf("a model pinned in the registry: verified against %q, pinned %v; want registry, true", e.Verified, e.Pinned())
	}
	hub2, f2, data2 := otherHub(t)
	c2 := modelfetch.Cache{Dir: t.TempDir()}
	if _, err := f2.Pull(context.Background(), c2, tiny); !errors.Is(err, modelfetch.ErrIntegrity) {
		t.Errorf("a hub that states another digest than the registry's: %v, want ErrIntegrity", err)
	}
	hub2.File(repoID, commit, "other.gguf", data2, true)
	e2, err := f2.Pull(context.Background(), c2, ref(t, "hf://"+repoID+"/other.gguf@"+commit))
	if err != nil {
		t.Fatal(err)
	}
	if e2.Verified != "hub" || e2.Pinned() {
		t.Errorf("a model checked against the hub's word: verified against %q, pinned %v; want hub, false", e2.Verified, e2.Pinned())
	}
	entries, err := c.List()
	if err != nil || len(entries) != 1 || !entries[0].Pinned() || entries[0].Name != "tiny" {
		t.Errorf("List = %+v, %v; want the registry model, pinned", entries, err)
	}
}

func TestVerifyRehashes(t *testing.T) {
	_, f, c, _, _ := setup(t)
	e, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(e); err != nil {
		t.Fatalf("Verify of the file just pulled: %v", err)
	}
	b, _ := os.ReadFile(e.Path)
	b[len(b)/2] ^= 1
	if err := os.WriteFile(e.Path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(e); !errors.Is(err, modelfetch.ErrIntegrity) || !strings.Contains(err.Error(), e.SHA256) {
		t.Errorf("Verify of a file changed since: %v; want ErrIntegrity naming the sha256 expected", err)
	}
}
