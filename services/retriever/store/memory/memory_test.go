package memory

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

var quiet = WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

func sv(pairs ...float32) store.SparseVector {
	var v store.SparseVector
	for i := 0; i < len(pairs); i += 2 {
		v.Indices = append(v.Indices, uint32(pairs[i]))
		v.Values = append(v.Values, pairs[i+1])
	}
	return v
}

func doc(id, server string, words store.SparseVector) store.Doc {
	return store.Doc{ID: id, Server: server, Hash: "h-" + id,
		Tool:   &toolmeshv1.Tool{Id: id, Server: server, Name: id},
		Sparse: map[string]store.SparseVector{"words": words}}
}

func corpus() []store.Doc {
	return []store.Doc{
		doc("calc.add", "calc", sv(1, 1, 2, 0.5)),
		doc("calc.sub", "calc", sv(1, 0.2, 3, 1)),
		doc("conv.c2f", "conv", sv(4, 1, 5, 1)),
		doc("conv.f2c", "conv", sv(4, 0.5, 5, 0.5, 1, 0.1)),
	}
}

func ids(hs []store.Hit) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.ID
	}
	return out
}

func search(t *testing.T, s *Store, q store.Query) []string {
	t.Helper()
	hs, err := s.Search(context.Background(), q)
	if err != nil {
		t.Fatalf("Search: %v", err)
	}
	return ids(hs)
}

func TestSearchRanksAndFilters(t *testing.T) {
	s := New()
	ctx := context.Background()
	if err := s.Upsert(ctx, corpus()); err != nil {
		t.Fatal(err)
	}
	q := func(servers ...string) store.Query {
		return store.Query{Sparse: map[string]store.SparseVector{"words": sv(1, 1)}, Limit: 10, Servers: servers}
	}
	tests := []struct {
		name string
		q    store.Query
		want []string
	}{
		{"all", q(), []string{"calc.add", "calc.sub", "conv.f2c"}},
		{"filter", q("conv"), []string{"conv.f2c"}},
		{"unknown server", q("nope"), nil},
		{"limit", store.Query{Sparse: map[string]store.SparseVector{"words": sv(1, 1)}, Limit: 1}, []string{"calc.add"}},
		{"zero limit", store.Query{Sparse: map[string]store.SparseVector{"words": sv(1, 1)}}, nil},
		{"no match", store.Query{Sparse: map[string]store.SparseVector{"words": sv(99, 1)}, Limit: 5}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := search(t, s, tt.q); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestIDFAndFusion(t *testing.T) {
	s := New()
	ctx := context.Background()
	if err := s.Upsert(ctx, corpus()); err != nil {
		t.Fatal(err)
	}
	// Term 1 is in 3 of 4 docs, term 3 in 1: the rare term must win at equal weights.
	if got := search(t, s, store.Query{Sparse: map[string]store.SparseVector{"words": sv(1, 1, 3, 1)}, Limit: 1}); !slices.Equal(got, []string{"calc.sub"}) {
		t.Errorf("rare term: got %v, want calc.sub", got)
	}
	hs, _ := s.Search(ctx, store.Query{Sparse: map[string]store.SparseVector{"words": sv(4, 1)}, Weights: map[string]float64{"words": 2}, Limit: 1})
	if len(hs) != 1 || hs[0].Score != 2 {
		t.Errorf("best normalized score = %v, want 2 (weight × 1)", hs)
	}
}

func TestDenseRRF(t *testing.T) {
	s := New()
	ctx := context.Background()
	docs := corpus()
	for i := range docs {
		docs[i].Dense = []float32{float32(i), 1}
	}
	if err := s.Upsert(ctx, docs); err != nil {
		t.Fatal(err)
	}
	// Dense ranks conv.f2c, conv.c2f, calc.sub, calc.add; lexical finds calc.sub only.
	// RRF (k 60, dense weight 2): calc.sub 2/63+1/61 > conv.f2c 2/61 > conv.c2f 2/62.
	got := search(t, s, store.Query{Dense: []float32{1, 0}, Sparse: map[string]store.SparseVector{"words": sv(3, 1)},
		Weights: map[string]float64{"dense": 2}, Limit: 3})
	if want := []string{"calc.sub", "conv.f2c", "conv.c2f"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestUpsertDeleteIdempotent(t *testing.T) {
	s := New()
	ctx := context.Background()
	for range 2 {
		if err := s.Upsert(ctx, corpus()); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 4 {
		t.Fatalf("Len = %d after upserting twice, want 4", s.Len())
	}
	// Replace a doc: its old terms must stop matching.
	if err := s.Upsert(ctx, []store.Doc{doc("calc.add", "calc", sv(7, 1))}); err != nil {
		t.Fatal(err)
	}
	if got := search(t, s, store.Query{Sparse: map[string]store.SparseVector{"words": sv(2, 1)}, Limit: 5}); len(got) != 0 {
		t.Errorf("old term still matches: %v", got)
	}
	for range 2 {
		if err := s.Delete(ctx, []string{"calc.add", "missing"}); err != nil {
			t.Fatal(err)
		}
	}
	h, _ := s.Hashes(ctx)
	want := map[string]string{"calc.sub": "h-calc.sub", "conv.c2f": "h-conv.c2f", "conv.f2c": "h-conv.f2c"}
	if len(h) != len(want) {
		t.Errorf("Hashes = %v, want %v", h, want)
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("Hashes[%s] = %q, want %q", k, h[k], v)
		}
	}
	if err := s.Upsert(ctx, []store.Doc{{}}); err == nil {
		t.Errorf("Upsert of a doc without id: want an error")
	}
}

func TestPersistenceRoundTrip(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "tools.index")
	s, err := Open(path, quiet, WithFingerprint("enc-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Upsert(ctx, corpus()); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, []string{"conv.c2f"}); err != nil {
		t.Fatal(err)
	}
	q := store.Query{Sparse: map[string]store.SparseVector{"words": sv(1, 1, 5, 1)}, Limit: 10}
	before := search(t, s, q)
	_ = s.Close()

	r, err := Open(path, quiet, WithFingerprint("enc-1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.LoadError() != nil {
		t.Fatalf("LoadError = %v", r.LoadError())
	}
	if got := search(t, r, q); !slices.Equal(got, before) {
		t.Errorf("after reopen got %v, want %v", got, before)
	}
	h, _ := r.Hashes(ctx)
	if len(h) != 3 || h["calc.add"] != "h-calc.add" {
		t.Errorf("Hashes after reopen = %v", h)
	}
	if m, _ := filepath.Glob(path + ".tmp-*"); len(m) != 0 {
		t.Errorf("temp files left behind: %v", m)
	}

	// Another encoder: the snapshot is not used, the store starts empty.
	o, err := Open(path, quiet, WithFingerprint("enc-2"))
	if err != nil {
		t.Fatal(err)
	}
	if o.LoadError() == nil || o.Len() != 0 {
		t.Errorf("fingerprint mismatch: LoadError %v, Len %d; want an error and an empty store", o.LoadError(), o.Len())
	}
}

func TestCorruptSnapshot(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.index")
	s, err := Open(good, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Upsert(ctx, corpus()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(good)
	flipped := slices.Clone(b)
	flipped[len(flipped)-3] ^= 0xff
	tests := []struct {
		name string
		data []byte
	}{
		{"garbage", []byte("not an index")},
		{"empty", nil},
		{"truncated", b[:len(b)/2]},
		{"bit flip", flipped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".index")
			if err := os.WriteFile(path, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, quiet)
			if err != nil {
				t.Fatalf("Open: %v; want a store that starts empty", err)
			}
			if !errors.Is(s.LoadError(), errSnapshot) || s.Len() != 0 {
				t.Errorf("LoadError %v, Len %d", s.LoadError(), s.Len())
			}
			if _, err := os.Stat(path + ".bad"); err != nil {
				t.Errorf("corrupt file not moved aside: %v", err)
			}
			// It serves and persists again.
			if err := s.Upsert(ctx, corpus()[:1]); err != nil {
				t.Fatal(err)
			}
			r, _ := Open(path, quiet)
			if r.LoadError() != nil || r.Len() != 1 {
				t.Errorf("after rebuild: LoadError %v, Len %d", r.LoadError(), r.Len())
			}
		})
	}
}

func TestPersistFailureRollsBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "tools.index"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Upsert(ctx, corpus()[:2]); err != nil {
		t.Fatal(err)
	}
	// Make the directory unwritable by replacing it with a file path's parent that is gone.
	s.path = filepath.Join(dir, "missing-dir", "tools.index")
	if err := s.Upsert(ctx, []store.Doc{doc("calc.add", "calc", sv(9, 1)), doc("new.tool", "x", sv(9, 1))}); err == nil {
		t.Fatal("Upsert with a failing persist: want an error")
	}
	h, _ := s.Hashes(ctx)
	if len(h) != 2 || h["new.tool"] != "" {
		t.Errorf("after a failed batch Hashes = %v, want the 2 earlier docs", h)
	}
	if got := search(t, s, store.Query{Sparse: map[string]store.SparseVector{"words": sv(2, 1)}, Limit: 5}); !slices.Equal(got, []string{"calc.add"}) {
		t.Errorf("earlier version of calc.add not restored: %v", got)
	}
}

func TestConcurrentReadersAndWriter(t *testing.T) {
	s := New()
	ctx := context.Background()
	if err := s.Upsert(ctx, corpus()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for r := 0; r < 8; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				hs, err := s.Search(ctx, store.Query{Sparse: map[string]store.SparseVector{"words": sv(1, 1, 4, 1)}, Limit: 3})
				if err != nil || len(hs) == 0 {
					t.Errorf("Search: %v, %d hits", err, len(hs))
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 100 {
			d := doc("extra", "x", sv(1, float32(i%5+1)))
			if err := s.Upsert(ctx, []store.Doc{d}); err != nil {
				t.Error(err)
			}
			if err := s.Delete(ctx, []string{"extra"}); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
}

func TestClosed(t *testing.T) {
	s := New()
	_ = s.Close()
	ctx := context.Background()
	if err := s.Ready(ctx); err == nil {
		t.Error("Ready after Close: want an error")
	}
	if _, err := s.Search(ctx, store.Query{Limit: 1}); err == nil {
		t.Error("Search after Close: want an error")
	}
}
