package retriever

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/fdcheck"
	"github.com/toolmesh/toolmesh/services/retriever/index"
	"github.com/toolmesh/toolmesh/services/retriever/lexical"
	"github.com/toolmesh/toolmesh/services/retriever/store/memory"
)

// gatedCatalog is an executor that holds every WatchTools subscription until open is called:
// the retriever has started, but its first sync cannot finish.
type gatedCatalog struct {
	*catalog
	gate chan struct{}
	once sync.Once
}

func (g *gatedCatalog) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gatedCatalog) WatchTools(req *toolmeshv1.WatchToolsRequest, stream grpc.ServerStreamingServer[toolmeshv1.WatchToolsResponse]) error {
	select {
	case <-g.gate:
	case <-stream.Context().Done():
		return nil
	}
	return g.catalog.WatchTools(req, stream)
}

func serveGated(t *testing.T, g *gatedCatalog) string {
	t.Helper()
	addr := serveCatalog(t, g)
	t.Cleanup(g.open) // before the server stops: let held subscriptions go
	return addr
}

// textCounter counts the tool texts the index embeds (queries, one text each, are not counted).
type textCounter struct {
	*hashDense
	mu    sync.Mutex
	texts int
}

func (c *textCounter) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) > 1 {
		c.mu.Lock()
		c.texts += len(texts)
		c.mu.Unlock()
	}
	return c.hashDense.Embed(ctx, texts)
}

func (c *textCounter) embedded() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.texts
}

// TestKeptIndexServedOnlyIfComplete: a retriever restarted on a memory-store snapshot, with the
// executor not answering yet. An index whose first build finished serves at once; one left by a
// run stopped during its first build (256 of 340 tools written) does not: searches answer
// UNAVAILABLE saying the index is not synced and how many tools it holds, until the sync
// finishes, which embeds only the tools the earlier run had not written.
func TestKeptIndexServedOnlyIfComplete(t *testing.T) {
	tools := demoTools(t)
	for i := range 300 {
		tools = append(tools, &toolmeshv1.Tool{Id: fmt.Sprintf("bulk.tool_%03d", i), Server: "bulk", Name: fmt.Sprintf("tool_%03d", i), Hash: "1",
			Description: fmt.Sprintf("Bulk tool number %d of the warehouse.", i)})
	}
	firstBatch := upsertBatch / index.EmbedBatch // the embedder calls of one service batch
	for _, tc := range []struct {
		name string
		// stopAfterFirstBatch stops the first run once it has written its first batch.
		stopAfterFirstBatch bool
		// served is whether the restarted retriever serves before its sync finishes.
		served bool
		// reembedded is how many tools the restart's sync embeds.
		reembedded int
	}{
		{"first build finished", false, true, 0},
		{"first build stopped after one batch", true, false, len(tools) - upsertBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fdcheck.Check(t, 2)
			dir := filepath.Join(t.TempDir(), "data")
			path := filepath.Join(dir, "tools.index")
			cat := newCatalog(tools...) // sorted by id: the bulk tools are the first batch
			start := func(addr string, dense *textCounter) (*Service, func()) {
				st, err := memory.Open(path, memory.WithLogger(quietLog))
				if err != nil {
					t.Fatal(err)
				}
				if st.LoadError() != nil {
					t.Fatalf("index file did not load: %v", st.LoadError())
				}
				cfg := Config{ExecutorAddr: addr, Store: "memory", DataDir: dir, ResyncBackoffMax: 100 * time.Millisecond}
				s := newService(cfg, index.New(st, lexical.Default(), dense), st.Ready, st.Close, nil)
				return s, run(t, s)
			}
			status1 := func(s *Service) *toolmeshv1.GetIndexStatusResponse {
				st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
				return st
			}

			// The first run, from an empty data dir.
			dense := &textCounter{hashDense: &hashDense{}}
			if tc.stopAfterFirstBatch {
				dense.setFault(func(ctx context.Context, n int) error {
					if n > firstBatch {
						<-ctx.Done() // the embedder is slow; the retriever is killed meanwhile
						return ctx.Err()
					}
					return nil
				})
			}
			s, stop := start(serveCatalog(t, cat), dense)
			eventually.Check(t, 5*time.Second, "first run", func() string {
				st := status1(s)
				if tc.stopAfterFirstBatch && st.GetToolCount() != upsertBatch || !tc.stopAfterFirstBatch && !st.GetReady() {
					return fmt.Sprintf("status %v", st)
				}
				return ""
			})
			stop()

			// The restart, with the executor holding its answer.
			dense = &textCounter{hashDense: &hashDense{}}
			gated := &gatedCatalog{catalog: cat, gate: make(chan struct{})}
			s, _ = start(serveGated(t, gated), dense)
			var kept int
			if tc.stopAfterFirstBatch {
				kept = upsertBatch
			} else {
				kept = len(tools)
			}
			eventually.Check(t, 5*time.Second, "the kept index read", func() string {
				if st := status1(s); int(st.GetToolCount()) != kept {
					return fmt.Sprintf("status %v, want %d tools", st, kept)
				}
				return ""
			})
			got, err := top(s, "add two numbers")
			t.Logf("search before the sync: %q, %v", got, err)
			if tc.served {
				if err != nil || got != "calculator.add" {
					t.Errorf("search on a kept complete index before the sync: got %q, %v; want calculator.add", got, err)
				}
			} else {
				msg := status.Convert(err).Message()
				if status.Code(err) != codes.Unavailable || !strings.Contains(msg, errNotSynced.Error()) ||
					!strings.Contains(msg, fmt.Sprintf("(%d tools indexed so far)", upsertBatch)) {
					t.Errorf("search on a kept partial index before the sync: got %q, %v; want UNAVAILABLE saying not synced, %d tools so far",
						got, err, upsertBatch)
				}
			}
			if ok, why := s.Ready(context.Background()); ok || !strings.Contains(why, "not synced yet") {
				t.Errorf("Ready before the sync: got %v %q, want not synced", ok, why)
			}

			gated.open()
			eventually.Check(t, 5*time.Second, "synced", func() string {
				if ok, why := s.Ready(context.Background()); !ok {
					return why
				}
				if got, err := top(s, "add two numbers"); err != nil || got != "calculator.add" {
					return fmt.Sprintf("search: got %q, %v", got, err)
				}
				return ""
			})
			if st := status1(s); int(st.GetToolCount()) != len(tools) {
				t.Errorf("index after the sync: %d tools, want %d", st.GetToolCount(), len(tools))
			}
			if n := dense.embedded(); n != tc.reembedded {
				t.Errorf("the restart's sync embedded %d tools, want %d", n, tc.reembedded)
			}
		})
	}
}
