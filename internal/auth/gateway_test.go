package auth

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// startREST wires a REST front the way the api does: grpc-gateway over loopback to a guarded
// gRPC server, plain handlers beside it, Guard.HTTP skipping /healthz and checking but not
// counting the gateway routes.
func startREST(t *testing.T, g *Guard, logger *slog.Logger) *httptest.Server {
	t.Helper()
	conn := startGRPC(t, g, logger)
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true},
		}),
		runtime.WithOutgoingHeaderMatcher(OutgoingHeaderMatcher),
		runtime.WithErrorHandler(GatewayErrorHandler(nil)),
		runtime.WithMetadata(g.ForwardedMetadata),
	)
	if err := toolmeshv1.RegisterToolServiceHandlerClient(context.Background(), gw, toolmeshv1.NewToolServiceClient(conn)); err != nil {
		t.Fatal(err)
	}
	if err := toolmeshv1.RegisterAgentServiceHandlerClient(context.Background(), gw, toolmeshv1.NewAgentServiceClient(conn)); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.Handle("GET /readyz", whoami)
	mux.Handle("/", gw)
	// A test stands for a client elsewhere with an X-Test-Remote header.
	h := g.HTTP(mux, Paths("/healthz"), Paths("/v1/"))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if remote := r.Header.Get("X-Test-Remote"); remote != "" {
			r.RemoteAddr = remote
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

type restResult struct {
	status int
	header http.Header
	body   string
}

func restGet(t *testing.T, url, token string) restResult {
	t.Helper()
	return restDo(t, "GET", url, token)
}

// restDo sends a request, with a small query body for POST.
func restDo(t *testing.T, method, url, token string) restResult {
	t.Helper()
	var reqBody io.Reader
	if method == "POST" {
		reqBody = strings.NewReader(`{"query":"q"}`)
	}
	req, err := http.NewRequest(method, url, reqBody)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return restResult{resp.StatusCode, resp.Header, string(body)}
}

func TestGateway(t *testing.T) {
	g, _ := newGuard(t, Config{}, "")
	ts := startREST(t, g, slogDiscard())
	const stream = "POST /v1/query:stream"
	tests := []struct {
		name       string
		path       string // "METHOD /path" or a GET path
		token      string
		wantStatus int
		wantBody   string // substring
	}{
		{name: "stream route, no token", path: stream, wantStatus: 401, wantBody: `"code":16`},
		{name: "stream route, good token", path: stream, token: tokenCI, wantStatus: 200, wantBody: `"answer_delta":"ci"`},
		{name: "gateway route, no token", path: "/v1/tools", wantStatus: 401, wantBody: `"code":16`},
		{name: "gateway route, unknown token", path: "/v1/tools", token: "not-a-configured-token-123", wantStatus: 401, wantBody: "unknown token"},
		{name: "gateway route, good token", path: "/v1/tools", token: tokenOps, wantStatus: 200, wantBody: `"name":"ops"`},
		{name: "plain handler, no token", path: "/readyz", wantStatus: 401, wantBody: "missing Authorization header"},
		{name: "plain handler, good token", path: "/readyz", token: tokenCI, wantStatus: 200, wantBody: "name=ci"},
		{name: "healthz", path: "/healthz", wantStatus: 200, wantBody: "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path, ok := strings.Cut(tt.path, " ")
			if !ok {
				method, path = "GET", tt.path
			}
			got := restDo(t, method, ts.URL+path, tt.token)
			if got.status != tt.wantStatus || !strings.Contains(got.body, tt.wantBody) {
				t.Fatalf("got %d %s, want %d and a body containing %s", got.status, got.body, tt.wantStatus, tt.wantBody)
			}
			if got.status == 401 {
				if c := got.header.Values("WWW-Authenticate"); len(c) != 1 || c[0] != "Bearer" {
					t.Errorf("WWW-Authenticate = %q, want [Bearer]", c)
				}
				if tt.path == stream {
					return // a stream's error is {"error":{...}}, grpc-gateway's framing
				}
				var body errorBody
				if err := json.Unmarshal([]byte(got.body), &body); err != nil || body.Code != 16 || body.Details == nil {
					t.Errorf("body %s (%v), want {code:16, message, details:[]}", got.body, err)
				}
			}
		})
	}
}

// TestGatewayRateLimit checks that a REST request through the gateway counts once against its
// token and that the limit comes back as 429 with Retry-After.
func TestGatewayRateLimit(t *testing.T) {
	g, _ := newGuard(t, Config{RateLimit: 0.01, RateBurst: 2}, "")
	ts := startREST(t, g, slogDiscard())
	for i := range 2 {
		if got := restGet(t, ts.URL+"/v1/tools", tokenCI); got.status != 200 {
			t.Fatalf("request %d within a burst of 2: %d %s (counted twice?)", i+1, got.status, got.body)
		}
	}
	got := restGet(t, ts.URL+"/v1/tools", tokenCI)
	if got.status != http.StatusTooManyRequests || !strings.Contains(got.body, `"code":8`) {
		t.Fatalf("third request: %d %s, want 429 with code 8", got.status, got.body)
	}
	if secs, err := strconv.Atoi(got.header.Get("Retry-After")); err != nil || secs < 90 || secs > 100 {
		t.Errorf("Retry-After = %q, want whole seconds near 100", got.header.Get("Retry-After"))
	}
	if got.header.Get("Grpc-Metadata-Retry-After") != "" {
		t.Error("retry-after also sent as Grpc-Metadata-Retry-After")
	}
	// One bucket per token across routes, streaming ones included.
	got = restDo(t, "POST", ts.URL+"/v1/query:stream", tokenCI)
	if got.status != http.StatusTooManyRequests || got.header.Get("Retry-After") == "" {
		t.Errorf("stream route after the limit: %d %v %s, want 429 with Retry-After", got.status, got.header, got.body)
	}
	if got := restGet(t, ts.URL+"/v1/tools", tokenOps); got.status != 200 {
		t.Errorf("other token: %d %s, want 200", got.status, got.body)
	}
}

// TestLogsNeverContainTokens drives every path (admitted, refused, rate limited; HTTP, gRPC
// through the gateway) with logs at debug, and checks no token reaches the log.
func TestLogsNeverContainTokens(t *testing.T) {
	const unknown = "not-a-configured-token-123"
	g, logs := newGuard(t, Config{RateLimit: 0.01, RateBurst: 1}, "env:"+tokenEnv)
	// The server's own call logs go to the same buffer.
	ts := startREST(t, g, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, route := range []string{"GET /v1/tools", "POST /v1/query:stream", "GET /readyz"} {
		method, path, _ := strings.Cut(route, " ")
		for _, token := range []string{"", unknown, tokenCI, tokenCI, tokenOps, tokenEnv} {
			restDo(t, method, ts.URL+path, token)
		}
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		req.Header.Set("Authorization", "Basic "+tokenOps)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	out := logs.String()
	for _, want := range []string{"api call refused", "unknown token", "not a Bearer token", "client=ci", "grpc call", "grpc stream"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q, so the test would not see a leak:\n%s", want, out)
		}
	}
	for _, secret := range []string{tokenCI, tokenOps, tokenEnv, unknown} {
		if strings.Contains(out, secret) || strings.Contains(out, secret[:12]) {
			t.Errorf("logs contain (part of) a token:\n%s", out)
		}
	}
}
