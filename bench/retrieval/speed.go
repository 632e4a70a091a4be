package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/index"
	"github.com/toolmesh/toolmesh/services/retriever/lexical"
	"github.com/toolmesh/toolmesh/services/retriever/store"
	"github.com/toolmesh/toolmesh/services/retriever/store/memory"
)

// synthetic returns n tools derived from the pool deterministically: tool i is pool tool
// i mod len(pool); copies after the first get a server name of their own, a name with two extra
// words and a description with four extra words, the words drawn (seeded) from the pool's
// vocabulary, so that vocabulary and posting lengths grow as in a real, larger catalog.
func synthetic(pool []*toolmeshv1.Tool, n int) []*toolmeshv1.Tool {
	vocab := map[string]bool{}
	for _, t := range pool {
		for _, w := range lexical.Words(t.GetDescription()) {
			if len(w) > 3 {
				vocab[w] = true
			}
		}
	}
	words := make([]string, 0, len(vocab))
	for w := range vocab {
		words = append(words, w)
	}
	slices.Sort(words)
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]*toolmeshv1.Tool, n)
	for i := range out {
		base := pool[i%len(pool)]
		copyNo := i / len(pool)
		t := proto.Clone(base).(*toolmeshv1.Tool)
		if copyNo > 0 {
			pick := func() string { return words[rng.IntN(len(words))] }
			t.Server = "syn" + strconv.Itoa(copyNo)
			t.Name = base.GetName() + "_" + pick() + "_" + pick()
			t.Description = base.GetDescription() + " " + strings.Join([]string{pick(), pick(), pick(), pick()}, " ")
		}
		t.Id = t.GetServer() + "." + t.GetName() + "#" + strconv.Itoa(i)
		out[i] = t
	}
	return out
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func runSpeed(w io.Writer, pool []*toolmeshv1.Tool, queriesPath, sizes string, searches int, name string, opt index.Options) (figures.Speed, error) {
	fig := figures.Speed{Method: name}
	qs, err := loadQueries(queriesPath)
	if err != nil {
		return fig, err
	}
	ctx := context.Background()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "speed: memory store, default encoder, search options of %s (k=10), %d searches per size over the dev queries; GOMAXPROCS %d; load average %s\n\n",
		name, searches, runtime.GOMAXPROCS(0), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	fmt.Fprintf(w, "| tools | build s | tools/s | search p50 µs | search p99 µs | search CPU µs/op | search alloc B/op | store-only p50 µs | store-only p99 µs | heap B/tool (index) | heap B/tool (index+tools) |\n")
	fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fig, fmt.Errorf("bad size %q", s)
		}
		h0 := heapAlloc()
		tools := synthetic(pool, n)
		h1 := heapAlloc()
		lex := lexical.Default()
		st := memory.New()
		ix := index.NewWithOptions(st, lex, nil, opt)
		start := time.Now()
		for lo := 0; lo < n; lo += 1000 { // batches, as the sync loop sends them
			if err := ix.Upsert(ctx, tools[lo:min(lo+1000, n)]); err != nil {
				return fig, err
			}
		}
		build := time.Since(start)
		h2 := heapAlloc()

		lat := make([]time.Duration, 0, searches)
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		cpu0 := cpuTime()
		for i := 0; i < searches; i++ {
			q := qs[i%len(qs)].Query
			t0 := time.Now()
			hits, err := ix.Search(ctx, q, 10, nil)
			if err != nil && err != index.ErrEmptyQuery {
				return fig, err
			}
			lat = append(lat, time.Since(t0))
			if i < len(qs) {
				dumpHits(strconv.Itoa(n)+" "+qs[i].QID, hits)
			}
		}
		cpu := cpuTime() - cpu0
		runtime.ReadMemStats(&m1)
		// The store alone: one pre-encoded query, no splitting.
		slat := make([]time.Duration, 0, searches)
		for i := 0; i < searches; i++ {
			q := storeQuery(lex, qs[i%len(qs)].Query)
			t0 := time.Now()
			if _, err := st.Search(ctx, q); err != nil {
				return fig, err
			}
			slat = append(slat, time.Since(t0))
		}
		p := func(d []time.Duration, f float64) float64 {
			slices.Sort(d)
			return float64(d[min(len(d)-1, int(f*float64(len(d))))].Nanoseconds()) / 1e3
		}
		row := figures.SpeedSize{Tools: n, BuildSeconds: build.Seconds(), SearchP50: p(lat, 0.5), SearchP99: p(lat, 0.99),
			SearchCPU: float64(cpu.Microseconds()) / float64(searches), StoreP50: p(slat, 0.5), StoreP99: p(slat, 0.99),
			HeapPerTool: int64(h2-h1) / int64(n), HeapPerToolAll: int64(h2-h0) / int64(n)}
		fig.Sizes = append(fig.Sizes, row)
		fmt.Fprintf(w, "| %d | %.2f | %.0f | %.0f | %.0f | %.0f | %d | %.0f | %.0f | %d | %d |\n", n, build.Seconds(), float64(n)/build.Seconds(),
			row.SearchP50, row.SearchP99, row.SearchCPU, (m1.TotalAlloc-m0.TotalAlloc)/uint64(searches),
			row.StoreP50, row.StoreP99, row.HeapPerTool, row.HeapPerToolAll)
		runtime.KeepAlive(tools)
		runtime.KeepAlive(ix)
	}
	return fig, nil
}

// cpuTime is the process's user + system CPU time (all threads, GC included).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func storeQuery(lex *lexical.Encoder, text string) store.Query {
	return store.Query{Sparse: lex.Query(text), Weights: lex.Weights(), Limit: 10}
}
