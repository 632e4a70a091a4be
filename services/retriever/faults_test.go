package retriever

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/fdcheck"
	"github.com/toolmesh/toolmesh/services/retriever/index"
	"github.com/toolmesh/toolmesh/services/retriever/lexical"
	"github.com/toolmesh/toolmesh/services/retriever/store/memory"
	"github.com/toolmesh/toolmesh/services/retriever/store/qdrant/qdranttest"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// Fault tests (issue 8): for each fault, the error a user sees, recovery without a restart, no
// leaked goroutines (TestMain's goleak) or file descriptors, and no partial state.

// catalog is an executor double whose tool set the test changes: each subscriber gets the
// current tools as a snapshot, then every change as a CHANGED event, as the executor does.
type catalog struct {
	toolmeshv1.UnimplementedExecutorServiceServer

	mu            sync.Mutex
	tools         map[string]*toolmeshv1.Tool
	rev           uint64
	subs          map[chan *toolmeshv1.WatchToolsResponse]struct{}
	subscriptions int
}

func newCatalog(tools ...*toolmeshv1.Tool) *catalog {
	c := &catalog{tools: map[string]*toolmeshv1.Tool{}, rev: 1, subs: map[chan *toolmeshv1.WatchToolsResponse]struct{}{}}
	for _, t := range tools {
		c.tools[t.GetId()] = t
	}
	return c
}

func (c *catalog) WatchTools(_ *toolmeshv1.WatchToolsRequest, stream grpc.ServerStreamingServer[toolmeshv1.WatchToolsResponse]) error {
	ch := make(chan *toolmeshv1.WatchToolsResponse, 16)
	c.mu.Lock()
	snap := &toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT, Upserted: c.list(), Revision: c.rev}
	c.subs[ch] = struct{}{}
	c.subscriptions++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.subs, ch)
		c.mu.Unlock()
	}()
	if err := stream.Send(snap); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// list is the tools by id. Called with mu held.
func (c *catalog) list() []*toolmeshv1.Tool {
	out := make([]*toolmeshv1.Tool, 0, len(c.tools))
	for _, id := range slices.Sorted(maps.Keys(c.tools)) {
		out = append(out, c.tools[id])
	}
	return out
}

func (c *catalog) current() []*toolmeshv1.Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list()
}

func (c *catalog) subscribed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subscriptions
}

// change applies a change to the tool set and sends it to every subscriber.
func (c *catalog) change(upserted []*toolmeshv1.Tool, removed []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range upserted {
		c.tools[t.GetId()] = t
	}
	for _, id := range removed {
		delete(c.tools, id)
	}
	c.rev++
	ev := &toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED, Upserted: upserted, RemovedIds: removed, Revision: c.rev}
	for ch := range c.subs {
		ch <- ev
	}
}

// serveCatalog serves c as the executor's gRPC service until the test ends.
func serveCatalog(t *testing.T, c toolmeshv1.ExecutorServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	toolmeshv1.RegisterExecutorServiceServer(g, c)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return lis.Addr().String()
}

// run runs s until the returned stop is called (or the test ends).
func run(t *testing.T, s *Service) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// results runs the queries and returns each one's results as "id score" lines, or the first
// error.
func results(s *Service, queries []string) ([]string, error) {
	var out []string
	for _, q := range queries {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := s.SearchTools(ctx, &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: q, K: 4})
		cancel()
		if err != nil {
			return nil, err
		}
		var line []string
		for _, r := range resp.GetResults() {
			line = append(line, fmt.Sprintf("%s %.6f", r.GetTool().GetId(), r.GetScore()))
		}
		out = append(out, q+": "+strings.Join(line, ", "))
	}
	return out, nil
}

func top(s *Service, query string) (string, error) {
	resp, err := s.SearchTools(context.Background(), &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: query, K: 1})
	if err != nil {
		return "", err
	}
	if len(resp.GetResults()) == 0 {
		return "", nil
	}
	return resp.GetResults()[0].GetTool().GetId(), nil
}

var kelvin = &toolmeshv1.Tool{Id: "converter.kelvin_to_celsius", Server: "converter", Name: "kelvin_to_celsius", Hash: "1",
	Description: "Convert a temperature from kelvin to degrees Celsius."}

// qdrantTimeout bounds each Qdrant call in these tests.
const qdrantTimeout = 500 * time.Millisecond

// newOnQdrant is a retriever following cat's executor double on the qdrant store at addr.
func newOnQdrant(t *testing.T, cat *catalog, addr string) (*Service, error) {
	t.Helper()
	cfg := Config{ExecutorAddr: serveCatalog(t, cat), GRPCAddr: "127.0.0.1:0", Store: "qdrant", Embedder: "lexical",
		QdrantAddr: addr, QdrantCollection: "faults", QdrantTimeout: qdrantTimeout, ResyncBackoffMax: 200 * time.Millisecond}
	return New(context.Background(), cfg, nil, nil)
}

// readyOnQdrant runs a retriever following cat's executor double on a new Qdrant double and
// waits until its index is ready.
func readyOnQdrant(t *testing.T, cat *catalog) (*Service, *qdranttest.Double) {
	t.Helper()
	d, err := qdranttest.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	s, err := newOnQdrant(t, cat, d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	run(t, s)
	eventually.Check(t, 5*time.Second, "ready on a running Qdrant", func() string {
		if ok, why := s.Ready(context.Background()); !ok {
			return why
		}
		return ""
	})
	return s, d
}

// TestFaultQdrantUnreachable: the retriever on the qdrant store (the wire-level double), Qdrant
// killed after the index was built. A search answers UNAVAILABLE naming Qdrant and its address
// within the store's timeout, readiness says why, a tool change that cannot be written is
// recorded and retried; when Qdrant is back on the same address, readiness and search recover
// without a restart of the retriever and the change made meanwhile is in the index.
func TestFaultQdrantUnreachable(t *testing.T) {
	fdcheck.Check(t, 2)
	cat := newCatalog(demoTools(t)...)
	s, d := readyOnQdrant(t, cat)
	if got, err := top(s, "convert 30 degrees fahrenheit to celsius"); err != nil || got != "converter.fahrenheit_to_celsius" {
		t.Fatalf("search with Qdrant up: got %q, %v", got, err)
	}

	d.Stop()
	wantAddr := "qdrant at " + d.Addr()
	start := time.Now()
	_, err := top(s, "convert 30 degrees fahrenheit to celsius")
	took := time.Since(start)
	t.Logf("search with Qdrant down: %v after %v", err, took.Round(time.Millisecond))
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), wantAddr+" is not reachable") {
		t.Errorf("search with Qdrant down: got %v, want UNAVAILABLE saying %q is not reachable", err, wantAddr)
	}
	if took > qdrantTimeout+time.Second {
		t.Errorf("search with Qdrant down took %v, want at most about the %v store timeout", took, qdrantTimeout)
	}
	start = time.Now()
	ok, why := s.Ready(context.Background())
	if ok || !strings.Contains(why, wantAddr+" is not reachable") {
		t.Errorf("Ready with Qdrant down: got %v %q, want not ready saying %q is not reachable", ok, why, wantAddr)
	}
	if took := time.Since(start); took > qdrantTimeout+time.Second {
		t.Errorf("Ready with Qdrant down took %v, want at most about the %v store timeout", took, qdrantTimeout)
	}

	// The executor's tools change while Qdrant is down: the write fails, is recorded and retried
	// (each retry resubscribes for a fresh snapshot).
	subs := cat.subscribed()
	cat.change([]*toolmeshv1.Tool{kelvin}, []string{"converter.fahrenheit_to_celsius"})
	eventually.Check(t, 5*time.Second, "the failed sync recorded and retried", func() string {
		st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
		if !strings.Contains(st.GetLastError(), wantAddr) {
			return fmt.Sprintf("last error %q does not name %s", st.GetLastError(), wantAddr)
		}
		if n := cat.subscribed() - subs; n < 2 {
			return fmt.Sprintf("%d resubscriptions so far", n)
		}
		return ""
	})
	st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
	t.Logf("index status with Qdrant down: ready %v, last error %q", st.GetReady(), st.GetLastError())

	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	eventually.Check(t, 5*time.Second, "recovery once Qdrant is back", func() string {
		if ok, why := s.Ready(context.Background()); !ok {
			return "not ready: " + why
		}
		got, err := top(s, "convert 300 kelvin to celsius")
		if err != nil || got != kelvin.GetId() {
			return fmt.Sprintf("search for the tool added meanwhile: got %q, %v", got, err)
		}
		// The resync indexes the added tool before it deletes the removed one, and serves
		// meanwhile: recovered means both have landed and the status says so.
		if st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{}); !st.GetReady() || st.GetLastError() != "" {
			return fmt.Sprintf("index status: %v, want ready without an error", st)
		}
		hashes, err := s.idx.Hashes(context.Background())
		if err != nil {
			return err.Error()
		}
		if got, want := slices.Sorted(maps.Keys(hashes)), ids(cat.current()); !slices.Equal(got, want) {
			return fmt.Sprintf("index holds %v, want the executor's %v", got, want)
		}
		return ""
	})
	t.Logf("recovered %v after Qdrant came back", time.Since(start).Round(time.Millisecond))
}

// TestFaultQdrantDownFromTheStart: the retriever starts while nothing listens on Qdrant's
// address. It starts anyway; search and readiness say Qdrant is not reachable (not just "not
// synced"); once Qdrant comes up the index is built without a restart.
func TestFaultQdrantDownFromTheStart(t *testing.T) {
	fdcheck.Check(t, 2)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	cat := newCatalog(demoTools(t)...)
	s, err := newOnQdrant(t, cat, addr)
	if err != nil {
		t.Fatalf("New with Qdrant down: %v (want a retriever that waits for Qdrant)", err)
	}
	run(t, s)
	wantAddr := "qdrant at " + addr + " is not reachable"
	eventually.Check(t, 5*time.Second, "search naming Qdrant", func() string {
		_, err := top(s, "add two numbers")
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), wantAddr) {
			return fmt.Sprintf("got %v, want UNAVAILABLE containing %q", err, wantAddr)
		}
		return ""
	})
	_, err = top(s, "add two numbers")
	t.Logf("search before Qdrant is up: %v", err)
	if ok, why := s.Ready(context.Background()); ok || !strings.Contains(why, wantAddr) {
		t.Errorf("Ready before Qdrant is up: got %v %q, want not ready containing %q", ok, why, wantAddr)
	}

	d, err := qdranttest.Listen(addr)
	if err != nil {
		t.Skipf("could not take the port back for the double: %v", err)
	}
	t.Cleanup(d.Close)
	start := time.Now()
	eventually.Check(t, 5*time.Second, "recovery once Qdrant is up", func() string {
		if ok, why := s.Ready(context.Background()); !ok {
			return "not ready: " + why
		}
		if got, err := top(s, "add two numbers"); err != nil || got != "calculator.add" {
			return fmt.Sprintf("search: got %q, %v", got, err)
		}
		return ""
	})
	t.Logf("recovered %v after Qdrant came up", time.Since(start).Round(time.Millisecond))
}

func ids(tools []*toolmeshv1.Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.GetId()
	}
	slices.Sort(out)
	return out
}

var quietLog = slog.New(slog.DiscardHandler)

// hashDense is a dense embedder double: each text's words hashed into 16 dimensions, so
// related texts get related vectors. fault, when set, is asked before each call (n counts
// calls with more than one text: the index's writes; a query embeds one text).
type hashDense struct {
	mu     sync.Mutex
	writes int
	fault  func(ctx context.Context, n int) error
}

func (h *hashDense) Model() string { return "hash-16" }
func (h *hashDense) Dim() int      { return 16 }

func (h *hashDense) setFault(f func(ctx context.Context, n int) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fault, h.writes = f, 0
}

func (h *hashDense) writeCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writes
}

func (h *hashDense) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	h.mu.Lock()
	fault, n := h.fault, 0
	if len(texts) > 1 {
		h.writes++
		n = h.writes
	}
	h.mu.Unlock()
	if fault != nil && n > 0 {
		if err := fault(ctx, n); err != nil {
			return nil, err
		}
	}
	out := make([][]float32, len(texts))
	for i, text := range texts {
		v := make([]float32, 16)
		v[0] = 0.01
		for _, w := range strings.Fields(strings.ToLower(text)) {
			f := fnv.New32a()
			f.Write([]byte(strings.Trim(w, ".,:")))
			v[f.Sum32()%16]++
		}
		out[i] = v
	}
	return out, nil
}

// archive is the catalog the re-index tests start from: the demo tools and 40 more, so that a
// change of all of them is more than one embedder call (index.EmbedBatch).
func archive(t *testing.T) []*toolmeshv1.Tool {
	tools := demoTools(t)
	for i := range 40 {
		tools = append(tools, &toolmeshv1.Tool{Id: fmt.Sprintf("archive.record_%02d", i), Server: "archive", Name: fmt.Sprintf("record_%02d", i), Hash: "1",
			Description: fmt.Sprintf("Look up record %d in the archive by its shelf number.", i)})
	}
	return tools
}

// reindex is the change the re-index tests apply: every archive tool rewritten (a new hash and
// description), kelvin added, fahrenheit_to_celsius removed.
func reindex() (upserted []*toolmeshv1.Tool, removed []string) {
	for i := range 40 {
		upserted = append(upserted, &toolmeshv1.Tool{Id: fmt.Sprintf("archive.record_%02d", i), Server: "archive", Name: fmt.Sprintf("record_%02d", i), Hash: "2",
			Description: fmt.Sprintf("Translate a text into language number %d.", i)})
	}
	return append(upserted, kelvin), []string{"converter.fahrenheit_to_celsius"}
}

var reindexQueries = []string{
	"convert 30 degrees fahrenheit to celsius",
	"look up record 7 in the archive",
	"translate this text into language 7",
	"convert 300 kelvin to celsius",
}

// expected is what the queries answer on an index built from scratch with tools.
func expected(t *testing.T, tools []*toolmeshv1.Tool) []string {
	t.Helper()
	idx := index.New(memory.New(memory.WithLogger(quietLog)), lexical.Default(), &hashDense{})
	if err := idx.Upsert(context.Background(), tools); err != nil {
		t.Fatal(err)
	}
	s := newService(Config{Store: "memory"}, idx, nil, nil, nil)
	s.synced = true
	got, err := results(s, reindexQueries)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestFaultInterruptedReindex: a sync that fails halfway — the embedder failing after part of
// a batch, the snapshot write failing, the retriever stopped mid-apply — leaves the old,
// complete index serving (searches during and after answer exactly as before), the file on disk
// loads as the old index, and the next sync applies the change whole.
func TestFaultInterruptedReindex(t *testing.T) {
	embedDown := errors.New("embeddings server: 503 Service Unavailable")
	for _, tc := range []struct {
		name string
		// fail makes the next sync fail; during is called while the failing sync is in
		// flight, where the fault lets the test look. It returns what ends the fault.
		fail func(t *testing.T, dir string, dense *hashDense, during func()) (heal func())
		// wantErr is in the index status's last error after the failure ("" when the
		// retriever is stopped instead).
		wantErr string
		// restart stops the retriever mid-apply (during the fault) and starts a new one.
		restart bool
		// looks is whether the fault calls during.
		looks bool
	}{
		{"embedder fails after part of a batch", func(t *testing.T, _ string, dense *hashDense, during func()) func() {
			dense.setFault(func(_ context.Context, n int) error {
				if n == 1 {
					return nil
				}
				if n == 2 {
					during()
				}
				return embedDown
			})
			return func() { dense.setFault(nil) }
		}, embedDown.Error(), false, true},
		{"snapshot write fails", func(t *testing.T, dir string, _ *hashDense, _ func()) func() {
			// The data dir moves away (an unmounted volume): the index is embedded, but its
			// snapshot cannot be written.
			away := dir + ".away"
			if err := os.Rename(dir, away); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := os.Rename(away, dir); err != nil {
					t.Fatal(err)
				}
			}
		}, "memory store: persist", false, false},
		{"retriever stopped mid-apply", func(t *testing.T, _ string, dense *hashDense, during func()) func() {
			dense.setFault(func(ctx context.Context, n int) error {
				if n == 2 {
					during()
					<-ctx.Done() // the embedder is slow; the retriever is shut down meanwhile
					return ctx.Err()
				}
				return nil
			})
			return func() { dense.setFault(nil) }
		}, "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fdcheck.Check(t, 2)
			dir := filepath.Join(t.TempDir(), "data")
			path := filepath.Join(dir, "tools.index")
			cat := newCatalog(archive(t)...)
			cfg := Config{ExecutorAddr: serveCatalog(t, cat), Store: "memory", DataDir: dir, ResyncBackoffMax: 100 * time.Millisecond}
			dense := &hashDense{}
			start := func() (*Service, func()) {
				st, err := memory.Open(path, memory.WithLogger(quietLog))
				if err != nil {
					t.Fatal(err)
				}
				if st.LoadError() != nil {
					t.Fatalf("index file did not load: %v", st.LoadError())
				}
				s := newService(cfg, index.New(st, lexical.Default(), dense), st.Ready, st.Close, nil)
				return s, run(t, s)
			}
			s, stop := start()
			eventually.Check(t, 5*time.Second, "first sync", func() string {
				if ok, why := s.Ready(context.Background()); !ok {
					return why
				}
				return ""
			})
			before, err := results(s, reindexQueries)
			if err != nil {
				t.Fatal(err)
			}
			if want := expected(t, cat.current()); !slices.Equal(before, want) {
				t.Fatalf("before the re-index: got\n%s\nwant\n%s", strings.Join(before, "\n"), strings.Join(want, "\n"))
			}
			oldFile, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			same := func(when string) {
				t.Helper()
				got, err := results(s, reindexQueries)
				if err != nil {
					t.Errorf("search %s: %v", when, err)
					return
				}
				if !slices.Equal(got, before) {
					t.Errorf("search %s: got\n%s\nwant the old index's\n%s", when, strings.Join(got, "\n"), strings.Join(before, "\n"))
				}
				if st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{}); st.GetToolCount() != int32(len(archive(t))) {
					t.Errorf("index status %s: %d tools, want the old %d", when, st.GetToolCount(), len(archive(t)))
				}
			}

			looked := make(chan struct{})
			heal := tc.fail(t, dir, dense, func() {
				same("during the failing sync")
				close(looked)
			})
			subs := cat.subscribed()
			cat.change(reindex())
			switch {
			case tc.restart:
				<-looked
				stop() // shutdown while the embedder holds the batch
				if got, err := os.ReadFile(path); err != nil || string(got) != string(oldFile) {
					t.Errorf("index file after a stop mid-apply: %d bytes (%v), want the old %d bytes", len(got), err, len(oldFile))
				}
			default:
				eventually.Check(t, 5*time.Second, "the failed sync recorded and retried", func() string {
					st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
					if !strings.Contains(st.GetLastError(), tc.wantErr) {
						return fmt.Sprintf("last error %q does not contain %q", st.GetLastError(), tc.wantErr)
					}
					if n := cat.subscribed() - subs; n < 2 {
						return fmt.Sprintf("%d resubscriptions so far", n)
					}
					return ""
				})
				st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
				t.Logf("index status after the failure: last error %q", st.GetLastError())
				same("after the failed sync")
			}
			if tc.looks {
				select {
				case <-looked:
				default:
					t.Error("the fault did not let the test search during the failing sync")
				}
			}
			heal()
			if t.Failed() {
				return
			}
			if tc.restart {
				// What a restart loads is the old index, whole.
				st, err := memory.Open(path, memory.WithLogger(quietLog))
				if err != nil || st.LoadError() != nil {
					t.Fatalf("reopen the index file: %v, %v", err, st.LoadError())
				}
				hashes, _ := st.Hashes(context.Background())
				_ = st.Close()
				if got, want := slices.Sorted(maps.Keys(hashes)), ids(archive(t)); !slices.Equal(got, want) || hashes["archive.record_00"] != "1" {
					t.Errorf("index file after a stop mid-apply holds %v (archive.record_00 at %q), want the old %v", got, hashes["archive.record_00"], want)
				}
				s, stop = start()
			}

			want := expected(t, cat.current())
			eventually.Check(t, 5*time.Second, "the change applied whole", func() string {
				got, err := results(s, reindexQueries)
				if err != nil {
					return err.Error()
				}
				if !slices.Equal(got, want) {
					return fmt.Sprintf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				// The searches can agree before the resync has recorded itself complete.
				if st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{}); !st.GetReady() || st.GetLastError() != "" || int(st.GetToolCount()) != len(cat.current()) {
					return fmt.Sprintf("index status after the change: %v, want ready, no error, %d tools", st, len(cat.current()))
				}
				return ""
			})

			// A restart loads the new index whole from the file: nothing is embedded again.
			stop()
			dense.setFault(nil)
			s, _ = start()
			eventually.Check(t, 5*time.Second, "synced after a restart", func() string {
				if ok, why := s.Ready(context.Background()); !ok {
					return why
				}
				return ""
			})
			if got, err := results(s, reindexQueries); err != nil || !slices.Equal(got, want) {
				t.Errorf("search after a restart: got\n%s\n(%v), want\n%s", strings.Join(got, "\n"), err, strings.Join(want, "\n"))
			}
			if n := dense.writeCalls(); n != 0 {
				t.Errorf("a restart on the new index embedded %d batches, want 0", n)
			}
		})
	}
}

// TestFaultInterruptedFirstBuild: the first build of an index from empty fails after its first
// batch (the embedder goes down). Searches answer UNAVAILABLE saying the index is not synced,
// how far it got and why — not answers from the half-built index, which would name whatever
// tools happen to be written so far; readiness says not synced and why. Once the embedder is
// back the build completes without a restart.
func TestFaultInterruptedFirstBuild(t *testing.T) {
	fdcheck.Check(t, 2)
	tools := demoTools(t)
	for i := range 300 {
		tools = append(tools, &toolmeshv1.Tool{Id: fmt.Sprintf("bulk.tool_%03d", i), Server: "bulk", Name: fmt.Sprintf("tool_%03d", i), Hash: "1",
			Description: fmt.Sprintf("Bulk tool number %d of the warehouse.", i)})
	}
	cat := newCatalog(tools...) // sorted by id: the bulk tools are the first batch, the demo tools in the second
	dense := &hashDense{}
	down := errors.New("embeddings server: connection refused")
	firstBatch := upsertBatch / index.EmbedBatch // the embedder calls of one service batch
	dense.setFault(func(_ context.Context, n int) error {
		if n <= firstBatch {
			return nil
		}
		return down
	})
	st := memory.New(memory.WithLogger(quietLog))
	cfg := Config{ExecutorAddr: serveCatalog(t, cat), Store: "memory", ResyncBackoffMax: 100 * time.Millisecond}
	s := newService(cfg, index.New(st, lexical.Default(), dense), st.Ready, st.Close, nil)
	run(t, s)
	eventually.Check(t, 5*time.Second, "the first batch written and the failure recorded", func() string {
		st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
		if st.GetToolCount() != upsertBatch || !strings.Contains(st.GetLastError(), down.Error()) {
			return fmt.Sprintf("status %v", st)
		}
		return ""
	})
	_, err := top(s, "add two numbers")
	t.Logf("search during an interrupted first build: %v", err)
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Unavailable || !strings.Contains(msg, errNotSynced.Error()) ||
		!strings.Contains(msg, fmt.Sprintf("%d tools indexed so far", upsertBatch)) || !strings.Contains(msg, down.Error()) {
		t.Errorf("search during an interrupted first build: got %v, want UNAVAILABLE saying not synced, %d tools so far, and %q", err, upsertBatch, down)
	}
	if ok, why := s.Ready(context.Background()); ok || !strings.Contains(why, down.Error()) {
		t.Errorf("Ready during an interrupted first build: got %v %q, want not ready naming %q", ok, why, down)
	}

	dense.setFault(nil)
	eventually.Check(t, 5*time.Second, "the build completed", func() string {
		if ok, why := s.Ready(context.Background()); !ok {
			return why
		}
		if got, err := top(s, "add two numbers"); err != nil || got != "calculator.add" {
			return fmt.Sprintf("search: got %q, %v", got, err)
		}
		return ""
	})
	if st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{}); int(st.GetToolCount()) != len(tools) {
		t.Errorf("index after the build: %d tools, want %d", st.GetToolCount(), len(tools))
	}
}

// TestFaultQdrantLostItsData: Qdrant comes back on the same address without its data (a
// container restarted without its volume). The retriever notices on the first call that finds
// the collection gone — a search, or a readiness probe when no search comes — and rebuilds the
// index from the executor's tools without a restart; meanwhile every search either fails
// UNAVAILABLE or answers from the whole index, never OK from an empty or half-built one.
func TestFaultQdrantLostItsData(t *testing.T) {
	for _, noticedBy := range []string{"search", "readiness probe"} {
		t.Run(noticedBy, func(t *testing.T) {
			fdcheck.Check(t, 2)
			cat := newCatalog(demoTools(t)...)
			s, d := readyOnQdrant(t, cat)

			d.Stop()
			empty, err := qdranttest.Listen(d.Addr())
			if err != nil {
				t.Skipf("could not take the port back for a new double: %v", err)
			}
			t.Cleanup(empty.Close)
			var seen []string
			saw := func(msg string) {
				if !slices.Contains(seen, msg) {
					seen = append(seen, msg)
					t.Logf("while the index is rebuilt: %s", msg)
				}
			}
			if noticedBy == "readiness probe" {
				eventually.Check(t, 5*time.Second, "ready again", func() string {
					ok, why := s.Ready(context.Background())
					if !ok {
						saw("not ready: " + why)
						return why
					}
					return ""
				})
				if !slices.ContainsFunc(seen, func(m string) bool { return strings.Contains(m, "the stored index is gone") }) {
					t.Errorf("readiness never said the index was gone; it said %q", seen)
				}
			}
			eventually.Check(t, 5*time.Second, "the index rebuilt in the new Qdrant", func() string {
				got, err := top(s, "add two numbers")
				switch {
				case err != nil && status.Code(err) != codes.Unavailable:
					t.Fatalf("search while Qdrant lost its data: %v, want UNAVAILABLE or the right answer", err)
				case err != nil:
					saw("search: " + status.Convert(err).Message())
					return err.Error()
				case got != "calculator.add":
					t.Fatalf("search while Qdrant lost its data: OK with top %q, want calculator.add or UNAVAILABLE", got)
				}
				return ""
			})
			hashes, err := s.idx.Hashes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got, want := slices.Sorted(maps.Keys(hashes)), ids(cat.current()); !slices.Equal(got, want) {
				t.Errorf("index after the rebuild holds %v, want the executor's %v", got, want)
			}
			if ok, why := s.Ready(context.Background()); !ok {
				t.Errorf("not ready after the rebuild: %s", why)
			}
		})
	}
}

// TestFaultQdrantAppliesAWriteAfterTheRetrieverGaveUp: Qdrant's update queue is held up (an
// optimizer, a slow disk), so the write of a new tool times out and the retriever records the
// failure; the tool is removed from the executor before Qdrant catches up; then Qdrant applies
// the write it had accepted. The index must end up with the executor's tools, not with the
// removed one brought back behind the retriever's back.
func TestFaultQdrantAppliesAWriteAfterTheRetrieverGaveUp(t *testing.T) {
	fdcheck.Check(t, 2)
	cat := newCatalog(demoTools(t)...)
	s, d := readyOnQdrant(t, cat)

	d.StallUpdates()
	cat.change([]*toolmeshv1.Tool{kelvin}, nil)
	eventually.Check(t, 5*time.Second, "the write of the new tool given up on", func() string {
		st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
		if !strings.Contains(st.GetLastError(), "did not answer within") {
			return fmt.Sprintf("last error %q", st.GetLastError())
		}
		return ""
	})
	subs := cat.subscribed()
	cat.change(nil, []string{kelvin.GetId()})
	// Wait until a sync has seen the removal: it either finished (reading an index that does not
	// hold the pending write yet) or failed and the retriever subscribed again.
	eventually.Check(t, 5*time.Second, "a sync after the removal", func() string {
		st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
		if cat.subscribed() > subs && st.GetReady() && st.GetLastError() == "" {
			return ""
		}
		if cat.subscribed() >= subs+2 {
			return ""
		}
		return fmt.Sprintf("%d subscriptions since the removal, status %v", cat.subscribed()-subs, st)
	})
	t.Logf("updates Qdrant applies after the retriever gave up on them: %d", d.ResumeUpdates())

	want := ids(cat.current())
	eventually.Check(t, 5*time.Second, "the index equal to the executor's tools", func() string {
		hashes, err := s.idx.Hashes(context.Background())
		if err != nil {
			return err.Error()
		}
		if got := slices.Sorted(maps.Keys(hashes)); !slices.Equal(got, want) {
			return fmt.Sprintf("index holds %v, want %v", got, want)
		}
		if ok, why := s.Ready(context.Background()); !ok {
			return "not ready: " + why
		}
		return ""
	})
	if got, err := top(s, "convert 300 kelvin to celsius"); err != nil || got == kelvin.GetId() {
		t.Errorf("search for the removed tool: got %q, %v; want another tool", got, err)
	}
}
