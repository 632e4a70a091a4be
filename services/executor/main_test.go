package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

const (
	envStdioServer = "EXECUTOR_TEST_STDIO_SERVER"
	envCancelFile  = "EXECUTOR_TEST_CANCEL_FILE"
	envFillers     = "EXECUTOR_TEST_FILLERS"
)

func TestMain(m *testing.M) {
	if os.Getenv(envSpanFile) != "" {
		// Re-executed as a traced stdio MCP server.
		os.Exit(serveTracedStdio())
	}
	if n := os.Getenv(envListingDouble); n != "" {
		// Re-executed as a stdio MCP server double that lists n tools.
		os.Exit(serveListingDouble(n))
	}
	if os.Getenv(envStdioServer) != "" {
		// Re-executed as a stdio MCP server.
		fillers, _ := strconv.Atoi(os.Getenv(envFillers))
		opts := []server.ServerOption{}
		if fillers > 0 {
			opts = append(opts, server.WithPaginationLimit(4))
		}
		ts := newTestMCP("stdio", fillers, opts...)
		ts.cancelFile = os.Getenv(envCancelFile)
		if os.Getenv(envBigTool) != "" {
			addBigTool(ts)
		}
		if os.Getenv(envStepsTool) != "" {
			addStepsTool(ts)
		}
		if err := server.ServeStdio(ts.srv); err != nil {
			fmt.Fprintln(os.Stderr, "stdio server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Shorter backoff keeps reconnect tests quick.
	backoffMin = 50 * time.Millisecond
	backoffMax = 500 * time.Millisecond
	goleak.VerifyTestMain(m,
		// Test-server side, not the executor: mcp-go's SSE server runs each
		// request handler with a context that outlives the session, so a
		// subscriptions/listen handler of a killed (or just-closed, when the
		// cancellation races the request) test server waits forever.
		goleak.IgnoreTopFunction("github.com/mark3labs/mcp-go/server.(*MCPServer).handleSubscriptionsListen"),
	)
}

// testMCP is a small MCP server for the tests.
type testMCP struct {
	srv        *server.MCPServer
	label      string
	cancelled  chan string // names of calls whose context the server saw end
	cancelFile string
	grown      atomic.Int32
	quit       chan struct{} // closed when the test server is killed
	quitOnce   sync.Once
}

func (ts *testMCP) stop() { ts.quitOnce.Do(func() { close(ts.quit) }) }

func newTestMCP(label string, fillers int, opts ...server.ServerOption) *testMCP {
	ts := &testMCP{label: label, cancelled: make(chan string, 16), quit: make(chan struct{})}
	opts = append([]server.ServerOption{server.WithToolCapabilities(true)}, opts...)
	ts.srv = server.NewMCPServer("test-"+label, "1.0.0", opts...)
	ts.srv.AddTool(mcp.NewTool("add",
		mcp.WithDescription("Add two numbers"),
		mcp.WithNumber("a", mcp.Required()),
		mcp.WithNumber("b", mcp.Required()),
	), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		a, _ := r.RequireFloat("a")
		b, _ := r.RequireFloat("b")
		return mcp.NewToolResultText(strconv.FormatFloat(a+b, 'g', -1, 64)), nil
	})
	ts.srv.AddTool(mcp.NewTool("whoami", mcp.WithDescription("Says which server answered")),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(ts.label), nil
		})
	ts.srv.AddTool(mcp.NewTool("fail", mcp.WithDescription("Always fails")),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("boom from " + ts.label), nil
		})
	ts.srv.AddTool(mcp.NewTool("pid", mcp.WithDescription("Process id")),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strconv.Itoa(os.Getpid())), nil
		})
	ts.srv.AddTool(mcp.NewTool("slow",
		mcp.WithDescription("Sleeps ms milliseconds unless cancelled"),
		mcp.WithNumber("ms", mcp.Required()),
	), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ms, _ := r.RequireFloat("ms")
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return mcp.NewToolResultText("slept"), nil
		case <-ts.quit:
			return nil, errors.New("server killed")
		case <-ctx.Done():
			select {
			case ts.cancelled <- "slow":
			default:
			}
			if ts.cancelFile != "" {
				_ = os.WriteFile(ts.cancelFile, []byte("cancelled"), 0o600)
			}
			return nil, ctx.Err()
		}
	})
	ts.srv.AddTool(mcp.NewTool("grow", mcp.WithDescription("Adds a tool named extra_N")),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n := ts.grown.Add(1)
			name := fmt.Sprintf("extra_%d", n)
			go ts.srv.AddTool(mcp.NewTool(name, mcp.WithDescription("grown")),
				func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return mcp.NewToolResultText(name), nil
				})
			return mcp.NewToolResultText(name), nil
		})
	for i := range fillers {
		ts.srv.AddTool(mcp.NewTool(fmt.Sprintf("filler_%02d", i), mcp.WithDescription("filler")),
			func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			})
	}
	return ts
}

// httpHarness serves an MCP handler on a fixed loopback address and can kill
// it (closing every connection) and bring it back on the same address.
type httpHarness struct {
	t       testing.TB
	addr    string
	mu      sync.Mutex
	hs      *http.Server
	close   func()
	reqs    []recordedRequest
	handler func() (http.Handler, func())
}

type recordedRequest struct {
	method, session, protocol string
}

func newHTTPHarness(t testing.TB, handler func() (http.Handler, func())) *httpHarness {
	t.Helper()
	h := &httpHarness{t: t, handler: handler}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	h.serve(ln)
	t.Cleanup(h.kill)
	return h
}

func (h *httpHarness) serve(ln net.Listener) {
	handler, closeFn := h.handler()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.reqs = append(h.reqs, recordedRequest{r.Method, r.Header.Get("Mcp-Session-Id"), r.Header.Get("Mcp-Protocol-Version")})
		h.mu.Unlock()
		handler.ServeHTTP(w, r)
	})}
	h.mu.Lock()
	h.hs = hs
	h.close = closeFn
	h.mu.Unlock()
	go func() { _ = hs.Serve(ln) }()
}

func (h *httpHarness) kill() {
	h.mu.Lock()
	hs, closeFn := h.hs, h.close
	h.hs, h.close = nil, nil
	h.mu.Unlock()
	if hs == nil {
		return
	}
	_ = hs.Close()
	if closeFn != nil {
		closeFn()
	}
}

func (h *httpHarness) restart() {
	h.t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", h.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		h.t.Fatalf("relisten on %s: %v", h.addr, err)
	}
	h.serve(ln)
}

func (h *httpHarness) requests() []recordedRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]recordedRequest(nil), h.reqs...)
}

// sseHandler serves ts over SSE at /sse.
func sseHandler(ts func() *testMCP) func() (http.Handler, func()) {
	return func() (http.Handler, func()) {
		m := ts()
		s := server.NewSSEServer(m.srv, server.WithKeepAlive(false))
		return s, func() {
			m.stop()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = s.Shutdown(ctx)
		}
	}
}

// streamableHandler serves ts over streamable HTTP at /mcp; versions limits
// what server/discover advertises (legacy-only servers).
func streamableHandler(ts func() *testMCP, opts ...server.StreamableHTTPOption) func() (http.Handler, func()) {
	return func() (http.Handler, func()) {
		m := ts()
		s := server.NewStreamableHTTPServer(m.srv, opts...)
		return s, func() {
			m.stop()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = s.Shutdown(ctx)
		}
	}
}

var legacyOnly = server.WithStreamableHTTPProtocolVersions(mcp.ProtocolVersion20251125, "2025-06-18")

// fixed returns a constructor that always serves the same testMCP.
func fixed(ts *testMCP) func() *testMCP { return func() *testMCP { return ts } }

func stdioServer(t *testing.T, fillers int) (mcpconfig.Server, string) {
	t.Helper()
	cancelFile := t.TempDir() + "/cancelled"
	return mcpconfig.Server{
		Transport: mcpconfig.TransportStdio,
		Command:   os.Args[0],
		Args:      []string{"-test.run=^$"},
		Env: map[string]string{
			envStdioServer: "1",
			envCancelFile:  cancelFile,
			envFillers:     strconv.Itoa(fillers),
		},
	}, cancelFile
}

// executorHarness runs a Service with a gRPC server on bufconn.
type executorHarness struct {
	svc    *Service
	client toolmeshv1.ExecutorServiceClient
}

func startExecutor(t testing.TB, cfg Config) *executorHarness {
	t.Helper()
	return startTracedExecutor(t, cfg, nil)
}

// startTracedExecutor is startExecutor with telemetry, on the executor and on
// its gRPC server as the app runs them.
func startTracedExecutor(t testing.TB, cfg Config, tel *telemetry.Service) *executorHarness {
	t.Helper()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.ListChangedDebounce == 0 {
		cfg.ListChangedDebounce = 20 * time.Millisecond
	}
	logDone := &atomic.Bool{}
	level := slog.LevelDebug
	if _, ok := t.(*testing.B); ok {
		level = slog.LevelWarn
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t, logDone}, &slog.HandlerOptions{Level: level}))
	svc, err := New(cfg, logger, tel)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- svc.Run(ctx) }()

	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(tel.GRPCServerOptions()...)
	svc.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		cancel()
		select {
		case err := <-runDone:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Run did not return within 15s of cancel")
		}
		gs.Stop()
		logDone.Store(true)
	})
	return &executorHarness{svc: svc, client: toolmeshv1.NewExecutorServiceClient(cc)}
}

// waitReady waits until every server is READY.
func (h *executorHarness) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, why := h.svc.Ready()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 10s: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type testWriter struct {
	t    testing.TB
	done *atomic.Bool
}

func (w testWriter) Write(b []byte) (int, error) {
	if !w.done.Load() {
		w.t.Logf("%s", b)
	}
	return len(b), nil
}
