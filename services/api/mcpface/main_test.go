package mcpface

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// executorDouble is a test double of the executor's gRPC service: WatchTools sends the
// catalog, then each change made with change, as the real one does.
type executorDouble struct {
	toolmeshv1.UnimplementedExecutorServiceServer
	mu      sync.Mutex
	tools   map[string]*toolmeshv1.Tool
	rev     uint64
	subs    map[chan *toolmeshv1.WatchToolsResponse]bool
	servers []string
	// snapshotDelay holds WatchTools' first message back, as an executor still connecting does.
	snapshotDelay time.Duration
}

func newExecutorDouble(tools ...*toolmeshv1.Tool) *executorDouble {
	e := &executorDouble{tools: map[string]*toolmeshv1.Tool{}, subs: map[chan *toolmeshv1.WatchToolsResponse]bool{}}
	for _, t := range tools {
		e.tools[t.GetId()] = t
	}
	return e
}

func (e *executorDouble) WatchTools(_ *toolmeshv1.WatchToolsRequest, stream grpc.ServerStreamingServer[toolmeshv1.WatchToolsResponse]) error {
	e.mu.Lock()
	snap := &toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT, Revision: e.rev}
	for _, t := range e.tools {
		snap.Upserted = append(snap.Upserted, t)
	}
	ch := make(chan *toolmeshv1.WatchToolsResponse, 64)
	e.subs[ch] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.subs, ch)
		e.mu.Unlock()
	}()
	time.Sleep(e.snapshotDelay)
	if err := stream.Send(snap); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

func (e *executorDouble) ListServers(context.Context, *toolmeshv1.ExecutorServiceListServersRequest) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	resp := &toolmeshv1.ExecutorServiceListServersResponse{}
	for _, s := range e.servers {
		resp.Servers = append(resp.Servers, &toolmeshv1.Server{Name: s})
	}
	return resp, nil
}

// change upserts and removes tools and tells every watcher.
func (e *executorDouble) change(upserted []*toolmeshv1.Tool, removed ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rev++
	ev := &toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED, Upserted: upserted, RemovedIds: removed, Revision: e.rev}
	for _, t := range upserted {
		e.tools[t.GetId()] = t
	}
	for _, id := range removed {
		delete(e.tools, id)
	}
	for ch := range e.subs {
		ch <- ev
	}
}

// toolsDouble is a test double of the api's tools handler: calls answer with result (or
// block until block is closed or the call's context ends); searches answer with found.
type toolsDouble struct {
	mu       sync.Mutex
	calls    []*toolmeshv1.CallToolRequest
	callers  []string // auth.Name of each call
	result   func(*toolmeshv1.CallToolRequest) (*toolmeshv1.CallToolResponse, error)
	block    chan struct{}
	canceled chan struct{} // closed when a blocked call's context ends
	found    []*toolmeshv1.ScoredTool
	searches []*toolmeshv1.SearchToolsRequest
	spans    []trace.SpanContext // the span in each call's context
	// reports are the progress reports a call that asks for them gets before its result,
	// every reportEvery, as a tool working through steps sends them.
	reports     []*toolmeshv1.CallProgress
	reportEvery time.Duration
	asked       []bool // whether each call asked for progress
	// wait makes each call take that long, or until its context ends; slots, when set, holds
	// each call until it gets one, as the executor's per-server concurrency does.
	wait  time.Duration
	slots chan struct{}
	// running counts the calls under way (after their slot); ended, the calls whose context
	// ended before they were done.
	running, ended atomic.Int32
}

func (d *toolsDouble) CallToolProgress(ctx context.Context, req *toolmeshv1.CallToolRequest, progress func(*toolmeshv1.CallProgress)) (*toolmeshv1.CallToolResponse, error) {
	d.mu.Lock()
	d.asked = append(d.asked, progress != nil)
	if progress != nil {
		for _, p := range d.reports {
			time.Sleep(d.reportEvery)
			progress(p)
		}
	}
	d.calls = append(d.calls, req)
	d.callers = append(d.callers, auth.Name(ctx))
	d.spans = append(d.spans, trace.SpanContextFromContext(ctx))
	block, canceled, result, wait, slots := d.block, d.canceled, d.result, d.wait, d.slots
	d.mu.Unlock()
	if slots != nil {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		case <-ctx.Done():
			d.ended.Add(1)
			return nil, ctx.Err()
		}
	}
	d.running.Add(1)
	defer d.running.Add(-1)
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			d.ended.Add(1)
			return nil, ctx.Err()
		}
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			close(canceled)
			return nil, ctx.Err()
		}
	}
	if result != nil {
		return result(req)
	}
	return &toolmeshv1.CallToolResponse{Content: []*toolmeshv1.Content{{Type: "text", Text: proto.String("ok " + req.GetServer() + "." + req.GetName())}}}, nil
}

func (d *toolsDouble) SearchTools(_ context.Context, req *toolmeshv1.SearchToolsRequest) (*toolmeshv1.SearchToolsResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.searches = append(d.searches, req)
	k := int(req.GetK())
	if k == 0 {
		k = 4
	}
	return &toolmeshv1.SearchToolsResponse{Results: d.found[:min(k, len(d.found))]}, nil
}

func (d *toolsDouble) lastCall() (*toolmeshv1.CallToolRequest, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.calls) == 0 {
		return nil, ""
	}
	return d.calls[len(d.calls)-1], d.callers[len(d.callers)-1]
}

// testTool is a tool of server with one number argument.
func testTool(t testing.TB, id string) *toolmeshv1.Tool {
	t.Helper()
	server, name, _ := cutID(id)
	in, err := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "number"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &toolmeshv1.Tool{Id: id, Server: server, Name: name, Description: "Tool " + id + ".", InputSchema: in, Hash: "h-" + id}
}

func cutID(id string) (string, string, bool) {
	for i := range len(id) {
		if id[i] == '.' {
			return id[:i], id[i+1:], true
		}
	}
	return id, "", false
}

// harness is a face over an executor double and a tools double, behind the REST port's
// token check, on an httptest server.
type harness struct {
	url   string
	face  *Face
	exec  *executorDouble
	tools *toolsDouble
}

type harnessOptions struct {
	cfg    Config
	tokens string // TOOLMESH_API_TOKENS-style NAME:TOKEN list; "" turns auth off
	policy policy.Config
	tel    *telemetry.Service
	auth   auth.Config // the REST port's limits per token (MaxInFlight, ...)
}

func newHarness(t testing.TB, exec *executorDouble, opts harnessOptions) *harness {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	toolmeshv1.RegisterExecutorServiceServer(g, exec)
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(opts.policy, nil)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := auth.New(opts.auth, opts.tokens, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cfg := opts.cfg
	if cfg.ListChangedDelay == 0 {
		cfg.ListChangedDelay = 50 * time.Millisecond
	}
	tools := &toolsDouble{}
	f := New(cfg, tools, toolmeshv1.NewExecutorServiceClient(conn), pol, slog.New(slog.DiscardHandler), opts.tel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	ts := httptest.NewServer(Challenge(guard.HTTP(f, Public, nil)))
	t.Cleanup(func() {
		f.Drain()
		ts.CloseClientConnections()
		ts.Close()
		cancel()
		<-done
		f.Close()
		_ = conn.Close()
		g.Stop()
	})
	return &harness{url: ts.URL, face: f, exec: exec, tools: tools}
}

// connect opens an mcp-go client on path at version (mcp.LATEST_PROTOCOL_VERSION is the
// stateless era) with token; legacy clients listen on the GET stream.
func (h *harness) connect(t *testing.T, path, version, token string) *client.Client {
	t.Helper()
	var topts []transport.StreamableHTTPCOption
	if token != "" {
		topts = append(topts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	var copts []client.ClientOption
	if version != mcp.LATEST_PROTOCOL_VERSION {
		topts = append(topts, transport.WithContinuousListening())
		copts = append(copts, client.WithProtocolVersion(version))
	}
	tr, err := transport.NewStreamableHTTP(h.url+path, topts...)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, copts...)
	initialize(t, c, version)
	return c
}

// connectSSE opens an mcp-go client on the legacy SSE endpoint with token.
func (h *harness) connectSSE(t *testing.T, token string) *client.Client {
	t.Helper()
	var opts []transport.ClientOption
	if token != "" {
		opts = append(opts, client.WithHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	c, err := client.NewSSEMCPClient(h.url+SSEPath, opts...)
	if err != nil {
		t.Fatal(err)
	}
	initialize(t, c, "2025-06-18")
	return c
}

func initialize(t *testing.T, c *client.Client, version string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The transport's streams (SSE, the GET stream) live as long as Start's context.
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = version
	req.Params.ClientInfo = mcp.Implementation{Name: "mcpface-test", Version: "0"}
	res, err := c.Initialize(ctx, req)
	if err != nil {
		t.Fatalf("initialize at %s: %v", version, err)
	}
	if res.ProtocolVersion != version {
		t.Fatalf("negotiated %s, want %s", res.ProtocolVersion, version)
	}
}

// listAll lists every tool page by page and returns them and the number of pages.
func listAll(t *testing.T, c *client.Client) ([]mcp.Tool, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var all []mcp.Tool
	req := mcp.ListToolsRequest{}
	for pages := 1; ; pages++ {
		res, err := c.ListToolsByPage(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, res.Tools...)
		if res.NextCursor == "" {
			return all, pages
		}
		if pages > 1000 {
			t.Fatal("more than 1000 pages")
		}
		req.Params.Cursor = res.NextCursor
	}
}

func names(tools []mcp.Tool) []string {
	out := make([]string, 0, len(tools))
	for _, t := range tools {
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out
}

func call(t *testing.T, c *client.Client, name string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	return c.CallTool(ctx, req)
}

func text(res *mcp.CallToolResult) string {
	if res == nil {
		return "<nil>"
	}
	var s string
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			s += tc.Text
		}
	}
	return s
}

var versions = []string{mcp.LATEST_PROTOCOL_VERSION, "2025-11-25", "2025-06-18"}

func ids(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}
