package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"

	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/mcpservers/calculator"
	"github.com/toolmesh/toolmesh/mcpservers/internal/mcptesting"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var calculatorTools = []string{"add", "calculate", "divide", "multiply", "subtract"}

// startHTTP runs Run with the calculator in the background and returns the
// bound address. The server is stopped, and Run's result checked, when the
// test ends.
func startHTTP(t *testing.T, opts Options) net.Addr {
	t.Helper()
	return startHTTPServer(t, calculator.New(), opts)
}

// startHTTPServer is startHTTP with the MCP server s.
func startHTTPServer(t *testing.T, s *server.MCPServer, opts Options) net.Addr {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	opts.OnListen = func(a net.Addr) { addrc <- a }
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, s, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v, want nil after cancel", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return 10s after cancel")
		}
	})
	select {
	case a := <-addrc:
		return a
	case err := <-done:
		t.Fatalf("Run = %v before listening", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not listen within 5s")
	}
	return nil
}

// httpClient returns a client whose idle connections are closed when the
// test ends, so goleak sees no leftover connection goroutines.
func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestHTTPTransports(t *testing.T) {
	addr := startHTTP(t, Options{})
	sse := func(url string, hc *http.Client, opts ...client.ClientOption) (*client.Client, error) {
		tr, err := transport.NewSSE(url, transport.WithHTTPClient(hc))
		return client.NewClient(tr, opts...), err
	}
	streamable := func(url string, hc *http.Client, opts ...client.ClientOption) (*client.Client, error) {
		tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPBasicClient(hc))
		return client.NewClient(tr, opts...), err
	}
	tests := []struct {
		name         string
		transport    string
		connect      func(url string, hc *http.Client, opts ...client.ClientOption) (*client.Client, error)
		opts         []client.ClientOption
		wantProtocol string
	}{
		{"sse", TransportSSE, sse, nil, mcp.LATEST_PROTOCOL_VERSION},
		{"sse legacy", TransportSSE, sse, []client.ClientOption{client.WithLegacyProtocolOnly()}, mcp.LATEST_LEGACY_PROTOCOL_VERSION},
		{"sse 2024-11-05", TransportSSE, sse, []client.ClientOption{client.WithProtocolVersion(mcp.ProtocolVersion20241105)}, mcp.ProtocolVersion20241105},
		{"streamable-http", TransportStreamableHTTP, streamable, nil, mcp.LATEST_PROTOCOL_VERSION},
		{"streamable-http legacy", TransportStreamableHTTP, streamable, []client.ClientOption{client.WithLegacyProtocolOnly()}, mcp.LATEST_LEGACY_PROTOCOL_VERSION},
		{"streamable-http 2025-03-26", TransportStreamableHTTP, streamable, []client.ClientOption{client.WithProtocolVersion(mcp.ProtocolVersion20250326)}, mcp.ProtocolVersion20250326},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.connect(URL(addr, tt.transport), httpClient(t), tt.opts...)
			if err != nil {
				t.Fatalf("new client: %v", err)
			}
			init := mcptesting.Init(t, c)
			if init.ServerInfo.Name != "calculator" {
				t.Errorf("server name = %q, want calculator", init.ServerInfo.Name)
			}
			if init.ProtocolVersion != tt.wantProtocol {
				t.Errorf("protocol version = %q, want %q", init.ProtocolVersion, tt.wantProtocol)
			}
			got := mcptesting.ToolNames(t, c)
			slices.Sort(got)
			if !slices.Equal(got, calculatorTools) {
				t.Errorf("tools = %v, want %v", got, calculatorTools)
			}
			res := mcptesting.Call(t, c, "add", map[string]any{"a": 2, "b": 3})
			if text := mcptesting.Text(res); res.IsError || text != "5" {
				t.Errorf("add(2, 3) = %q (IsError %v), want 5", text, res.IsError)
			}
			res = mcptesting.Call(t, c, "divide", map[string]any{"a": 1, "b": 0})
			if !res.IsError {
				t.Errorf("divide(1, 0) IsError = false, want true")
			}
		})
	}
}

// TestSSEEndpointEvent checks that the endpoint event is a path relative to
// whatever host the client used.
func TestSSEEndpointEvent(t *testing.T) {
	addr := startHTTP(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, URL(addr, TransportSSE), nil)
	resp, err := httpClient(t).Do(req)
	if err != nil {
		t.Fatalf("GET /sse: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var event, data string
	for sc.Scan() && data == "" {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			data = v
		}
	}
	if event != "endpoint" || !strings.HasPrefix(data, MessagePath+"?sessionId=") {
		t.Errorf("first event = %q %q, want endpoint %s?sessionId=...", event, data, MessagePath)
	}
}

func TestOriginCheck(t *testing.T) {
	addr := startHTTP(t, Options{})
	base := "http://" + addr.String()
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	tests := []struct {
		name       string
		method     string
		path       string
		origin     string
		wantStatus int
	}{
		{"sse evil", http.MethodGet, SSEPath, "http://evil.example", http.StatusForbidden},
		{"mcp evil", http.MethodPost, StreamableHTTPPath, "http://evil.example", http.StatusForbidden},
		{"message evil", http.MethodPost, MessagePath + "?sessionId=x", "http://evil.example", http.StatusForbidden},
		{"mcp null origin", http.MethodPost, StreamableHTTPPath, "null", http.StatusForbidden},
		{"mcp localhost lookalike", http.MethodPost, StreamableHTTPPath, "http://localhost.evil.example", http.StatusForbidden},
		{"mcp no origin", http.MethodPost, StreamableHTTPPath, "", http.StatusOK},
		{"mcp localhost", http.MethodPost, StreamableHTTPPath, "http://localhost:5173", http.StatusOK},
		{"mcp 127.0.0.1", http.MethodPost, StreamableHTTPPath, "https://127.0.0.1", http.StatusOK},
		{"mcp ::1", http.MethodPost, StreamableHTTPPath, "http://[::1]:8080", http.StatusOK},
	}
	hc := httpClient(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, tt.method, base+tt.path, strings.NewReader(initBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.path, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("%s %s with Origin %q: status %d (%s), want %d", tt.method, tt.path, tt.origin, resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusForbidden {
				var e struct{ Message string }
				if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Message, fmt.Sprintf("origin %q is not allowed", tt.origin)) {
					t.Errorf("403 body = %s, want JSON naming the origin", body)
				}
			}
			if tt.origin != "" && tt.wantStatus == http.StatusOK {
				if got := resp.Header.Get("Access-Control-Allow-Origin"); got != tt.origin {
					t.Errorf("Access-Control-Allow-Origin = %q, want %q", got, tt.origin)
				}
			}
		})
	}
}

// TestWebGuard: what the web guard adds to the Origin check for the shipped servers: a page of
// another site cannot reach them with a request that carries no Origin (an <img>, a
// <script>), nor post to them as a form or text, however it is named.
func TestWebGuard(t *testing.T) {
	h := Handler(calculator.New(), Options{})
	for _, tt := range []struct {
		name, method, path, contentType, fetch string
		want                                   int
	}{
		{"another site's script tag", http.MethodGet, SSEPath, "", "cross-site no-cors script", http.StatusForbidden},
		{"a form post", http.MethodPost, StreamableHTTPPath, "application/x-www-form-urlencoded", "", http.StatusUnsupportedMediaType},
		{"a text/plain post", http.MethodPost, MessagePath + "?sessionId=x", "text/plain", "", http.StatusUnsupportedMediaType},
	} {
		req := httptest.NewRequest(tt.method, "http://calculator:7801"+tt.path, strings.NewReader("{}"))
		if tt.contentType != "" {
			req.Header.Set("Content-Type", tt.contentType)
		}
		if f := strings.Fields(tt.fetch); len(f) == 3 {
			req.Header.Set("Sec-Fetch-Site", f[0])
			req.Header.Set("Sec-Fetch-Mode", f[1])
			req.Header.Set("Sec-Fetch-Dest", f[2])
		}
		rec := newRecorder()
		h.ServeHTTP(rec, req)
		if rec.status != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, rec.status, tt.want)
		}
	}
}

// TestOriginPolicy: which browser origins the web guard of the shipped servers lets call them.
func TestOriginPolicy(t *testing.T) {
	tests := []struct {
		allowed []string
		origin  string
		want    bool
	}{
		{nil, "http://localhost", true},
		{nil, "http://LOCALHOST:3000", true},
		{nil, "https://127.0.0.1:443", true},
		{nil, "http://[::1]", true},
		{nil, "http://127.0.0.2", false},
		{nil, "file://localhost", false},
		{nil, "http://user@localhost", false},
		{nil, "http://localhost/path", false},
		{nil, "http://evil.example", false},
		{nil, "null", false},
		{nil, "localhost", false},
		{[]string{"https://app.example"}, "https://app.example", true},
		{[]string{"https://app.example/"}, "https://APP.example", true},
		{[]string{"https://app.example"}, "http://app.example", false},
		{[]string{"https://app.example"}, "http://localhost", false},
		{[]string{"*"}, "http://evil.example", true},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7801/sse", nil)
		req.Header.Set("Origin", tt.origin)
		if got := newGuard(tt.allowed, slog.New(slog.DiscardHandler)).Check(req, false) == nil; got != tt.want {
			t.Errorf("allowed %v, origin %q = %v, want %v", tt.allowed, tt.origin, got, tt.want)
		}
	}
}

func TestCORSPreflight(t *testing.T) {
	h := Handler(calculator.New(), Options{AllowedOrigins: []string{"https://app.example"}})
	tests := []struct {
		origin     string
		wantStatus int
	}{
		{"https://app.example", http.StatusNoContent},
		{"http://localhost:3000", http.StatusForbidden},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodOptions, "http://127.0.0.1/mcp", nil)
		req.Header.Set("Origin", tt.origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type, mcp-session-id")
		rec := newRecorder()
		h.ServeHTTP(rec, req)
		if rec.status != tt.wantStatus {
			t.Errorf("OPTIONS from %s: status %d, want %d", tt.origin, rec.status, tt.wantStatus)
		}
		if tt.wantStatus == http.StatusNoContent {
			if got := rec.header.Get("Access-Control-Allow-Headers"); got != "content-type, mcp-session-id" {
				t.Errorf("Access-Control-Allow-Headers = %q, want the requested headers", got)
			}
		}
	}
}

type recorder struct {
	header http.Header
	status int
}

func newRecorder() *recorder                    { return &recorder{header: http.Header{}} }
func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *recorder) WriteHeader(status int)      { r.status = status }

// TestShutdownWithOpenStreams checks that open SSE streams do not hold up the
// graceful shutdown until its deadline.
func TestShutdownWithOpenStreams(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, calculator.New(), Options{ShutdownTimeout: 30 * time.Second, OnListen: func(a net.Addr) { addrc <- a }})
	}()
	addr := <-addrc

	hc := httpClient(t)
	sse, err := client.NewSSEMCPClient(URL(addr, TransportSSE), transport.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	mcptesting.Init(t, sse)
	stream, err := client.NewStreamableHttpClient(URL(addr, TransportStreamableHTTP), transport.WithHTTPBasicClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	mcptesting.Init(t, stream)

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("shutdown took %v, want well under the 30s deadline", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return 15s after cancel")
	}
}

func TestStdio(t *testing.T) {
	serverIn, clientOut := io.Pipe()
	clientIn, serverOut := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, calculator.New(), Options{Transport: TransportStdio, Stdin: serverIn, Stdout: serverOut})
	}()

	c := client.NewClient(transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
	mcptesting.Init(t, c)
	got := mcptesting.ToolNames(t, c)
	slices.Sort(got)
	if !slices.Equal(got, calculatorTools) {
		t.Errorf("tools = %v, want %v", got, calculatorTools)
	}
	res := mcptesting.Call(t, c, "add", map[string]any{"a": 2, "b": 3})
	if text := mcptesting.Text(res); text != "5" {
		t.Errorf("add(2, 3) = %q, want 5", text)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return 5s after cancel")
	}
	// Closing the pipes releases mcp-go's blocked stdin reader.
	_ = c.Close()
	serverIn.Close()
	serverOut.Close()
}

func TestStdioEOF(t *testing.T) {
	var out strings.Builder
	in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")
	err := Run(context.Background(), calculator.New(), Options{Transport: TransportStdio, Stdin: in, Stdout: &out})
	if err != nil {
		t.Fatalf("Run = %v, want nil at end of input", err)
	}
	if !strings.Contains(out.String(), `"id":1`) {
		t.Errorf("stdout = %q, want a reply to the ping", out.String())
	}
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"bad transport", Options{Transport: "websocket"}, `unknown MCP transport "websocket"`},
		{"bad addr", Options{Addr: "nonsense"}, `listen address "nonsense"`},
	}
	for _, tt := range tests {
		err := Run(context.Background(), calculator.New(), tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Run = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}

	// A port already in use.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := Run(context.Background(), calculator.New(), Options{Addr: ln.Addr().String()}); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Run on a busy port = %v, want a listen error", err)
	}
}

func TestListenAddr(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", "127.0.0.1:0"},
		{":7801", "127.0.0.1:7801"},
		{"localhost:7801", "localhost:7801"},
		{"0.0.0.0:7801", "0.0.0.0:7801"},
		{"[::1]:0", "[::1]:0"},
	}
	for _, tt := range tests {
		if got, err := listenAddr(tt.in); err != nil || got != tt.want {
			t.Errorf("listenAddr(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestURL(t *testing.T) {
	tests := []struct {
		addr      net.Addr
		transport string
		want      string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7801}, TransportSSE, "http://127.0.0.1:7801/sse"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7801}, "", "http://127.0.0.1:7801/sse"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7801}, TransportStreamableHTTP, "http://127.0.0.1:7801/mcp"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 7801}, TransportSSE, "http://127.0.0.1:7801/sse"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 7801}, TransportSSE, "http://[::1]:7801/sse"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 7801}, TransportStdio, ""},
	}
	for _, tt := range tests {
		if got := URL(tt.addr, tt.transport); got != tt.want {
			t.Errorf("URL(%v, %q) = %q, want %q", tt.addr, tt.transport, got, tt.want)
		}
	}
}
