package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/policy"
)

// statusExecutor is a test double of the executor that answers ListServers with canned
// servers and configuration state.
type statusExecutor struct {
	executorBase
	servers []*toolmeshv1.Server
	config  *toolmeshv1.ConfigStatus
}

func (e *statusExecutor) ListServers(context.Context, *toolmeshv1.ExecutorServiceListServersRequest) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	return &toolmeshv1.ExecutorServiceListServersResponse{Servers: withRules(e.servers), Config: e.config}, nil
}

// readyBody is /readyz's body as a client reads it.
type readyBody struct {
	Status  string `json:"status"`
	Catalog string `json:"catalog"`
	Servers struct {
		Ready        *int `json:"ready"`
		NotConnected []struct {
			Name, State, Error string
		} `json:"not_connected"`
	} `json:"servers"`
	Config *struct {
		Generation      uint64 `json:"generation"`
		LastReloadError string `json:"last_reload_error"`
	} `json:"config"`
}

func (b readyBody) notConnected() []string {
	var out []string
	for _, s := range b.Servers.NotConnected {
		out = append(out, s.Name+" "+s.State+" "+s.Error)
	}
	return out
}

// getReadyz asks h for /readyz with token (none when "") and returns the status, the decoded
// body and the raw one.
func getReadyz(t *testing.T, h http.Handler, token string) (int, readyBody, string) {
	t.Helper()
	req := httptest.NewRequest("GET", "http://127.0.0.1:7700/readyz", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var b readyBody
	if rec.Code != http.StatusUnauthorized {
		if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
			t.Fatalf("/readyz body %s: %v", rec.Body, err)
		}
	}
	return rec.Code, b, rec.Body.String()
}

func mcpServer(name string, st toolmeshv1.ServerState, lastErr string) *toolmeshv1.Server {
	return &toolmeshv1.Server{Name: name, State: st, LastError: lastErr}
}

// TestReadyzServersApart: /readyz is about whether the api can serve. An MCP server that is
// down, or every one of them, is reported in the body without making the api unready (one
// broken server would otherwise take every api replica out of its Service); a server still
// making its first connection holds readiness, as the catalog is not filled yet.
func TestReadyzServersApart(t *testing.T) {
	const (
		ready      = toolmeshv1.ServerState_SERVER_STATE_READY
		degraded   = toolmeshv1.ServerState_SERVER_STATE_DEGRADED
		unhealthy  = toolmeshv1.ServerState_SERVER_STATE_UNHEALTHY
		connecting = toolmeshv1.ServerState_SERVER_STATE_CONNECTING
	)
	cases := []struct {
		name         string
		servers      []*toolmeshv1.Server
		code         int
		ready        int
		notConnected []string
		catalog      string // the body's catalog says this ("" for no catalog key)
	}{
		{"every server connected", []*toolmeshv1.Server{mcpServer("calc", ready, ""), mcpServer("notes", degraded, "")}, 200, 2, nil, ""},
		{"one server down", []*toolmeshv1.Server{mcpServer("calc", ready, ""), mcpServer("weather", unhealthy, "connection refused")},
			200, 1, []string{"weather SERVER_STATE_UNHEALTHY connection refused"}, ""},
		// Every replica sees the same servers: out of the Service they would answer nothing,
		// in it they say which server is down.
		{"every server down", []*toolmeshv1.Server{mcpServer("calc", unhealthy, "eof"), mcpServer("weather", unhealthy, "connection refused")},
			200, 0, []string{"calc SERVER_STATE_UNHEALTHY eof", "weather SERVER_STATE_UNHEALTHY connection refused"}, ""},
		{"no servers", nil, 200, 0, nil, ""},
		{"a first connection under way", []*toolmeshv1.Server{mcpServer("calc", ready, ""), mcpServer("weather", connecting, "")},
			503, 1, []string{"weather SERVER_STATE_CONNECTING "}, "first connection"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exec := &statusExecutor{servers: tc.servers}
			h := gatewayHandler(t, testConfig(startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) }), ""))
			code, b, raw := getReadyz(t, h, "")
			wantStatus := map[int]string{200: "ready", 503: "not ready"}[tc.code]
			if code != tc.code || b.Status != wantStatus || b.Servers.Ready == nil || *b.Servers.Ready != tc.ready ||
				!slices.Equal(b.notConnected(), tc.notConnected) || !strings.Contains(b.Catalog, tc.catalog) || (tc.catalog == "" && b.Catalog != "") {
				t.Errorf("/readyz = %d %s\nwant %d, status %q, %d servers ready, not connected %q, catalog %q",
					code, raw, tc.code, wantStatus, tc.ready, tc.notConnected, tc.catalog)
			}
		})
	}
}

// TestReadyzByScope: /readyz names to each token only the servers it may list (as
// /v1/servers does), with their errors; a token that may not list every tool reads that a
// reload was refused, not the refusal's text, which names servers of the whole config. A
// request without a token is refused.
func TestReadyzByScope(t *testing.T) {
	const tokenCalc, tokenOps, tokenNone = "calc-token-0123456789abcdef", "ops-token-0123456789abcdef", "none-token-0123456789abcdef"
	exec := &statusExecutor{
		servers: []*toolmeshv1.Server{
			mcpServer("calc", toolmeshv1.ServerState_SERVER_STATE_UNHEALTHY, "dial calc.internal: connection refused"),
			mcpServer("hr", toolmeshv1.ServerState_SERVER_STATE_UNHEALTHY, "dial hr-payroll.internal: connection refused"),
			mcpServer("notes", toolmeshv1.ServerState_SERVER_STATE_READY, ""),
		},
		config: &toolmeshv1.ConfigStatus{Generation: 3, LastReloadError: "mcpServers.hr-archive: neither url nor command"},
	}
	cfg := testConfig(startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) }), "")
	cfg.Tokens = "calc:" + tokenCalc + ",ops:" + tokenOps + ",none:" + tokenNone
	cfg.Policy = policy.Config{Tokens: map[string]policy.Scope{
		"calc": {Call: []string{"calc"}},
		"ops":  {Call: []string{"*"}},
	}}
	h := gatewayHandler(t, cfg)
	cases := []struct {
		name, token  string
		code, ready  int
		notConnected []string
		reloadError  string // config.last_reload_error contains this
		notInBody    []string
	}{
		{name: "a token that may list everything sees every server", token: tokenOps, code: 200, ready: 1,
			notConnected: []string{"calc SERVER_STATE_UNHEALTHY dial calc.internal: connection refused", "hr SERVER_STATE_UNHEALTHY dial hr-payroll.internal: connection refused"},
			reloadError:  "mcpServers.hr-archive: neither url nor command; the configuration in use is kept"},
		{name: "a narrow token sees its servers only", token: tokenCalc, code: 200, ready: 0,
			notConnected: []string{"calc SERVER_STATE_UNHEALTHY dial calc.internal: connection refused"},
			reloadError:  "the last reload was refused", notInBody: []string{"hr", "notes"}},
		{name: "a token without a scope sees none", token: tokenNone, code: 200, ready: 0,
			reloadError: "the last reload was refused", notInBody: []string{"calc", "hr", "notes"}},
		{name: "no token, no answer", code: 401, notInBody: []string{"calc", "hr", "notes"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, b, raw := getReadyz(t, h, tc.token)
			if code != tc.code {
				t.Fatalf("/readyz = %d %s; want %d", code, raw, tc.code)
			}
			for _, w := range tc.notInBody {
				if strings.Contains(raw, w) {
					t.Errorf("/readyz = %s; want no %q", raw, w)
				}
			}
			if code != 200 {
				return
			}
			if b.Servers.Ready == nil || *b.Servers.Ready != tc.ready || !slices.Equal(b.notConnected(), tc.notConnected) {
				t.Errorf("/readyz = %s; want %d ready and not connected %q", raw, tc.ready, tc.notConnected)
			}
			if b.Config == nil || b.Config.Generation != 3 || !strings.Contains(b.Config.LastReloadError, tc.reloadError) {
				t.Errorf("/readyz config = %+v; want generation 3 and %q", b.Config, tc.reloadError)
			}
		})
	}
}
