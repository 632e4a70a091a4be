package executor

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// transportCase is one way of reaching a test server.
type transportCase struct {
	name     string
	modern   bool // expect the 2026-07-28 protocol
	fillers  int
	setup    func(t *testing.T, ts *testMCP) (mcpconfig.Server, *httpHarness)
	stdio    bool
	cancelFn string
}

func transportCases() []transportCase {
	return []transportCase{
		{name: "sse-modern", modern: true, setup: func(t *testing.T, ts *testMCP) (mcpconfig.Server, *httpHarness) {
			h := newHTTPHarness(t, sseHandler(fixed(ts)))
			return mcpconfig.Server{Transport: mcpconfig.TransportSSE, URL: "http://" + h.addr + "/sse"}, h
		}},
		{name: "sse-legacy-pinned", modern: false, setup: func(t *testing.T, ts *testMCP) (mcpconfig.Server, *httpHarness) {
			h := newHTTPHarness(t, sseHandler(fixed(ts)))
			return mcpconfig.Server{Transport: mcpconfig.TransportSSE, URL: "http://" + h.addr + "/sse", ProtocolVersion: mcp.ProtocolVersion20251125}, h
		}},
		{name: "streamable-modern", modern: true, setup: func(t *testing.T, ts *testMCP) (mcpconfig.Server, *httpHarness) {
			h := newHTTPHarness(t, streamableHandler(fixed(ts)))
			return mcpconfig.Server{Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h.addr + "/mcp"}, h
		}},
		{name: "streamable-legacy-server", modern: false, setup: func(t *testing.T, ts *testMCP) (mcpconfig.Server, *httpHarness) {
			h := newHTTPHarness(t, streamableHandler(fixed(ts), legacyOnly))
			return mcpconfig.Server{Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h.addr + "/mcp"}, h
		}},
		{name: "streamable-2025-06-18-pinned", modern: false, setup: func(t *testing.T, ts *testMCP) (mcpconfig.Server, *httpHarness) {
			h := newHTTPHarness(t, streamableHandler(fixed(ts)))
			return mcpconfig.Server{Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h.addr + "/mcp", ProtocolVersion: "2025-06-18"}, h
		}},
		{name: "stdio", modern: true, stdio: true},
	}
}

func call(t *testing.T, h *executorHarness, id string, args map[string]any) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	t.Helper()
	var st *structpb.Struct
	if args != nil {
		var err error
		if st, err = structpb.NewStruct(args); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.client.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: id, Arguments: st})
}

func text(r *toolmeshv1.ExecutorServiceCallToolResponse) string {
	var b strings.Builder
	for _, c := range r.GetContent() {
		b.WriteString(c.GetText())
	}
	return b.String()
}

func wantCode(t *testing.T, err error, code codes.Code, contains ...string) *status.Status {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("got %v %q, want code %v", st.Code(), st.Message(), code)
	}
	for _, c := range contains {
		if !strings.Contains(st.Message(), c) {
			t.Errorf("message %q does not contain %q", st.Message(), c)
		}
	}
	return st
}

// TestTransports runs the basic contract over every transport and both protocol eras.
func TestTransports(t *testing.T) {
	for _, tc := range transportCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := newTestMCP(tc.name, 10, server.WithPaginationLimit(4))
			var srv mcpconfig.Server
			var cancelFile string
			if tc.stdio {
				srv, cancelFile = stdioServer(t, 10)
			} else {
				srv, _ = tc.setup(t, ts)
			}
			h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"calc": srv}})
			h.waitReady(t)

			// Server status and protocol era.
			ls, err := h.client.ListServers(context.Background(), &toolmeshv1.ExecutorServiceListServersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			s := ls.GetServers()[0]
			if s.GetState() != toolmeshv1.ServerState_SERVER_STATE_READY || s.GetToolCount() != 16 || s.GetConnectedAt() == nil {
				t.Errorf("server status = %v", s)
			}
			if got := mcp.IsModernProtocol(s.GetProtocolVersion()); got != tc.modern {
				t.Errorf("protocol %q: modern=%v, want %v", s.GetProtocolVersion(), got, tc.modern)
			}
			if srv.ProtocolVersion != "" && s.GetProtocolVersion() != srv.ProtocolVersion {
				t.Errorf("protocol %q, want pinned %q", s.GetProtocolVersion(), srv.ProtocolVersion)
			}
			if !strings.HasPrefix(s.GetServerName(), "test-") {
				t.Errorf("server name %q", s.GetServerName())
			}

			// Pagination: 6 tools + 10 fillers, 4 per page.
			lt, err := h.client.ListTools(context.Background(), &toolmeshv1.ExecutorServiceListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(lt.GetTools()) != 16 {
				t.Fatalf("got %d tools, want 16 (pagination)", len(lt.GetTools()))
			}
			for _, tool := range lt.GetTools() {
				if !strings.HasPrefix(tool.GetId(), "calc.") || tool.GetHash() == "" || tool.GetInputSchema() == nil {
					t.Errorf("bad tool %v", tool)
				}
			}

			// A call.
			r, err := call(t, h, "calc.add", map[string]any{"a": 2, "b": 3})
			if err != nil || text(r) != "5" || r.GetIsError() {
				t.Fatalf("add: got %v %v, want 5", r, err)
			}
			// is_error result is a normal response.
			r, err = call(t, h, "calc.fail", nil)
			if err != nil || !r.GetIsError() || !strings.Contains(text(r), "boom") {
				t.Fatalf("fail: got %v %v, want is_error with boom", r, err)
			}

			// Timeout: DEADLINE_EXCEEDED naming tool and timeout; the server sees the cancellation.
			args, _ := structpb.NewStruct(map[string]any{"ms": 5000})
			start := time.Now()
			_, err = h.client.CallTool(context.Background(), &toolmeshv1.ExecutorServiceCallToolRequest{
				ToolId: "calc.slow", Arguments: args, Timeout: durationpb.New(300 * time.Millisecond)})
			wantCode(t, err, codes.DeadlineExceeded, `"calc.slow"`, "300ms")
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("timeout took %s", d)
			}
			waitCancelled(t, ts, cancelFile)

			// The session still works after a cancellation.
			if r, err := call(t, h, "calc.add", map[string]any{"a": 1, "b": 1}); err != nil || text(r) != "2" {
				t.Fatalf("add after timeout: %v %v", r, err)
			}

			// list_changed: the server adds a tool; the catalog and a watcher see it.
			wctx, wcancel := context.WithCancel(context.Background())
			defer wcancel()
			w, err := h.client.WatchTools(wctx, &toolmeshv1.WatchToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			snap, err := w.Recv()
			if err != nil || snap.GetType() != toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT || len(snap.GetUpserted()) != 16 {
				t.Fatalf("first watch event: %v %v", snap, err)
			}
			if _, err := call(t, h, "calc.grow", nil); err != nil {
				t.Fatal(err)
			}
			ev := recvWithin(t, w, 5*time.Second)
			if ev.GetType() != toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED || ev.GetRevision() <= snap.GetRevision() ||
				len(ev.GetUpserted()) != 1 || ev.GetUpserted()[0].GetId() != "calc.extra_1" {
				t.Fatalf("change event = %v", ev)
			}
			if r, err := call(t, h, "calc.extra_1", nil); err != nil || text(r) != "extra_1" {
				t.Fatalf("grown tool: %v %v", r, err)
			}
		})
	}
}

func recvWithin(t *testing.T, w toolmeshv1.ExecutorService_WatchToolsClient, d time.Duration) *toolmeshv1.WatchToolsResponse {
	t.Helper()
	type res struct {
		ev  *toolmeshv1.WatchToolsResponse
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ev, err := w.Recv()
		ch <- res{ev, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("watch: %v", r.err)
		}
		return r.ev
	case <-time.After(d):
		t.Fatalf("no watch event within %s", d)
	}
	return nil
}

func waitCancelled(t *testing.T, ts *testMCP, cancelFile string) {
	t.Helper()
	deadline := time.After(3 * time.Second)
	if cancelFile != "" {
		for {
			if _, err := os.Stat(cancelFile); err == nil {
				return
			}
			select {
			case <-deadline:
				t.Errorf("stdio server did not see the cancellation")
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	select {
	case <-ts.cancelled:
	case <-deadline:
		t.Errorf("server did not see the cancellation")
	}
}

func TestValidationAndNotFound(t *testing.T) {
	ts := newTestMCP("calc", 0)
	h1 := newHTTPHarness(t, streamableHandler(fixed(ts)))
	ts2 := newTestMCP("other", 0)
	h2 := newHTTPHarness(t, sseHandler(fixed(ts2)))
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"calc":  {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h1.addr + "/mcp"},
		"other": {Transport: mcpconfig.TransportSSE, URL: "http://" + h2.addr + "/sse"},
	}})
	h.waitReady(t)

	tests := []struct {
		name     string
		id       string
		args     map[string]any
		code     codes.Code
		contains []string
		field    string
	}{
		{"wrong type", "calc.add", map[string]any{"a": "x", "b": 1}, codes.InvalidArgument, []string{"arguments.a: got string, want number"}, "arguments.a"},
		{"missing property", "calc.add", map[string]any{"a": 1}, codes.InvalidArgument, []string{`arguments: missing property "b"`}, "arguments"},
		{"missing arguments", "calc.add", nil, codes.InvalidArgument, []string{`missing property "a"`, `missing property "b"`}, "arguments"},
		{"unknown tool", "calc.nope", nil, codes.NotFound, []string{`unknown tool "calc.nope"`}, ""},
		{"unknown server", "nosuch.add", nil, codes.NotFound, []string{`unknown tool "nosuch.add"`}, ""},
		{"no dot", "calc", nil, codes.NotFound, []string{`unknown tool "calc"`}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, h, tt.id, tt.args)
			st := wantCode(t, err, tt.code, tt.contains...)
			if tt.field == "" {
				return
			}
			var br *errdetails.BadRequest
			for _, d := range st.Details() {
				if b, ok := d.(*errdetails.BadRequest); ok {
					br = b
				}
			}
			if br == nil || len(br.GetFieldViolations()) == 0 || br.GetFieldViolations()[0].GetField() != tt.field {
				t.Errorf("BadRequest detail = %v, want field %q", br, tt.field)
			}
		})
	}

	// Two servers expose the same tool names; ids keep them apart.
	for _, id := range []string{"calc.whoami", "other.whoami"} {
		r, err := call(t, h, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimSuffix(id, ".whoami"); text(r) != want {
			t.Errorf("%s answered by %q, want %q", id, text(r), want)
		}
	}
	lt, err := h.client.ListTools(context.Background(), &toolmeshv1.ExecutorServiceListToolsRequest{Server: "other"})
	if err != nil || len(lt.GetTools()) != 6 {
		t.Fatalf("ListTools(other) = %d tools, %v", len(lt.GetTools()), err)
	}
	_, err = h.client.ListTools(context.Background(), &toolmeshv1.ExecutorServiceListToolsRequest{Server: "zzz"})
	wantCode(t, err, codes.NotFound)
}

// TestServerKilledMidCall: the call fails fast with UNAVAILABLE naming the
// server; once the server is back on the same address, calls work again.
func TestServerKilledMidCall(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T) (mcpconfig.Server, func(), func())
	}{
		{"sse", func(t *testing.T) (mcpconfig.Server, func(), func()) {
			h := newHTTPHarness(t, sseHandler(func() *testMCP { return newTestMCP("sse", 0) }))
			return mcpconfig.Server{Transport: mcpconfig.TransportSSE, URL: "http://" + h.addr + "/sse"}, h.kill, h.restart
		}},
		{"streamable", func(t *testing.T) (mcpconfig.Server, func(), func()) {
			h := newHTTPHarness(t, streamableHandler(func() *testMCP { return newTestMCP("sh", 0) }))
			return mcpconfig.Server{Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h.addr + "/mcp"}, h.kill, h.restart
		}},
		{"streamable-legacy", func(t *testing.T) (mcpconfig.Server, func(), func()) {
			h := newHTTPHarness(t, streamableHandler(func() *testMCP { return newTestMCP("shl", 0) }, legacyOnly))
			return mcpconfig.Server{Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h.addr + "/mcp"}, h.kill, h.restart
		}},
		{"stdio", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var srv mcpconfig.Server
			var kill, restart func()
			if tc.setup != nil {
				srv, kill, restart = tc.setup(t)
			} else {
				srv, _ = stdioServer(t, 0)
			}
			h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"victim": srv}})
			h.waitReady(t)
			if kill == nil {
				r, err := call(t, h, "victim.pid", nil)
				if err != nil {
					t.Fatal(err)
				}
				pid := 0
				for _, c := range text(r) {
					pid = pid*10 + int(c-'0')
				}
				kill = func() { _ = syscall.Kill(pid, syscall.SIGKILL) }
				restart = func() {}
			}

			errc := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := call(t, h, "victim.slow", map[string]any{"ms": 8000})
				errc <- err
			}()
			time.Sleep(200 * time.Millisecond)
			kill()
			select {
			case err := <-errc:
				wantCode(t, err, codes.Unavailable, `"victim"`)
				if d := time.Since(start); d > 4*time.Second {
					t.Errorf("UNAVAILABLE after %s", d)
				}
			case <-time.After(6 * time.Second):
				t.Fatal("call did not fail after the server was killed")
			}
			if tc.setup != nil {
				// While down: fail fast, UNAVAILABLE, with the reason.
				_, err := call(t, h, "victim.add", map[string]any{"a": 1, "b": 2})
				wantCode(t, err, codes.Unavailable, `"victim"`)
				ls, _ := h.client.ListServers(context.Background(), &toolmeshv1.ExecutorServiceListServersRequest{})
				if s := ls.GetServers()[0]; s.GetState() != toolmeshv1.ServerState_SERVER_STATE_UNHEALTHY || s.GetLastError() == "" {
					t.Errorf("while down: state %v last_error %q", s.GetState(), s.GetLastError())
				}
			}
			restart()
			deadline := time.Now().Add(8 * time.Second)
			for {
				r, err := call(t, h, "victim.add", map[string]any{"a": 1, "b": 2})
				if err == nil && text(r) == "3" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no recovery: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestSessionExpired: a legacy streamable HTTP server restarts and forgets
// its sessions (404); the next call re-initializes and succeeds.
func TestSessionExpired(t *testing.T) {
	hh := newHTTPHarness(t, streamableHandler(func() *testMCP { return newTestMCP("exp", 0) }, legacyOnly))
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"exp": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"},
	}})
	h.waitReady(t)
	if _, err := call(t, h, "exp.add", map[string]any{"a": 1, "b": 2}); err != nil {
		t.Fatal(err)
	}
	hh.kill()
	hh.restart()
	// Let the client's pool drop the connections the old server closed: a
	// call racing a restart on a pooled connection gets EOF (UNAVAILABLE),
	// and tools/call is not retried blindly because it is not idempotent.
	time.Sleep(100 * time.Millisecond)
	r, err := call(t, h, "exp.add", map[string]any{"a": 2, "b": 2})
	if err != nil || text(r) != "4" {
		t.Fatalf("call after the server forgot the session: %v %v", r, err)
	}
	// The legacy session used Mcp-Session-Id and MCP-Protocol-Version.
	var sawSession, sawGet bool
	for _, rq := range hh.requests() {
		if rq.session != "" && rq.protocol != "" {
			sawSession = true
		}
		if rq.method == "GET" {
			sawGet = true
		}
	}
	if !sawSession || !sawGet {
		t.Errorf("session header seen=%v, GET stream seen=%v", sawSession, sawGet)
	}
}

// TestDeleteOnClose: closing a legacy streamable HTTP session sends DELETE.
func TestDeleteOnClose(t *testing.T) {
	hh := newHTTPHarness(t, streamableHandler(func() *testMCP { return newTestMCP("del", 0) }, legacyOnly))
	cfg := Config{Servers: map[string]mcpconfig.Server{
		"del": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"},
	}}
	svc, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for ok, _ := svc.Ready(); !ok; ok, _ = svc.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var deleted bool
	for _, rq := range hh.requests() {
		if rq.method == "DELETE" && rq.session != "" {
			deleted = true
		}
	}
	if !deleted {
		t.Errorf("no DELETE with Mcp-Session-Id on close")
	}
	if ok, why := svc.Ready(); ok || !strings.Contains(why, "stopped") {
		t.Errorf("Ready after stop = %v %q", ok, why)
	}
}

// TestUnreachableServerDoesNotBlockOthers: one server down at start.
func TestUnreachableServerDoesNotBlockOthers(t *testing.T) {
	ts := newTestMCP("up", 0)
	hh := newHTTPHarness(t, sseHandler(fixed(ts)))
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"up":   {Transport: mcpconfig.TransportSSE, URL: "http://" + hh.addr + "/sse"},
		"down": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://127.0.0.1:1/mcp"},
		"gone": {Transport: mcpconfig.TransportStdio, Command: "/nonexistent/toolmesh-test-server"},
	}})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if r, err := call(t, h, "up.add", map[string]any{"a": 1, "b": 1}); err == nil && text(r) == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("up server not callable")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err := call(t, h, "down.add", map[string]any{"a": 1, "b": 1})
	wantCode(t, err, codes.Unavailable, `"down"`)
	_, err = call(t, h, "gone.add", nil)
	wantCode(t, err, codes.Unavailable, `"gone"`)
	ok, why := h.svc.Ready()
	if ok || !strings.Contains(why, "down:") || !strings.Contains(why, "gone:") || strings.Contains(why, "up:") {
		t.Errorf("Ready = %v %q", ok, why)
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"ok", Config{Servers: map[string]mcpconfig.Server{"a": {Transport: mcpconfig.TransportSSE, URL: "http://x/sse"}}}, ""},
		{"bad name", Config{Servers: map[string]mcpconfig.Server{"A.b": {Transport: mcpconfig.TransportSSE, URL: "http://x"}}}, "[a-z0-9_-]+"},
		{"no url", Config{Servers: map[string]mcpconfig.Server{"a": {Transport: mcpconfig.TransportStreamableHTTP}}}, "needs a url"},
		{"no command", Config{Servers: map[string]mcpconfig.Server{"a": {Transport: mcpconfig.TransportStdio}}}, "needs a command"},
		{"bad protocol", Config{Servers: map[string]mcpconfig.Server{"a": {Transport: mcpconfig.TransportSSE, URL: "http://x", ProtocolVersion: "1999-01-01"}}}, "unknown protocol version"},
		{"negative timeout", Config{CallTimeout: -1}, "call-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestEndpointSanitized(t *testing.T) {
	got := endpointOf(mcpconfig.Server{Transport: mcpconfig.TransportSSE, URL: "https://user:secret@example.com/sse?token=abc#x"})
	if got != "https://example.com/sse" {
		t.Errorf("got %q", got)
	}
	if got := endpointOf(mcpconfig.Server{Transport: mcpconfig.TransportStdio, Command: "/usr/bin/npx", Args: []string{"--token", "x"}}); got != "npx" {
		t.Errorf("got %q", got)
	}
}

// warnRecorder is a slog handler that keeps every record at WARN or above.
type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	w.msgs = append(w.msgs, msg)
	return nil
}
func (w *warnRecorder) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnRecorder) WithGroup(string) slog.Handler      { return w }

// A stop is not a lost connection: an operator who stops the executor sees
// no warning (an SSE event stream ends with the stop, and that used to be
// reported as "mcp connection lost; reconnecting").
func TestStopLogsNoWarning(t *testing.T) {
	for _, tc := range transportCases() {
		if tc.stdio {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestMCP("calc", 0)
			t.Cleanup(ts.stop)
			srv, _ := tc.setup(t, ts)
			for i := range 10 {
				rec := &warnRecorder{}
				svc, err := New(Config{Servers: map[string]mcpconfig.Server{"calc": srv}, ConnectTimeout: 5 * time.Second}, slog.New(rec), nil)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- svc.Run(ctx) }()
				deadline := time.Now().Add(10 * time.Second)
				for ok, why := svc.Ready(); !ok; ok, why = svc.Ready() {
					if time.Now().After(deadline) {
						cancel()
						t.Fatalf("not ready after 10s: %s", why)
					}
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
				select {
				case <-done:
				case <-time.After(15 * time.Second):
					t.Fatal("Run did not return within 15s of cancel")
				}
				rec.mu.Lock()
				msgs := rec.msgs
				rec.mu.Unlock()
				if len(msgs) > 0 {
					t.Fatalf("stop %d logged warnings: %q", i, msgs)
				}
			}
		})
	}
}

// slowFirst delays the first request the server gets by d: a server that takes a while to
// answer the first message of a handshake, as a freshly started executor meets it.
func slowFirst(next func() (http.Handler, func()), d time.Duration) func() (http.Handler, func()) {
	return func() (http.Handler, func()) {
		inner, closeFn := next()
		var first atomic.Bool
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if first.CompareAndSwap(false, true) {
				time.Sleep(d)
			}
			inner.ServeHTTP(w, r)
		}), closeFn
	}
}

// A call that reaches an executor before its first connection to the server is up waits for
// that connection instead of failing: callers (a round-robin client, a restarted replica in
// Kubernetes) send calls as soon as the executor's port answers. It used to fail at once with
// 503 `server "calc" is unavailable: connecting`. A server that cannot be reached still fails
// the call, within about the connect timeout.
func TestCallWaitsForFirstConnection(t *testing.T) {
	ts := newTestMCP("calc", 0)
	t.Cleanup(ts.stop)
	slow := newHTTPHarness(t, slowFirst(streamableHandler(fixed(ts)), 500*time.Millisecond))
	h := startExecutor(t, Config{ConnectTimeout: 2 * time.Second, Servers: map[string]mcpconfig.Server{
		"calc": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + slow.addr + "/mcp"},
		"gone": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://127.0.0.1:1/mcp"},
	}})
	r, err := call(t, h, "calc.add", map[string]any{"a": 1, "b": 2})
	if err != nil || text(r) != "3" {
		t.Fatalf("first call while connecting: %v %v; want 3", text(r), err)
	}
	start := time.Now()
	_, err = call(t, h, "gone.add", map[string]any{"a": 1, "b": 2})
	wantCode(t, err, codes.Unavailable, `server "gone" is unavailable`)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a call to an unreachable server took %s, want about the 2s connect timeout at most", took)
	}
}
