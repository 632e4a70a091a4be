package retriever

import (
	"context"
	"errors"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/searchbounds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeIndex is a test double of the tool index: it records writes and can fail on demand.
type fakeIndex struct {
	mu        sync.Mutex
	tools     map[string]*toolmeshv1.Tool
	upserts   []string // ids, in write order
	deletes   []string
	failNextN int // fail this many upserts
}

func newFakeIndex() *fakeIndex { return &fakeIndex{tools: map[string]*toolmeshv1.Tool{}} }

func (f *fakeIndex) Upsert(_ context.Context, tools []*toolmeshv1.Tool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failNextN > 0 {
		f.failNextN--
		return errors.New("embedder down")
	}
	for _, t := range tools {
		f.tools[t.GetId()] = t
		f.upserts = append(f.upserts, t.GetId())
	}
	return nil
}

func (f *fakeIndex) Delete(_ context.Context, ids []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		delete(f.tools, id)
		f.deletes = append(f.deletes, id)
	}
	return nil
}

func (f *fakeIndex) Search(_ context.Context, q string, k int, servers []string) ([]*toolmeshv1.ScoredTool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*toolmeshv1.ScoredTool
	for _, t := range f.tools {
		if len(servers) > 0 && !slices.Contains(servers, t.GetServer()) {
			continue
		}
		if strings.Contains(q, t.GetName()) {
			out = append(out, &toolmeshv1.ScoredTool{Tool: t, Score: 1})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetTool().GetId() < out[j].GetTool().GetId() })
	return out[:min(k, len(out))], nil
}

func (f *fakeIndex) Hashes(context.Context) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for id, t := range f.tools {
		out[id] = t.GetHash()
	}
	return out, nil
}

func (f *fakeIndex) Name() string { return "fake" }

// Complete: the fake records no completion marker, so whatever it holds counts as complete, as
// with the qdrant store (the marker's tests use the memory store).
func (f *fakeIndex) Complete(context.Context) (bool, error) { return true, nil }
func (f *fakeIndex) MarkComplete(context.Context) error     { return nil }

func (f *fakeIndex) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.tools {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (f *fakeIndex) writes() (upserts, deletes []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.upserts), slices.Clone(f.deletes)
}

// fakeExecutor is a test double of the executor's WatchTools: a snapshot, then the events
// the test pushes.
type fakeExecutor struct {
	toolmeshv1.UnimplementedExecutorServiceServer
	snapshot []*toolmeshv1.Tool
	events   chan *toolmeshv1.WatchToolsResponse
}

func (f *fakeExecutor) WatchTools(_ *toolmeshv1.WatchToolsRequest, stream grpc.ServerStreamingServer[toolmeshv1.WatchToolsResponse]) error {
	if err := stream.Send(&toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT, Upserted: f.snapshot, Revision: 1}); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case ev := <-f.events:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

func tool(id, hash string) *toolmeshv1.Tool {
	server, name, _ := strings.Cut(id, ".")
	return &toolmeshv1.Tool{Id: id, Server: server, Name: name, Hash: hash}
}

// serveExecutor runs fake on addr ("127.0.0.1:0" for a new port) until stop is called.
func serveExecutor(t *testing.T, addr string, fake *fakeExecutor) (string, func()) {
	t.Helper()
	var lis net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port of a stopped server can take a moment to free
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	toolmeshv1.RegisterExecutorServiceServer(g, fake)
	go func() { _ = g.Serve(lis) }()
	return lis.Addr().String(), g.Stop
}

func startService(t *testing.T, execAddr string, idx toolIndex) *Service {
	t.Helper()
	cfg := Config{ExecutorAddr: execAddr, Store: "memory", ResyncBackoffMax: 100 * time.Millisecond}
	s := newService(cfg, idx, nil, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func TestSyncIndexesOnlyWhatChanged(t *testing.T) {
	fake := &fakeExecutor{
		snapshot: []*toolmeshv1.Tool{tool("calc.add", "h1"), tool("calc.sub", "h1"), tool("conv.c2f", "h1")},
		events:   make(chan *toolmeshv1.WatchToolsResponse),
	}
	addr, stop := serveExecutor(t, "127.0.0.1:0", fake)
	defer stop()
	idx := newFakeIndex()
	idx.tools["stale.tool"] = tool("stale.tool", "h0") // left from before a restart
	idx.tools["calc.add"] = tool("calc.add", "h1")     // already current: must not be rewritten
	s := startService(t, addr, idx)

	eventually.True(t, 5*time.Second, "snapshot applied", func() bool { ok, _ := s.Ready(context.Background()); return ok })
	if got, want := idx.ids(), []string{"calc.add", "calc.sub", "conv.c2f"}; !slices.Equal(got, want) {
		t.Errorf("after snapshot index holds %v, want %v", got, want)
	}
	up, del := idx.writes()
	if slices.Contains(up, "calc.add") {
		t.Errorf("calc.add was re-indexed although its hash did not change; upserts %v", up)
	}
	if !slices.Equal(del, []string{"stale.tool"}) {
		t.Errorf("deletes = %v, want [stale.tool]", del)
	}

	fake.events <- &toolmeshv1.WatchToolsResponse{
		Type:       toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED,
		Upserted:   []*toolmeshv1.Tool{tool("calc.sub", "h2"), tool("calc.mul", "h1")},
		RemovedIds: []string{"conv.c2f"},
		Revision:   2,
	}
	eventually.True(t, 5*time.Second, "change applied", func() bool {
		st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
		return st.GetRevision() == 2
	})
	if got, want := idx.ids(), []string{"calc.add", "calc.mul", "calc.sub"}; !slices.Equal(got, want) {
		t.Errorf("after change index holds %v, want %v", got, want)
	}
	st, _ := s.GetIndexStatus(context.Background(), &toolmeshv1.GetIndexStatusRequest{})
	if !st.GetReady() || st.GetToolCount() != 3 || st.GetEmbedder() != "fake" {
		t.Errorf("status = %v, want ready with 3 tools from the fake embedder", st)
	}
}

func TestSyncSurvivesExecutorRestartAndWriteFailures(t *testing.T) {
	fake := &fakeExecutor{snapshot: []*toolmeshv1.Tool{tool("a.one", "h1")}, events: make(chan *toolmeshv1.WatchToolsResponse)}
	addr, stop := serveExecutor(t, "127.0.0.1:0", fake)
	idx := newFakeIndex()
	idx.failNextN = 2 // the first two writes fail: the sync must retry from a fresh snapshot
	s := startService(t, addr, idx)
	eventually.True(t, 5*time.Second, "indexed despite failed writes", func() bool { return slices.Equal(idx.ids(), []string{"a.one"}) })

	stop() // the executor goes away and comes back with another tool set
	restarted := &fakeExecutor{snapshot: []*toolmeshv1.Tool{tool("a.two", "h1")}, events: make(chan *toolmeshv1.WatchToolsResponse)}
	_, stop2 := serveExecutor(t, addr, restarted)
	defer stop2()
	eventually.True(t, 5*time.Second, "reconciled with the restarted executor", func() bool { return slices.Equal(idx.ids(), []string{"a.two"}) })
	if ok, why := s.Ready(context.Background()); !ok {
		t.Errorf("not ready after resync: %s", why)
	}
}

func TestSearchValidation(t *testing.T) {
	idx := newFakeIndex()
	s := newService(Config{}, idx, nil, nil, nil)
	ctx := context.Background()
	if _, err := s.SearchTools(ctx, &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: "add"}); status.Code(err) != codes.Unavailable {
		t.Errorf("search before any sync: %v, want UNAVAILABLE", err)
	}
	s.synced = true
	idx.tools["calc.add"] = tool("calc.add", "h")
	tests := []struct {
		name      string
		req       *toolmeshv1.RetrieverServiceSearchToolsRequest
		wantCode  codes.Code
		wantField string
	}{
		{"ok", &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: "please add"}, codes.OK, ""},
		{"empty query", &toolmeshv1.RetrieverServiceSearchToolsRequest{}, codes.InvalidArgument, "query"},
		{"oversized query", &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: strings.Repeat("x", searchbounds.MaxQueryBytes+1)}, codes.InvalidArgument, "query"},
		{"invalid UTF-8", &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: "a\xffb"}, codes.InvalidArgument, "query"},
		{"k too big", &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: "add", K: 51}, codes.InvalidArgument, "k"},
		{"k negative", &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: "add", K: -1}, codes.InvalidArgument, "k"},
		{"bad server filter", &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: "add", Servers: []string{"ok", "Bad!"}}, codes.InvalidArgument, "servers[1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.SearchTools(ctx, tc.req)
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.wantCode)
			}
			if tc.wantCode == codes.OK {
				if len(resp.GetResults()) != 1 || resp.GetResults()[0].GetTool().GetId() != "calc.add" {
					t.Errorf("results = %v, want calc.add", resp.GetResults())
				}
				return
			}
			if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, tc.wantField+":") {
				t.Errorf("message %q does not start with the field %q", msg, tc.wantField)
			}
		})
	}
}
