package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// executorBase is what this package's executor doubles embed: the executor's service with every
// method unimplemented but ListServers, which answers as an executor without servers does. The
// api asks it for the servers' rules before it decides anything about a tool.
type executorBase struct {
	toolmeshv1.UnimplementedExecutorServiceServer
}

func (executorBase) ListServers(context.Context, *toolmeshv1.ExecutorServiceListServersRequest) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	return &toolmeshv1.ExecutorServiceListServersResponse{}, nil
}

// withRules is servers as the executor lists them: each with its rules, none when it has none.
func withRules(servers []*toolmeshv1.Server) []*toolmeshv1.Server {
	out := make([]*toolmeshv1.Server, len(servers))
	for i, s := range servers {
		out[i] = proto.Clone(s).(*toolmeshv1.Server)
		if out[i].Rules == nil {
			out[i].Rules = &toolmeshv1.ServerRules{}
		}
	}
	return out
}

// fakeExecutor is a test double of the executor's gRPC service with canned answers.
type fakeExecutor struct {
	executorBase
	servers []*toolmeshv1.Server
}

func (f *fakeExecutor) ListServers(context.Context, *toolmeshv1.ExecutorServiceListServersRequest) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	return &toolmeshv1.ExecutorServiceListServersResponse{Servers: withRules(f.servers)}, nil
}

func (f *fakeExecutor) CallTool(_ context.Context, req *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	if req.GetToolId() != "calc.add" {
		return nil, errreason.Error(codes.NotFound, errreason.UnknownTool, fmt.Sprintf("unknown tool %q", req.GetToolId()))
	}
	return &toolmeshv1.ExecutorServiceCallToolResponse{Content: []*toolmeshv1.Content{{Type: "text", Text: proto.String("5")}}}, nil
}

// startGRPC serves register's services on a loopback port until the test ends.
func startGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// newGateway runs the api against the executor at execAddr and returns its REST server.
func newGateway(t *testing.T, execAddr string) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(gatewayHandler(t, testConfig(execAddr, "")))
	t.Cleanup(ts.Close)
	return ts
}

// testConfig is the api's config for tests against the executor (and retriever, if set) at
// these addresses.
func testConfig(execAddr, retrieverAddr string) Config {
	var cfg Config
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.ExecutorAddr, cfg.RetrieverAddr = "127.0.0.1:0", "127.0.0.1:0", execAddr, retrieverAddr
	cfg.CallTimeout, cfg.RPCTimeout, cfg.MaxBodyBytes, cfg.BodyTimeout = 5*time.Second, 2*time.Second, 4096, 5*time.Second
	return cfg
}

// gatewayHandler runs the api with cfg until the test ends and returns its REST handler.
func gatewayHandler(t *testing.T, cfg Config) http.Handler {
	t.Helper()
	return tracedGatewayHandler(t, cfg, nil)
}

// tracedGatewayHandler is gatewayHandler with telemetry.
func tracedGatewayHandler(t *testing.T, cfg Config, tel *telemetry.Service) http.Handler {
	t.Helper()
	svc, err := New(cfg, slog.New(slog.DiscardHandler), tel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	apiAddr := startGRPC(t, func(g *grpc.Server) { svc.Register(g) })
	h, closeGW, err := svc.Gateway(context.Background(), apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeGW)
	return h
}

func TestGatewayErrors(t *testing.T) {
	exec := &fakeExecutor{servers: []*toolmeshv1.Server{
		{Name: "calc", State: toolmeshv1.ServerState_SERVER_STATE_READY},
		{Name: "weather", State: toolmeshv1.ServerState_SERVER_STATE_UNHEALTHY, LastError: "connection refused"},
	}}
	ts := newGateway(t, startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) }))

	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantInBody               string
	}{
		{"call ok", "POST", "/v1/tools/calc/add:call", `{"arguments":{"a":2,"b":3}}`, 200, `"text":"5"`},
		{"call unknown tool", "POST", "/v1/tools/calc/nope:call", `{}`, 404, `unknown tool \"calc.nope\"`},
		{"bad server name", "POST", "/v1/tools/Calc!/add:call", `{}`, 400, "server: must match"},
		{"arguments not an object", "POST", "/v1/tools/calc/add:call", `{"arguments":[1]}`, 400, "arguments"},
		{"body not JSON", "POST", "/v1/tools/calc/add:call", `{`, 400, ""},
		{"body too large", "POST", "/v1/tools/calc/add:call", `{"arguments":{"a":"` + strings.Repeat("x", 5000) + `"}}`, 413, "body"},
		{"search without q", "GET", "/v1/tools:search", "", 400, "q: is required"},
		{"search k too big", "GET", "/v1/tools:search?q=add&k=51", "", 400, "k: must be between 1 and 50"},
		{"search without retriever", "GET", "/v1/tools:search?q=add", "", 503, "retriever"},
		{"unknown path", "GET", "/v1/nothing", "", 404, "no route for GET /v1/nothing"},
		{"healthz", "GET", "/healthz", "", 200, `"ok"`},
		{"readyz names the unhealthy server and stays ready", "GET", "/readyz", "", 200, `"not_connected":[{"name":"weather"`},
		{"openapi", "GET", "/openapi.json", "", 200, `"/v1/tools/{server}/{name}:call"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status = %d, want %d; body %s", resp.StatusCode, tc.wantStatus, b)
			}
			if !strings.Contains(string(b), tc.wantInBody) {
				t.Errorf("body %s does not contain %q", b, tc.wantInBody)
			}
			if resp.StatusCode >= 400 && tc.path != "/readyz" {
				var e struct {
					Code    *int    `json:"code"`
					Message *string `json:"message"`
				}
				if err := json.Unmarshal(b, &e); err != nil || e.Code == nil || e.Message == nil {
					t.Errorf("error body %s is not {code, message, details}", b)
				}
			}
		})
	}
}

// silentAddr is a loopback address nothing listens on (a moment ago something did).
func silentAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func TestGatewayExecutorDown(t *testing.T) {
	addr := silentAddr(t)
	ts := newGateway(t, addr)
	resp, err := http.Post(ts.URL+"/v1/tools/calc/add:call", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), addr) {
		t.Errorf("got %d %s, want 503 naming %s", resp.StatusCode, b, addr)
	}
}

// fakeRetriever is a test double of the retriever's gRPC service: GetIndexStatus answers a canned status.
type fakeRetriever struct {
	toolmeshv1.UnimplementedRetrieverServiceServer
	status *toolmeshv1.GetIndexStatusResponse
}

func (f *fakeRetriever) GetIndexStatus(context.Context, *toolmeshv1.GetIndexStatusRequest) (*toolmeshv1.GetIndexStatusResponse, error) {
	return f.status, nil
}

// TestReadyzIndexLag: /readyz reports an index behind the executor with the retriever's last
// sync error when there is one, so a sync that keeps failing does not read as one under way.
func TestReadyzIndexLag(t *testing.T) {
	exec := &fakeExecutor{servers: []*toolmeshv1.Server{
		{Name: "calc", State: toolmeshv1.ServerState_SERVER_STATE_READY, ToolCount: 5},
	}}
	execAddr := startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) })
	cases := []struct {
		name    string
		status  *toolmeshv1.GetIndexStatusResponse
		code    int
		want    string
		notWant string
	}{
		{"in step", &toolmeshv1.GetIndexStatusResponse{Ready: true, ToolCount: 5}, 200, `"indexed_tools":5`, "catching up"},
		{"catching up", &toolmeshv1.GetIndexStatusResponse{Ready: true, ToolCount: 2}, 503, "index catching up: 2 of 5 tools indexed", "last sync attempt"},
		{"catching up after a failed sync", &toolmeshv1.GetIndexStatusResponse{Ready: true, ToolCount: 0, LastError: "embed tools: connection refused"},
			503, "index catching up: 0 of 5 tools indexed; last sync attempt: embed tools: connection refused", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			retrAddr := startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterRetrieverServiceServer(g, &fakeRetriever{status: tc.status}) })
			h := gatewayHandler(t, testConfig(execAddr, retrAddr))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:7700/readyz", nil))
			b := rec.Body.String()
			if rec.Code != tc.code || !strings.Contains(b, tc.want) || (tc.notWant != "" && strings.Contains(b, tc.notWant)) {
				t.Errorf("/readyz = %d %s; want %d with %q", rec.Code, b, tc.code, tc.want)
			}
		})
	}
}

// TestMCPBadBody: the MCP endpoint answers a body that is not JSON, or not an object, as
// JSON-RPC says (a parse error), not with the REST error body the /v1/ routes give.
func TestMCPBadBody(t *testing.T) {
	ts := newGateway(t, startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, &fakeExecutor{}) }))
	for _, body := range []string{`{`, `[1]`} {
		req, _ := http.NewRequest("POST", ts.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			JSONRPC string `json:"jsonrpc"`
			Error   struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || e.JSONRPC != "2.0" || e.Error.Code != -32700 {
			t.Errorf("POST /mcp %s: %d %s, want a JSON-RPC parse error (-32700)", body, resp.StatusCode, b)
		}
	}
}
