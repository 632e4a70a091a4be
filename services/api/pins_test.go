package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/policy"
)

// pinExecutor is a test double of the executor with one definition waiting for approval.
type pinExecutor struct {
	executorBase
	mu        sync.Mutex
	approvals []*toolmeshv1.ExecutorServiceApproveToolRequest
}

func (e *pinExecutor) ListPendingTools(_ context.Context, req *toolmeshv1.ExecutorServiceListPendingToolsRequest) (*toolmeshv1.ExecutorServiceListPendingToolsResponse, error) {
	if req.GetServer() != "" && req.GetServer() != "calc" {
		return nil, status.Errorf(codes.NotFound, "unknown server %q", req.GetServer())
	}
	return &toolmeshv1.ExecutorServiceListPendingToolsResponse{Tools: []*toolmeshv1.PendingTool{{
		Tool:        &toolmeshv1.Tool{Id: "calc.add", Server: "calc", Name: "add", Hash: "h2", Pin: toolmeshv1.PinState_PIN_STATE_CHANGED},
		Pinned:      &toolmeshv1.Tool{Id: "calc.add", Server: "calc", Name: "add", Hash: "h1"},
		Quarantined: true,
		Diff:        "--- pinned calc.add h1\n+++ listed calc.add h2\n-description: Add.\n+description: Add!\n",
	}}}, nil
}

func (e *pinExecutor) ApproveTool(_ context.Context, req *toolmeshv1.ExecutorServiceApproveToolRequest) (*toolmeshv1.ExecutorServiceApproveToolResponse, error) {
	e.mu.Lock()
	e.approvals = append(e.approvals, req)
	e.mu.Unlock()
	switch {
	case req.GetToolId() != "calc.add":
		return nil, status.Errorf(codes.NotFound, "tool %q has no definition waiting for approval", req.GetToolId())
	case req.GetHash() != "" && req.GetHash() != "h2":
		return nil, status.Errorf(codes.Aborted, "tool %q lists definition h2 now", req.GetToolId())
	}
	return &toolmeshv1.ExecutorServiceApproveToolResponse{Tool: &toolmeshv1.Tool{Id: "calc.add", Hash: "h2", Pin: toolmeshv1.PinState_PIN_STATE_PINNED}}, nil
}

// restAs runs the api with cfg against exec, its gRPC server with the token check as the app
// installs it, and returns a request function for its REST port.
func restAs(t *testing.T, cfg Config, exec toolmeshv1.ExecutorServiceServer) func(token, method, path, body string) (int, string) {
	t.Helper()
	cfg.ExecutorAddr = startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) })
	svc, err := New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(svc.ServerOptions()...) // the token check, as the app installs it
	svc.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	h, closeGW, err := svc.Gateway(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeGW)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return func(token, method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

// TestToolTrustREST: GET /v1/tools:pending and POST /v1/tools/{server}/{name}:approve are an
// admin's (a token whose scope calls and lists every tool); the approval names who approved,
// and a stale one is a conflict.
func TestToolTrustREST(t *testing.T) {
	const tokenAdmin, tokenCalc = "admin-token-0123456789abcdef", "calc-token-0123456789abcdef"
	cfg := testConfig("", "")
	cfg.Tokens = "admin:" + tokenAdmin + ",calc:" + tokenCalc
	cfg.Policy = policy.Config{Tokens: map[string]policy.Scope{
		"admin": {Call: []string{"*"}, Query: true},
		"calc":  {Call: []string{"calc.*"}, Query: true},
	}}
	exec := &pinExecutor{}
	do := restAs(t, cfg, exec)
	cases := []struct {
		name, token, method, path, body string
		code                            int
		want                            []string
	}{
		{"pending needs a token", "", "GET", "/v1/tools:pending", "", 401, nil},
		{"pending is an admin's", tokenCalc, "GET", "/v1/tools:pending", "", 403, []string{"rule: admin", "calls and lists every tool"}},
		{"an admin reads the pending tools", tokenAdmin, "GET", "/v1/tools:pending", "", 200,
			[]string{`"id":"calc.add"`, `"quarantined":true`, `"diff":"--- pinned calc.add h1\n+++ listed calc.add h2\n-description: Add.\n+description: Add!\n"`, `"pin":"PIN_STATE_CHANGED"`}},
		{"of one server", tokenAdmin, "GET", "/v1/tools:pending?server=calc", "", 200, []string{`"calc.add"`}},
		{"a bad server name", tokenAdmin, "GET", "/v1/tools:pending?server=No!", "", 400, []string{"server"}},
		{"approval is an admin's", tokenCalc, "POST", "/v1/tools/calc/add:approve", `{"hash":"h2"}`, 403, []string{"rule: admin"}},
		{"a stale approval is a conflict", tokenAdmin, "POST", "/v1/tools/calc/add:approve", `{"hash":"h1"}`, 409, []string{"h2"}},
		{"nothing pending", tokenAdmin, "POST", "/v1/tools/calc/sub:approve", `{}`, 404, nil},
		{"a bad server", tokenAdmin, "POST", "/v1/tools/No!/add:approve", `{}`, 400, []string{"server"}},
		{"an admin approves", tokenAdmin, "POST", "/v1/tools/calc/add:approve", `{"hash":"h2"}`, 200, []string{`"pin":"PIN_STATE_PINNED"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(c.token, c.method, c.path, c.body)
			if code != c.code {
				t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.code)
			}
			compact := body
			var v any
			if json.Unmarshal([]byte(body), &v) == nil {
				b, _ := json.Marshal(v)
				compact = string(b)
			}
			for _, w := range c.want {
				if !strings.Contains(compact, w) && !strings.Contains(body, w) {
					t.Errorf("body %s lacks %s", body, w)
				}
			}
		})
	}
	exec.mu.Lock()
	defer exec.mu.Unlock()
	var by []string
	for _, a := range exec.approvals {
		by = append(by, a.GetToolId()+"@"+a.GetHash()+" by "+a.GetApprovedBy())
	}
	if want := "calc.add@h1 by token admin,calc.sub@ by token admin,calc.add@h2 by token admin"; strings.Join(by, ",") != want {
		t.Errorf("the executor got approvals %v, want %s (none of the refused ones)", by, want)
	}
}

// TestToolTrustWithoutTokens: without tokens or scopes every caller is an admin, as every
// caller may already call every tool.
func TestToolTrustWithoutTokens(t *testing.T) {
	exec := &pinExecutor{}
	do := restAs(t, testConfig("", ""), exec)
	if code, body := do("", "POST", "/v1/tools/calc/add:approve", `{}`); code != 200 {
		t.Fatalf("approve without tokens: %d %s", code, body)
	}
	exec.mu.Lock()
	defer exec.mu.Unlock()
	if len(exec.approvals) != 1 || exec.approvals[0].GetApprovedBy() != "a caller without a token" {
		t.Errorf("approvals %v", exec.approvals)
	}
}
