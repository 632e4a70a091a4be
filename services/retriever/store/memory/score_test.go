package memory

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// naive scores q by the definition in the package doc, with maps, in float64.
func naive(docs []store.Doc, q store.Query) map[string]float64 {
	allowed := func(d store.Doc) bool { return len(q.Servers) == 0 || slices.Contains(q.Servers, d.Server) }
	fused := map[string]float64{}
	for name, qv := range q.Sparse {
		df := map[uint32]int{}
		for _, d := range docs {
			for _, t := range d.Sparse[name].Indices {
				df[t]++
			}
		}
		raw := map[string]float64{}
		mx := 0.0
		for _, d := range docs {
			if !allowed(d) {
				continue
			}
			dv := d.Sparse[name]
			x := 0.0
			for j, t := range qv.Indices {
				if k, ok := slices.BinarySearch(dv.Indices, t); ok {
					n, f := float64(len(docs)), float64(df[t])
					x += math.Log(1+(n-f+0.5)/(f+0.5)) * float64(qv.Values[j]) * float64(dv.Values[k])
				}
			}
			if x > 0 {
				raw[d.ID] = x
				mx = max(mx, x)
			}
		}
		for id, x := range raw {
			fused[id] += weight(q.Weights, name) * x / mx
		}
	}
	return fused
}

func randVec(rng *rand.Rand, vocab, n int) store.SparseVector {
	m := map[uint32]float32{}
	for range n {
		m[uint32(rng.IntN(vocab))] = 0.05 + rng.Float32()
	}
	var v store.SparseVector
	for t := range m {
		v.Indices = append(v.Indices, t)
	}
	slices.Sort(v.Indices)
	for _, t := range v.Indices {
		v.Values = append(v.Values, m[t])
	}
	return v
}

// TestSearchMultiMatchesDefinition checks grouped multi-query scoring (several filters, dense
// and sparse walks, more queries than one group holds, after deletes) against a naive scorer,
// on a small store and on one large enough for groups to be scored on two goroutines.
func TestSearchMultiMatchesDefinition(t *testing.T) {
	for _, size := range []int{600, parallelSlots + 500} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { testSearchMulti(t, size) })
	}
}

func testSearchMulti(t *testing.T, size int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	s := New(quiet)
	var docs []store.Doc
	for i := range size {
		d := store.Doc{ID: fmt.Sprintf("d%05d", i), Server: fmt.Sprintf("s%d", i%5), Hash: "h",
			Sparse: map[string]store.SparseVector{"words": randVec(rng, 300, 8), "chars": randVec(rng, 40, 12)}}
		docs = append(docs, d)
	}
	if err := s.Upsert(ctx, docs); err != nil {
		t.Fatal(err)
	}
	var del []string
	for i := 0; i < len(docs); i += 7 {
		del = append(del, docs[i].ID)
	}
	if err := s.Delete(ctx, del); err != nil {
		t.Fatal(err)
	}
	live := slices.DeleteFunc(slices.Clone(docs), func(d store.Doc) bool { return slices.Contains(del, d.ID) })

	filters := [][]string{nil, {"s1"}, {"s2", "s3"}, {"nope"}}
	var qs []store.Query
	for i := range 40 {
		qs = append(qs, store.Query{
			Sparse:  map[string]store.SparseVector{"words": randVec(rng, 300, 1+rng.IntN(6)), "chars": randVec(rng, 40, 1+rng.IntN(4))},
			Weights: map[string]float64{"chars": 0.35},
			Limit:   1 + rng.IntN(30),
			Servers: filters[i%len(filters)],
		})
	}
	qs[3].Limit = 0
	got, err := s.SearchMulti(ctx, qs)
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range qs {
		want := naive(live, q)
		if q.Limit == 0 {
			want = nil
		}
		if len(got[i]) != min(q.Limit, len(want)) {
			t.Fatalf("query %d: %d hits, want %d", i, len(got[i]), min(q.Limit, len(want)))
		}
		for r, h := range got[i] {
			if w, ok := want[h.ID]; !ok || math.Abs(w-h.Score) > 1e-5 {
				t.Fatalf("query %d rank %d: %s scores %v, want %v (present %v)", i, r, h.ID, h.Score, w, ok)
			}
			if r > 0 && h.Score > got[i][r-1].Score {
				t.Fatalf("query %d: not sorted at rank %d", i, r)
			}
		}
		// Nothing left out scores clearly better than the last kept.
		if n := len(got[i]); n > 0 {
			kept := map[string]bool{}
			for _, h := range got[i] {
				kept[h.ID] = true
			}
			for id, w := range want {
				if !kept[id] && w > got[i][n-1].Score+1e-5 {
					t.Fatalf("query %d: %s (%v) left out, last kept %v", i, id, w, got[i][n-1].Score)
				}
			}
		}
		one, err := s.Search(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(one), ids(got[i])) {
			t.Fatalf("query %d: Search %v, SearchMulti %v", i, ids(one), ids(got[i]))
		}
	}
}
