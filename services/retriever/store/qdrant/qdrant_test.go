package qdrant

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/store"
	"github.com/toolmesh/toolmesh/services/retriever/store/qdrant/qdranttest"
)

// envQdrant names a real Qdrant (host:port of its gRPC API) to run the suite against as well.
const (
	envQdrant       = "TOOLMESH_TEST_QDRANT"
	envQdrantAPIKey = "TOOLMESH_TEST_QDRANT_API_KEY"
)

// target is a Qdrant to run the suite against: the test double or a real server.
type target struct {
	addr   string
	apiKey string
	// prefix is the collection prefix of this run; every collection under it is deleted at the end.
	prefix string
	// double is nil against a real Qdrant.
	double *qdranttest.Double
	// raw is a plain go-client for checks behind the store's back.
	raw *qc.Client
}

func TestStoreOnDouble(t *testing.T) {
	d := qdranttest.Start(t)
	runSuite(t, newTarget(t, d.Addr(), "", "toolmesh_test", d))
}

func TestStoreOnRealQdrant(t *testing.T) {
	addr := os.Getenv(envQdrant)
	if addr == "" {
		t.Skip(envQdrant + " not set: no real Qdrant to test against (the double-backed tests ran)")
	}
	prefix := fmt.Sprintf("toolmesh_test_%d", time.Now().UnixNano())
	runSuite(t, newTarget(t, addr, os.Getenv(envQdrantAPIKey), prefix, nil))
}

func newTarget(t *testing.T, addr, apiKey, prefix string, d *qdranttest.Double) target {
	t.Helper()
	host, port, err := splitAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := qc.NewClient(&qc.Config{Host: clientHost(host), Port: port, APIKey: apiKey, SkipCompatibilityCheck: true, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	tg := target{addr: addr, apiKey: apiKey, prefix: prefix, double: d, raw: raw}
	t.Cleanup(func() {
		defer raw.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		names, err := raw.ListCollections(ctx)
		if err != nil {
			t.Errorf("cleanup: list collections: %v", err)
			return
		}
		for _, n := range names {
			if strings.HasPrefix(n, prefix+"__") {
				if err := raw.DeleteCollection(ctx, n); err != nil {
					t.Errorf("cleanup: delete collection %s: %v", n, err)
				}
			}
		}
	})
	return tg
}

func (tg target) config() Config {
	return Config{Addr: tg.addr, APIKey: tg.apiKey, Collection: tg.prefix, Timeout: 5 * time.Second}
}

func (tg target) newStore(t *testing.T, model string, dim int, sparse ...string) *Store {
	t.Helper()
	s, err := New(t.Context(), tg.config(), model, dim, sparse)
	if err != nil {
		t.Fatalf("New(%s, %d, %q): %v", model, dim, sparse, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	return s
}

// The hand-made index: five tools on three servers, 3-dimensional dense vectors and a "words"
// sparse vector whose indices stand for terms: 1 add, 2 number, 3 multiply, 4 celsius,
// 5 fahrenheit, 6 kilometers, 7 url. Every tool has the sparse vector, so N = 5 for the IDF;
// "number" (2) is in three tools, every other term in one. No dense vector is of unit length
// (embedders do not all normalize): Qdrant normalizes them for Cosine distance, and the expected
// scores are cosines, so a store or a double that skipped the normalization would fail.
var fixture = []store.Doc{
	doc("calc.add", "calc", "h1", []float32{2, 0, 0}, []uint32{1, 2}, []float32{1, 0.5}),
	doc("calc.mul", "calc", "h1", []float32{0.4, 0.3, 0}, []uint32{2, 3}, []float32{1, 1}),
	doc("conv.c2f", "conv", "h1", []float32{0, 3, 0}, []uint32{4, 5}, []float32{1, 1}),
	doc("conv.km", "conv", "h1", []float32{0, 1.2, 1.6}, []uint32{2, 6}, []float32{0.8, 1}),
	doc("web.fetch", "web", "h1", []float32{0, 0, 0.25}, []uint32{7}, []float32{1}),
}

func doc(id, server, hash string, dense []float32, idx []uint32, vals []float32) store.Doc {
	name := strings.TrimPrefix(id, server+".")
	schema, err := structpb.NewStruct(map[string]any{
		"type":       "object",
		"properties": map[string]any{"x": map[string]any{"type": "number", "description": "the " + name + " input"}},
		"required":   []any{"x"},
	})
	if err != nil {
		panic(err)
	}
	return store.Doc{
		ID: id, Server: server, Hash: hash,
		Tool:   &toolmeshv1.Tool{Id: id, Server: server, Name: name, Description: "tool " + name, InputSchema: schema, Hash: hash},
		Dense:  dense,
		Sparse: map[string]store.SparseVector{"words": {Indices: idx, Values: vals}},
	}
}

// idf is Qdrant's IDF modifier.
func idf(n, df float64) float64 { return math.Log(1 + (n-df+0.5)/(df+0.5)) }

// rrf is Qdrant's RRF score of 0-based positions with its default k = 2.
func rrf(positions ...int) float64 {
	var s float64
	for _, p := range positions {
		s += 1 / float64(p+2)
	}
	return s
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

type want struct {
	id    string
	score float64
}

func checkHits(t *testing.T, got []store.Hit, want []want) {
	t.Helper()
	var gotIDs, wantIDs []string
	for _, h := range got {
		gotIDs = append(gotIDs, h.ID)
	}
	for _, w := range want {
		wantIDs = append(wantIDs, w.id)
	}
	if !slices.Equal(gotIDs, wantIDs) {
		t.Fatalf("hits: got %q, want %q", gotIDs, wantIDs)
	}
	for i, w := range want {
		if math.Abs(got[i].Score-w.score) > 1e-4 {
			t.Errorf("hit %d (%s): got score %.6f, want %.6f", i, w.id, got[i].Score, w.score)
		}
		if got[i].Tool.GetId() != w.id {
			t.Errorf("hit %d: got tool %q, want %q", i, got[i].Tool.GetId(), w.id)
		}
	}
}

func sparseQ(idx []uint32, vals []float32) map[string]store.SparseVector {
	return map[string]store.SparseVector{"words": {Indices: idx, Values: vals}}
}

func runSuite(t *testing.T, tg target) {
	t.Run("CreateIsIdempotentAndRaceSafe", func(t *testing.T) {
		const model = "create-test"
		var wg sync.WaitGroup
		stores := make([]*Store, 4)
		errs := make([]error, 4)
		for i := range stores {
			wg.Go(func() { stores[i], errs[i] = New(t.Context(), tg.config(), model, 3, []string{"words", "chars"}) })
		}
		wg.Wait()
		for i, s := range stores {
			if errs[i] != nil {
				t.Fatalf("concurrent New %d: %v", i, errs[i])
			}
			t.Cleanup(func() { _ = s.Close() })
		}
		name := stores[0].Collection()
		if want := tg.prefix + "__create-test_3"; name != want {
			t.Errorf("collection: got %q, want %q", name, want)
		}
		var creates int
		if tg.double != nil {
			creates = tg.double.Calls(qc.Collections_Create_FullMethodName)
		}
		again := tg.newStore(t, model, 3, "chars", "words")
		if again.Collection() != name {
			t.Errorf("second store's collection: got %q, want %q", again.Collection(), name)
		}
		if tg.double != nil && tg.double.Calls(qc.Collections_Create_FullMethodName) != creates {
			t.Errorf("New on an existing collection called Create")
		}

		info, err := tg.raw.GetCollectionInfo(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		params := info.GetConfig().GetParams()
		dense := params.GetVectorsConfig().GetParamsMap().GetMap()[DenseVector]
		if dense.GetSize() != 3 || dense.GetDistance() != qc.Distance_Cosine {
			t.Errorf("dense vector: got size %d distance %s, want 3 Cosine", dense.GetSize(), dense.GetDistance())
		}
		for _, n := range []string{"words", "chars"} {
			if m := params.GetSparseVectorsConfig().GetMap()[n].GetModifier(); m != qc.Modifier_Idf {
				t.Errorf("sparse vector %q: got modifier %s, want Idf", n, m)
			}
		}
		if ps := info.GetPayloadSchema()["server"]; ps.GetDataType() != qc.PayloadSchemaType_Keyword {
			t.Errorf("payload index on server: got %v, want keyword", ps)
		}
	})

	t.Run("ExistingCollectionWithAnotherSchemaIsAnError", func(t *testing.T) {
		name := CollectionName(tg.prefix, "schema-test", 3)
		err := tg.raw.CreateCollection(t.Context(), &qc.CreateCollection{
			CollectionName: name,
			VectorsConfig:  qc.NewVectorsConfigMap(map[string]*qc.VectorParams{DenseVector: {Size: 3, Distance: qc.Distance_Cosine}}),
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(t.Context(), tg.config(), "schema-test", 3, []string{"words"})
		if err == nil || !strings.Contains(err.Error(), `no sparse vector "words"`) || !strings.Contains(err.Error(), name) {
			t.Errorf("New over a collection without the sparse vector: got %v, want an error naming the collection and the vector", err)
		}
	})

	t.Run("TwoModelsTwoCollections", func(t *testing.T) {
		a := tg.newStore(t, "lexical-v1", 0, "words")
		b := tg.newStore(t, "all-MiniLM-L6-v2", 3, "words")
		if a.Collection() == b.Collection() {
			t.Fatalf("both models use collection %q", a.Collection())
		}
		if err := a.Upsert(t.Context(), []store.Doc{{ID: "x.y", Server: "x", Hash: "1", Sparse: sparseQ([]uint32{1}, []float32{1})}}); err != nil {
			t.Fatal(err)
		}
		hb, err := b.Hashes(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(hb) != 0 {
			t.Errorf("the other model's collection has %v", hb)
		}
	})

	t.Run("UpsertOverwriteDelete", func(t *testing.T) {
		s := tg.newStore(t, "crud-test", 3, "words")
		if err := s.Upsert(t.Context(), fixture); err != nil {
			t.Fatal(err)
		}
		checkHashes(t, s, map[string]string{"calc.add": "h1", "calc.mul": "h1", "conv.c2f": "h1", "conv.km": "h1", "web.fetch": "h1"})

		// Upserting the same docs again changes nothing.
		if err := s.Upsert(t.Context(), fixture); err != nil {
			t.Fatal(err)
		}
		// A changed tool replaces its point: new hash, description and vectors.
		changed := doc("calc.add", "calc", "h2", []float32{0, 0, -1}, []uint32{8}, []float32{1})
		changed.Tool.Description = "adds, now pointing elsewhere"
		if err := s.Upsert(t.Context(), []store.Doc{changed}); err != nil {
			t.Fatal(err)
		}
		checkHashes(t, s, map[string]string{"calc.add": "h2", "calc.mul": "h1", "conv.c2f": "h1", "conv.km": "h1", "web.fetch": "h1"})
		hits, err := s.Search(t.Context(), store.Query{Dense: []float32{0, 0, -1}, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 1 || hits[0].ID != "calc.add" || !proto.Equal(hits[0].Tool, changed.Tool) {
			t.Fatalf("search after overwrite: got %+v, want calc.add with the new definition", hits)
		}
		// The old sparse terms are gone with the old vectors.
		hits, err = s.Search(t.Context(), store.Query{Sparse: sparseQ([]uint32{1}, []float32{1}), Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 0 {
			t.Errorf("search for the replaced term: got %+v, want none", hits)
		}

		if err := s.Delete(t.Context(), []string{"conv.km", "no.such"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(t.Context(), []string{"conv.km"}); err != nil {
			t.Fatalf("deleting again: %v", err)
		}
		checkHashes(t, s, map[string]string{"calc.add": "h2", "calc.mul": "h1", "conv.c2f": "h1", "web.fetch": "h1"})
		hits, err = s.Search(t.Context(), store.Query{Sparse: sparseQ([]uint32{6}, []float32{1}), Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 0 {
			t.Errorf("search for a deleted tool's term: got %+v, want none", hits)
		}
	})

	t.Run("HashesPageThroughBatches", func(t *testing.T) {
		s := tg.newStore(t, "paging-test", 3, "words")
		s.upsertBatch, s.scrollPage = 2, 2
		var upserts, scrolls int
		if tg.double != nil {
			upserts, scrolls = tg.double.Calls(qc.Points_Upsert_FullMethodName), tg.double.Calls(qc.Points_Scroll_FullMethodName)
		}
		if err := s.Upsert(t.Context(), fixture); err != nil {
			t.Fatal(err)
		}
		checkHashes(t, s, map[string]string{"calc.add": "h1", "calc.mul": "h1", "conv.c2f": "h1", "conv.km": "h1", "web.fetch": "h1"})
		if tg.double != nil {
			if got := tg.double.Calls(qc.Points_Upsert_FullMethodName) - upserts; got != 3 {
				t.Errorf("upsert calls for 5 docs in batches of 2: got %d, want 3", got)
			}
			if got := tg.double.Calls(qc.Points_Scroll_FullMethodName) - scrolls; got != 3 {
				t.Errorf("scroll calls for 5 points in pages of 2: got %d, want 3", got)
			}
		}
	})

	t.Run("Search", func(t *testing.T) {
		s := tg.newStore(t, "search-test", 3, "words")
		if err := s.Upsert(t.Context(), fixture); err != nil {
			t.Fatal(err)
		}
		dq := []float32{0.1, 1, 0}
		dense := func(id string) float64 {
			for _, d := range fixture {
				if d.ID == id {
					return cosine(dq, d.Dense)
				}
			}
			panic(id)
		}
		rare, common := idf(5, 1), idf(5, 3)
		// Dense ranking for dq: c2f, mul, km, add, fetch.
		// Sparse ranking for "kilometers number": km, mul, add (c2f and fetch share no term).
		kmNumber := sparseQ([]uint32{2, 6}, []float32{1, 1})
		for _, tc := range []struct {
			name string
			q    store.Query
			want []want
		}{
			{"dense only, cosine", store.Query{Dense: []float32{0.9, 0.1, 0}, Limit: 3}, []want{
				{"calc.add", cosine([]float32{0.9, 0.1, 0}, []float32{1, 0, 0})},
				{"calc.mul", cosine([]float32{0.9, 0.1, 0}, []float32{0.8, 0.6, 0})},
				{"conv.c2f", cosine([]float32{0.9, 0.1, 0}, []float32{0, 1, 0})},
			}},
			{"sparse only, IDF: a rare term outweighs a common one; no shared term, no hit", store.Query{Sparse: sparseQ([]uint32{2, 3}, []float32{1, 1}), Limit: 5}, []want{
				{"calc.mul", rare + common},
				{"conv.km", 0.8 * common},
				{"calc.add", 0.5 * common},
			}},
			{"hybrid, RRF", store.Query{Dense: dq, Sparse: kmNumber, Limit: 5}, []want{
				{"conv.km", rrf(2, 0)},
				{"calc.mul", rrf(1, 1)},
				{"conv.c2f", rrf(0)},
				{"calc.add", rrf(3, 2)},
				{"web.fetch", rrf(4)},
			}},
			{"hybrid, limit", store.Query{Dense: dq, Sparse: kmNumber, Limit: 2}, []want{
				{"conv.km", rrf(2, 0)},
				{"calc.mul", rrf(1, 1)},
			}},
			{"hybrid, server filter applies inside the prefetches", store.Query{Dense: dq, Sparse: kmNumber, Limit: 5, Servers: []string{"calc", "web"}}, []want{
				{"calc.mul", rrf(0, 0)},
				{"calc.add", rrf(1, 1)},
				{"web.fetch", rrf(2)},
			}},
			{"dense, server filter", store.Query{Dense: dq, Limit: 5, Servers: []string{"conv"}}, []want{
				{"conv.c2f", dense("conv.c2f")},
				{"conv.km", dense("conv.km")},
			}},
			{"sparse, server filter", store.Query{Sparse: kmNumber, Limit: 5, Servers: []string{"calc"}}, []want{
				{"calc.mul", common},
				{"calc.add", 0.5 * common},
			}},
			{"weight 0 leaves a vector out", store.Query{Dense: dq, Sparse: kmNumber, Weights: map[string]float64{"words": 0}, Limit: 2}, []want{
				{"conv.c2f", dense("conv.c2f")},
				{"calc.mul", dense("calc.mul")},
			}},
			{"empty sparse vectors are left out", store.Query{Dense: dq, Sparse: sparseQ(nil, nil), Limit: 1}, []want{
				{"conv.c2f", dense("conv.c2f")},
			}},
			{"no vectors, no hits", store.Query{Limit: 3}, nil},
			{"limit 0, no hits", store.Query{Dense: dq}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				hits, err := s.Search(t.Context(), tc.q)
				if err != nil {
					t.Fatal(err)
				}
				checkHits(t, hits, tc.want)
			})
		}
		t.Run("weighted RRF", func(t *testing.T) {
			hits, err := s.Search(t.Context(), store.Query{Dense: dq, Sparse: kmNumber, Weights: map[string]float64{DenseVector: 4}, Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			// Qdrant's weighted RRF: 1/((pos+1)/w + k − 1).
			w := func(pos int, weight float64) float64 { return 1 / (float64(pos+1)/weight + 1) }
			exp := []want{
				{"conv.km", w(2, 4) + w(0, 1)},
				{"calc.mul", w(1, 4) + w(1, 1)},
				{"conv.c2f", w(0, 4)},
				{"calc.add", w(3, 4) + w(2, 1)},
				{"web.fetch", w(4, 4)},
			}
			if !s.rrfWeights {
				t.Logf("the server takes no RRF weights (Qdrant < 1.17): the weights are ignored")
				exp = []want{{"conv.km", rrf(2, 0)}, {"calc.mul", rrf(1, 1)}, {"conv.c2f", rrf(0)}, {"calc.add", rrf(3, 2)}, {"web.fetch", rrf(4)}}
			}
			checkHits(t, hits, exp)
		})
		t.Run("the tool comes back whole", func(t *testing.T) {
			hits, err := s.Search(t.Context(), store.Query{Dense: []float32{0, 0, 1}, Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(hits) != 1 || !proto.Equal(hits[0].Tool, fixture[4].Tool) {
				t.Fatalf("got %+v, want %v", hits, fixture[4].Tool)
			}
		})
	})

	t.Run("DenseVectorsAreStoredNormalized", func(t *testing.T) {
		s := tg.newStore(t, "norm-test", 3, "words")
		if err := s.Upsert(t.Context(), fixture); err != nil {
			t.Fatal(err)
		}
		got, err := tg.raw.Scroll(t.Context(), &qc.ScrollPoints{
			CollectionName: s.Collection(),
			Filter:         &qc.Filter{Must: []*qc.Condition{qc.NewHasID(qc.NewIDUUID(PointID("conv.km")))}},
			WithVectors:    qc.NewWithVectorsInclude(DenseVector),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("get conv.km: got %d points, want 1", len(got))
		}
		v := got[0].GetVectors().GetVectors().GetVectors()[DenseVector].GetDense().GetData()
		want := []float32{0, 0.6, 0.8} // {0, 1.2, 1.6} divided by its length 2
		if len(v) != len(want) {
			t.Fatalf("stored dense vector: got %v, want %v", v, want)
		}
		for i := range want {
			if math.Abs(float64(v[i]-want[i])) > 1e-6 {
				t.Fatalf("stored dense vector: got %v, want %v (Qdrant stores Cosine vectors normalized)", v, want)
			}
		}
	})

	t.Run("FusedTiesAreBrokenByID", func(t *testing.T) {
		s := tg.newStore(t, "ties-test", 3, "words")
		// Dense ranking for {1, 0, 0}: tie.b, tie.a, tie.c, tie.d. Sparse ranking for term 2:
		// tie.a, tie.b. So tie.a and tie.b both score 1/(1+2) + 1/(0+2) and tie for first.
		docs := []store.Doc{
			doc("tie.b", "tie", "h1", []float32{2, 0, 0}, []uint32{2}, []float32{0.5}),
			doc("tie.a", "tie", "h1", []float32{0.8, 0.6, 0}, []uint32{2}, []float32{1}),
			doc("tie.c", "tie", "h1", []float32{0.5, 1, 0}, []uint32{9}, []float32{1}),
			doc("tie.d", "tie", "h1", []float32{0, 0, 1}, []uint32{9}, []float32{1}),
		}
		if err := s.Upsert(t.Context(), docs); err != nil {
			t.Fatal(err)
		}
		q := store.Query{Dense: []float32{1, 0, 0}, Sparse: sparseQ([]uint32{2}, []float32{1})}
		for _, pad := range []int{tiePad, 0} {
			// Without padding the first answer never shows the whole tie, and the store asks again.
			s.tiePad = pad
			for _, tc := range []struct {
				limit int
				want  []want
			}{
				{1, []want{{"tie.a", rrf(1, 0)}}},
				{2, []want{{"tie.a", rrf(1, 0)}, {"tie.b", rrf(0, 1)}}},
				{3, []want{{"tie.a", rrf(1, 0)}, {"tie.b", rrf(0, 1)}, {"tie.c", rrf(2)}}},
			} {
				q.Limit = tc.limit
				// Qdrant orders tied points differently from one query to the next.
				for range 20 {
					hits, err := s.Search(t.Context(), q)
					if err != nil {
						t.Fatal(err)
					}
					checkHits(t, hits, tc.want)
				}
			}
		}
	})

	t.Run("SingleVectorTiesAreBrokenByID", func(t *testing.T) {
		s := tg.newStore(t, "ties1-test", 3, "words")
		// More identical tools than the padding: the tie at the cut reaches past the first answer.
		var docs []store.Doc
		for i := range tiePad + 4 {
			docs = append(docs, doc(fmt.Sprintf("same.t%02d", tiePad+3-i), "same", "h1", []float32{1, 2, 0}, []uint32{2}, []float32{1}))
		}
		if err := s.Upsert(t.Context(), docs); err != nil {
			t.Fatal(err)
		}
		n := float64(len(docs))
		for _, q := range []store.Query{
			{Dense: []float32{1, 2, 0}, Limit: 3},
			{Sparse: sparseQ([]uint32{2}, []float32{1}), Limit: 3},
		} {
			score := 1.0
			if q.Dense == nil {
				score = idf(n, n)
			}
			hits, err := s.Search(t.Context(), q)
			if err != nil {
				t.Fatal(err)
			}
			checkHits(t, hits, []want{{"same.t00", score}, {"same.t01", score}, {"same.t02", score}})
		}
	})

	t.Run("IDFCountsDeletedPoints", func(t *testing.T) {
		s := tg.newStore(t, "idf-test", 0, "words")
		var docs []store.Doc
		for i, terms := range [][]uint32{{1}, {1}, {2}, {2}} {
			docs = append(docs, doc(fmt.Sprintf("idf.t%d", i), "idf", "h1", nil, terms, []float32{1}))
		}
		if err := s.Upsert(t.Context(), docs); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(t.Context(), []string{"idf.t1", "idf.t3"}); err != nil {
			t.Fatal(err)
		}
		hits, err := s.Search(t.Context(), store.Query{Sparse: sparseQ([]uint32{1}, []float32{1}), Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		// Two live points, one with term 1; Qdrant still counts the two deleted ones until its
		// optimizer rebuilds the segment, which it does not for a collection this small.
		checkHits(t, hits, []want{{"idf.t0", idf(4, 2)}})
		if tg.double != nil {
			tg.double.Vacuum()
			hits, err := s.Search(t.Context(), store.Query{Sparse: sparseQ([]uint32{1}, []float32{1}), Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			checkHits(t, hits, []want{{"idf.t0", idf(2, 1)}})
		}
	})

	t.Run("BadInputIsRejected", func(t *testing.T) {
		s := tg.newStore(t, "input-test", 3, "words")
		for _, tc := range []struct {
			name string
			err  error
			want string
		}{
			{"dense with the wrong dimension", s.Upsert(t.Context(), []store.Doc{{ID: "a.b", Dense: []float32{1, 2}}}), "2 dimensions, want 3"},
			{"unknown sparse vector", s.Upsert(t.Context(), []store.Doc{{ID: "a.b", Sparse: map[string]store.SparseVector{"chars": {}}}}), `unknown sparse vector "chars"`},
			{"sparse lengths differ", s.Upsert(t.Context(), []store.Doc{{ID: "a.b", Sparse: sparseQ([]uint32{1, 2}, []float32{1})}}), "2 indices and 1 values"},
			{"empty id", s.Upsert(t.Context(), []store.Doc{{Hash: "x"}}), "empty id"},
			{"query dense dimension", searchErr(s, store.Query{Dense: []float32{1}, Limit: 1}), "1 dimensions, want 3"},
			{"query unknown sparse vector", searchErr(s, store.Query{Sparse: map[string]store.SparseVector{"chars": {Indices: []uint32{1}, Values: []float32{1}}}, Limit: 1}), `unknown sparse vector "chars"`},
		} {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) || !strings.Contains(tc.err.Error(), s.Collection()) {
				t.Errorf("%s: got %v, want an error naming the collection and containing %q", tc.name, tc.err, tc.want)
			}
		}
		checkHashes(t, s, map[string]string{})
	})
}

func searchErr(s *Store, q store.Query) error {
	_, err := s.Search(context.Background(), q)
	return err
}

func checkHashes(t *testing.T, s *Store, want map[string]string) {
	t.Helper()
	got, err := s.Hashes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("hashes: got %v, want %v", got, want)
	}
	for id, h := range want {
		if got[id] != h {
			t.Fatalf("hashes: got %v, want %v", got, want)
		}
	}
}

// A Qdrant that cannot be reached: New still succeeds (the client connects lazily) and Ready
// reports an error naming the address within the call timeout.
func TestReadyWhenQdrantIsDown(t *testing.T) {
	refused := func(t *testing.T) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		lis.Close()
		return addr
	}
	// silent accepts connections and never answers, like a server that hangs.
	silent := func(t *testing.T) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var conns []net.Conn
		var mu sync.Mutex
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			lis.Close()
			<-done
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
		return lis.Addr().String()
	}
	stopped := func(t *testing.T) string {
		d, err := qdranttest.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
		return d.Addr()
	}
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
	}{
		{"connection refused", refused},
		{"server never answers", silent},
		{"double stopped", stopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			s, err := New(t.Context(), Config{Addr: addr, Timeout: timeout}, "lexical-v1", 0, []string{"words"})
			if err != nil {
				t.Fatalf("New against a dead Qdrant: %v (want the store, failing Ready)", err)
			}
			defer s.Close()
			start := time.Now()
			err = s.Ready(t.Context())
			elapsed := time.Since(start)
			t.Logf("Ready after %v: %v", elapsed.Round(time.Millisecond), err)
			if err == nil || !strings.Contains(err.Error(), addr) {
				t.Errorf("Ready: got %v, want an error naming %s", err, addr)
			}
			if elapsed > timeout+time.Second {
				t.Errorf("Ready took %v, want about the %v timeout at most", elapsed, timeout)
			}
			if _, err := s.Hashes(t.Context()); err == nil {
				t.Errorf("Hashes against a dead Qdrant: got no error")
			}
		})
	}
}

// Qdrant comes up after the store was made: the collection is created on first use.
func TestCollectionCreatedWhenQdrantComesUp(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	s, err := New(t.Context(), Config{Addr: addr, Timeout: time.Second}, "late-test", 3, []string{"words"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ready(t.Context()); err == nil {
		t.Fatal("Ready before Qdrant is up: got nil")
	}
	d, err := qdranttest.Listen(addr)
	if err != nil {
		t.Skipf("could not take the port back for the double: %v", err)
	}
	defer d.Close()
	// The gRPC connection retries with a backoff of about a second after the failed attempt.
	deadline := time.Now().Add(10 * time.Second)
	for err = s.Ready(t.Context()); err != nil; err = s.Ready(t.Context()) {
		if time.Now().After(deadline) {
			t.Fatalf("Ready after Qdrant came up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.Upsert(t.Context(), fixture[:1]); err != nil {
		t.Fatal(err)
	}
	if d.Calls(qc.Collections_Create_FullMethodName) != 1 {
		t.Errorf("Create calls: got %d, want 1", d.Calls(qc.Collections_Create_FullMethodName))
	}
}

func TestCollectionName(t *testing.T) {
	for _, tc := range []struct {
		prefix, model string
		dim           int
		want          string
	}{
		{"", "lexical-v1", 0, "toolmesh_tools__lexical-v1"},
		{"toolmesh_tools", "all-MiniLM-L6-v2", 384, "toolmesh_tools__all-minilm-l6-v2_384"},
		{"tm", "sentence-transformers/all-MiniLM-L6-v2", 384, "tm__sentence-transformers-all-minilm-l6-v2_384"},
		{"tm", "nomic-embed-text:v1.5", 768, "tm__nomic-embed-text-v1.5_768"},
		{"My Tools", "BAAI/bge-small-en-v1.5", 384, "my-tools__baai-bge-small-en-v1.5_384"},
	} {
		if got := CollectionName(tc.prefix, tc.model, tc.dim); got != tc.want {
			t.Errorf("CollectionName(%q, %q, %d): got %q, want %q", tc.prefix, tc.model, tc.dim, got, tc.want)
		}
	}
	if a, b := CollectionName("", "model-a", 384), CollectionName("", "model-b", 384); a == b {
		t.Errorf("two models, one collection %q", a)
	}
	if a, b := CollectionName("", "m", 384), CollectionName("", "m", 768); a == b {
		t.Errorf("two dimensions, one collection %q", a)
	}
	long := CollectionName("", strings.Repeat("very-long-model-name-", 20), 1024)
	if len(long) > maxNameLen || !strings.HasSuffix(long, "_1024") {
		t.Errorf("long name: got %q (%d bytes), want at most %d bytes ending in _1024", long, len(long), maxNameLen)
	}
}

func TestPointID(t *testing.T) {
	uuidV5 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := PointID("calc.add"), PointID("calc.mul")
	if !uuidV5.MatchString(a) || !uuidV5.MatchString(b) {
		t.Errorf("PointID: got %q and %q, want version-5 UUIDs", a, b)
	}
	if a == b || PointID("calc.add") != a {
		t.Errorf("PointID: want stable and distinct ids, got %q, %q", a, b)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		addr   string
		model  string
		dim    int
		sparse []string
		want   string
	}{
		{"no vectors", "127.0.0.1:1", "m", 0, nil, "no vectors"},
		{"dense name reused", "127.0.0.1:1", "m", 0, []string{"dense"}, "reserved"},
		{"duplicate sparse", "127.0.0.1:1", "m", 0, []string{"w", "w"}, "twice"},
		{"empty model", "127.0.0.1:1", "//", 3, nil, "model id"},
		{"bad port", "127.0.0.1:x", "m", 3, nil, "bad port"},
		{"empty addr", "", "m", 3, nil, "empty address"},
	} {
		s, err := New(t.Context(), Config{Addr: tc.addr, Timeout: 100 * time.Millisecond}, tc.model, tc.dim, tc.sparse)
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
