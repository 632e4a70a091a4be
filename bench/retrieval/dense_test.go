package main

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/embed"
	"github.com/toolmesh/toolmesh/services/retriever/index"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeEmbeddings is a test double of an OpenAI-style /v1/embeddings server: deterministic vectors (seeded by
// the text) that records the texts it was asked for.
type fakeEmbeddings struct {
	mu    sync.Mutex
	texts []string
	fail  bool
	srv   *httptest.Server
}

func newFake(t *testing.T) *fakeEmbeddings {
	f := &fakeEmbeddings{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Input []string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		fail := f.fail
		f.texts = append(f.texts, req.Input...)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if fail {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"message":"'input[0]' is empty","type":"invalid_request_error"}}`))
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var data []item
		for i, in := range req.Input {
			data = append(data, item{i, fakeVector(in)})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": "fake"})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEmbeddings) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.texts
	f.texts = nil
	return out
}

func fakeVector(text string) []float32 {
	h := fnv.New64a()
	h.Write([]byte(text))
	r := rand.New(rand.NewPCG(h.Sum64(), 1))
	v := make([]float32, 16)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func newTestDense(t *testing.T, f *fakeEmbeddings, model, path string) *cachedDense {
	t.Helper()
	h, err := embed.NewHTTP(embed.HTTPConfig{URL: f.srv.URL, Model: model}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCachedDense(h, path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestCachedDense: a text is sent to the server once, across calls and across runs (a torn
// last record is dropped), the cached vectors are bit-identical to the served ones, the model
// name is part of the key, a server error caches nothing, and no file stays open.
func TestCachedDense(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := newFake(t)
	path := filepath.Join(t.TempDir(), "cache.bin")
	fds := fdCount(t)

	c1 := newTestDense(t, f, "m1", path)
	first, err := c1.Embed(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.asked(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("server asked for %q; want a, b", got)
	}
	second, err := c1.Embed(ctx, []string{"b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.asked(); !slices.Equal(got, []string{"c"}) {
		t.Errorf("second call asked for %q; want only c", got)
	}
	if !slices.Equal(second[0], first[1]) {
		t.Error("cached vector of b differs from the served one")
	}
	if s := c1.takeStats(); s.sent != 3 || s.hits != 1 || s.calls != 2 {
		t.Errorf("stats = %+v; want 3 sent, 1 hit, 2 calls", s)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	// An interrupted run leaves half a record: a whole header, part of the vector.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, b[:30]...), 0o600); err != nil {
		t.Fatal(err)
	}

	c2 := newTestDense(t, f, "m1", path)
	again, err := c2.Embed(ctx, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.asked(); len(got) != 0 {
		t.Errorf("a second run asked the server for %q; want nothing", got)
	}
	if !slices.Equal(again[0], first[0]) || !slices.Equal(again[2], second[1]) {
		t.Error("vectors read back from the file differ from the served ones")
	}
	if c2.Dim() != 16 {
		t.Errorf("Dim = %d from the cache alone; want 16", c2.Dim())
	}
	// What is appended after the torn record is read back too.
	if _, err := c2.Embed(ctx, []string{"d"}); err != nil {
		t.Fatal(err)
	}
	f.asked()
	c2.Close()
	c2 = newTestDense(t, f, "m1", path)
	if _, err := c2.Embed(ctx, []string{"a", "d"}); err != nil {
		t.Fatal(err)
	}
	if got := f.asked(); len(got) != 0 {
		t.Errorf("a third run asked the server for %q; want nothing", got)
	}
	c2.Close()

	c3 := newTestDense(t, f, "m2", path)
	if _, err := c3.Embed(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if got := f.asked(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("another model asked for %q; want a (the model is part of the key)", got)
	}
	f.mu.Lock()
	f.fail = true
	f.mu.Unlock()
	_, err = c3.Embed(ctx, []string{"z"})
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("err = %v; want the server's 400 and its message", err)
	}
	f.mu.Lock()
	f.fail = false
	f.mu.Unlock()
	f.asked()
	if _, err := c3.Embed(ctx, []string{"z"}); err != nil {
		t.Fatal(err)
	}
	if got := f.asked(); !slices.Equal(got, []string{"z"}) {
		t.Errorf("after a failure asked for %q; want z again (nothing cached)", got)
	}
	c3.Close()
	// The fake server closes its side of the connections asynchronously.
	got := fdCount(t)
	for deadline := time.Now().Add(2 * time.Second); got > fds && time.Now().Before(deadline); got = fdCount(t) {
		time.Sleep(10 * time.Millisecond)
	}
	if got > fds {
		t.Errorf("open files %d → %d: the cache file or a connection leaked", fds, got)
	}
}

// TestDenseMethodRanksByCosine: the dense method's index (every lexical field weight 0) ranks
// exactly by the embedder's cosine, and hybrid builds the retriever's index with the model in
// its name.
func TestDenseMethodRanksByCosine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := newFake(t)
	denseEmbedder = newTestDense(t, f, "m", "")
	t.Cleanup(func() { denseEmbedder.Close(); denseEmbedder = nil })

	var pool []*toolmeshv1.Tool
	for _, n := range []string{"get_weather", "convert_celsius", "send_email", "book_flight", "find_gcd", "sort_list", "translate_text", "play_music"} {
		pool = append(pool, &toolmeshv1.Tool{Id: "s." + n, Server: "s", Name: n, Description: "does " + strings.ReplaceAll(n, "_", " ")})
	}
	query := "what is the weather in Paris"
	qv := fakeVector(query)
	type ranked struct {
		id  string
		cos float64
	}
	var want []ranked
	for _, tl := range pool {
		v := fakeVector(index.DenseText(tl))
		want = append(want, ranked{tl.GetId(), cosine(qv, v)})
	}
	slices.SortFunc(want, func(a, b ranked) int {
		if a.cos > b.cos {
			return -1
		}
		return 1
	})
	for _, name := range []string{"dense", "hybrid"} {
		m, ok := lookup(name)
		if !ok {
			t.Fatalf("no method %s", name)
		}
		ix, err := build(ctx, pool, m)
		if err != nil {
			t.Fatal(err)
		}
		hits, err := ix.Search(ctx, query, len(pool), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(ix.Name(), "+m/16") {
			t.Errorf("%s: index name %q does not carry the model and dimension", name, ix.Name())
		}
		if name != "dense" {
			continue
		}
		var got, wantIDs []string
		for i, h := range hits {
			got = append(got, h.GetTool().GetId())
			wantIDs = append(wantIDs, want[i].id)
		}
		if !slices.Equal(got, wantIDs) {
			t.Errorf("dense ranking %v; want the cosine order %v", got, wantIDs)
		}
	}
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

func TestOpenDenseNeedsURL(t *testing.T) {
	m, _ := lookup("hybrid")
	b, _ := lookup("bm25")
	if err := openDense([]method{b}, "", "m", ""); err != nil || denseEmbedder != nil {
		t.Fatalf("lexical methods only: err %v, embedder %v; want neither", err, denseEmbedder)
	}
	err := openDense([]method{b, m}, "", "m", "")
	if err == nil || !strings.Contains(err.Error(), "hybrid") || !strings.Contains(err.Error(), "-embed-url") {
		t.Errorf("err = %v; want one naming hybrid and -embed-url", err)
	}
}
