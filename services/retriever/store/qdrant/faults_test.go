package qdrant

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/fdcheck"
	"github.com/toolmesh/toolmesh/services/retriever/store"
	"github.com/toolmesh/toolmesh/services/retriever/store/qdrant/qdranttest"
)

// A Qdrant that fails or hangs on a call before accepting it (the double's fault hook stands
// for that): the error names Qdrant's address and comes within the store's timeout; the batch
// is one Qdrant update, and one Qdrant never accepted leaves nothing behind; once the fault is
// gone the same store works again. An update Qdrant did accept is applied even after the store
// gave up: TestQdrantAppliesAWriteAfterTheStoreGaveUp.
func TestQdrantFaults(t *testing.T) {
	fdcheck.Check(t, 2)
	d := qdranttest.Start(t)
	// Long enough that a 256-point upsert reaches the double within it under the race detector
	// on a busy machine: at 300 ms it did not in CI, the store gave up before the caller could,
	// and the late upsert was then applied (as a real Qdrant would), spoiling later cases.
	const timeout = 2 * time.Second
	s := fixtureStore(t, d, "faults", timeout)
	q := store.Query{Dense: []float32{0.1, 1, 0}, Sparse: sparseQ([]uint32{2, 6}, []float32{1, 1}), Limit: 5}
	before, err := s.Search(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	oldHashes, err := s.Hashes(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	// A batch as large as the service writes: every fixture tool changed, and more new ones.
	batch := make([]store.Doc, 0, upsertBatch)
	for _, f := range fixture {
		c := doc(f.ID, f.Server, "h2", []float32{0, 0, -1}, []uint32{9}, []float32{1})
		batch = append(batch, c)
	}
	for i := len(batch); i < upsertBatch; i++ {
		batch = append(batch, doc(fmt.Sprintf("more.t%03d", i), "more", "h1", []float32{1, 1, 1}, []uint32{2, 9}, []float32{1, 1}))
	}

	hang := func(ctx context.Context) error { <-ctx.Done(); return status.FromContextError(ctx.Err()).Err() }
	for _, tc := range []struct {
		name   string
		method string
		fault  func(ctx context.Context) error
		op     func(ctx context.Context) error
		want   string
		// cancel is whether the caller gives up while the call is in flight (a shutdown
		// mid-write).
		cancel bool
	}{
		{"upsert rejected", qc.Points_Upsert_FullMethodName,
			func(context.Context) error { return status.Error(codes.Internal, "No space left on device") },
			func(ctx context.Context) error { return s.Upsert(ctx, batch) },
			"qdrant at " + d.Addr() + `: upsert in collection "` + s.Collection() + `"`, false},
		{"upsert hangs", qc.Points_Upsert_FullMethodName, hang,
			func(ctx context.Context) error { return s.Upsert(ctx, batch) },
			"qdrant at " + d.Addr() + " did not answer within " + timeout.String() + ": upsert", false},
		{"upsert cancelled by the caller", qc.Points_Upsert_FullMethodName, hang,
			func(ctx context.Context) error { return s.Upsert(ctx, batch) },
			"qdrant at " + d.Addr() + `: upsert in collection "` + s.Collection() + `": `, true},
		{"search hangs", qc.Points_Query_FullMethodName, hang,
			func(ctx context.Context) error { _, err := s.Search(ctx, q); return err },
			"qdrant at " + d.Addr() + " did not answer within " + timeout.String() + ": query", false},
		{"scroll rejected", qc.Points_Scroll_FullMethodName,
			func(context.Context) error { return status.Error(codes.Unavailable, "shutting down") },
			func(ctx context.Context) error { _, err := s.Hashes(ctx); return err },
			"qdrant at " + d.Addr() + " is not reachable: scroll", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upserts := d.Calls(qc.Points_Upsert_FullMethodName)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			d.SetFault(func(callCtx context.Context, method string, _ int) error {
				if method != tc.method {
					return nil
				}
				if tc.cancel {
					cancel() // the call has reached Qdrant
				}
				return tc.fault(callCtx)
			})
			start := time.Now()
			err := tc.op(ctx)
			took := time.Since(start)
			d.SetFault(nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
			if took > timeout+time.Second {
				t.Errorf("took %v, want at most about the %v timeout", took, timeout)
			}
			if tc.method == qc.Points_Upsert_FullMethodName {
				if n := d.Calls(qc.Points_Upsert_FullMethodName) - upserts; n != 1 {
					t.Errorf("upsert of %d docs made %d calls, want 1 (one update)", len(batch), n)
				}
			}
			// Nothing of the batch Qdrant never accepted is visible.
			got, err := s.Hashes(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, oldHashes) {
				t.Errorf("hashes after the failure: got %d points, want the old %v", len(got), oldHashes)
			}
			after, err := s.Search(t.Context(), q)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(after, before, func(a, b store.Hit) bool { return a.ID == b.ID && a.Score == b.Score }) {
				t.Errorf("search after the failure: got %v, want the old %v", ids(after), ids(before))
			}
		})
	}

	// The fault is gone: the batch goes in whole.
	if err := s.Upsert(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	got, err := s.Hashes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != upsertBatch || got["calc.add"] != "h2" {
		t.Errorf("after the batch: %d points, calc.add at %q; want %d, h2", len(got), got["calc.add"], upsertBatch)
	}
}

// Qdrant killed and started again on the same address with its data: the same store answers
// again without being re-made, and nothing was lost.
func TestQdrantRestart(t *testing.T) {
	fdcheck.Check(t, 2)
	d := qdranttest.Start(t)
	const timeout = 300 * time.Millisecond
	s := fixtureStore(t, d, "restart", timeout)
	q := store.Query{Sparse: sparseQ([]uint32{2, 3}, []float32{1, 1}), Limit: 5}
	before, err := s.Search(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}

	d.Stop()
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"Ready", func() error { return s.Ready(t.Context()) }},
		{"Search", func() error { _, err := s.Search(t.Context(), q); return err }},
		{"Upsert", func() error { return s.Upsert(t.Context(), fixture[:1]) }},
		{"Delete", func() error { return s.Delete(t.Context(), []string{"calc.add"}) }},
		{"Hashes", func() error { _, err := s.Hashes(t.Context()); return err }},
	} {
		start := time.Now()
		err := op.run()
		if want := "qdrant at " + d.Addr() + " is not reachable"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s with Qdrant down: got %v, want an error containing %q", op.name, err, want)
		}
		if took := time.Since(start); took > timeout+time.Second {
			t.Errorf("%s with Qdrant down took %v, want at most about the %v timeout", op.name, took, timeout)
		}
	}

	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := start.Add(5 * time.Second)
	for err = s.Ready(t.Context()); err != nil; err = s.Ready(t.Context()) {
		if time.Now().After(deadline) {
			t.Fatalf("Ready after Qdrant came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("ready %v after Qdrant came back", time.Since(start).Round(time.Millisecond))
	after, err := s.Search(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(after), ids(before)) {
		t.Errorf("search after the restart: got %v, want %v", ids(after), ids(before))
	}
}

func ids(hits []store.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.ID
	}
	return out
}

// A Qdrant whose update queue is held up: the store gives up on an upsert (its timeout), and
// Qdrant applies it afterwards, as it applies every update it has accepted. Hashes, which the
// retriever reads to reconcile, must not report the state from before that write as if it were
// final: it fails while the write is still pending, and once Qdrant has caught up it reports
// the write. Only the first read after a write the store gave up on pays for the wait.
func TestQdrantAppliesAWriteAfterTheStoreGaveUp(t *testing.T) {
	fdcheck.Check(t, 2)
	d := qdranttest.Start(t)
	const timeout = 300 * time.Millisecond
	s := fixtureStore(t, d, "late", timeout)
	checkHashes(t, s, map[string]string{"calc.add": "h1", "calc.mul": "h1", "conv.c2f": "h1", "conv.km": "h1", "web.fetch": "h1"})

	d.StallUpdates()
	changed := doc("calc.add", "calc", "h2", []float32{0, 0, -1}, []uint32{8}, []float32{1})
	added := doc("calc.sub", "calc", "h1", []float32{1, 1, 0}, []uint32{2}, []float32{1})
	if err := s.Upsert(t.Context(), []store.Doc{changed, added}); err == nil || !strings.Contains(err.Error(), "did not answer within") {
		t.Fatalf("upsert while Qdrant's updates are held up: got %v, want a timeout", err)
	}
	got, err := s.Hashes(t.Context())
	if err == nil {
		t.Fatalf("hashes while the write the store gave up on is pending: got %v and no error, want an error (the write is still to come)", got)
	}
	t.Logf("hashes while the write is pending: %v", err)
	if want := "writes given up on earlier"; !strings.Contains(err.Error(), want) {
		t.Errorf("hashes while the write is pending: got %v, want an error containing %q", err, want)
	}

	if n := d.ResumeUpdates(); n == 0 {
		t.Fatal("no update was queued")
	}
	checkHashes(t, s, map[string]string{"calc.add": "h2", "calc.mul": "h1", "calc.sub": "h1", "conv.c2f": "h1", "conv.km": "h1", "web.fetch": "h1"})
	barriers := d.Calls(qc.Points_DeletePayload_FullMethodName)
	checkHashes(t, s, map[string]string{"calc.add": "h2", "calc.mul": "h1", "calc.sub": "h1", "conv.c2f": "h1", "conv.km": "h1", "web.fetch": "h1"})
	if n := d.Calls(qc.Points_DeletePayload_FullMethodName) - barriers; n != 0 {
		t.Errorf("a second read with nothing given up on made %d barrier writes, want 0", n)
	}
}

// fixtureStore is a store on d with the given call timeout, holding the fixture.
func fixtureStore(t *testing.T, d *qdranttest.Double, name string, timeout time.Duration) *Store {
	t.Helper()
	s, err := New(t.Context(), Config{Addr: d.Addr(), Collection: name, Timeout: timeout}, name, 3, []string{"words"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Upsert(t.Context(), fixture); err != nil {
		t.Fatal(err)
	}
	return s
}
