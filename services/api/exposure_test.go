package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/auth"
)

// TestCheckExposure: an api that listens beyond loopback without tokens does not start, and the
// error names the token flag and the opt-out.
func TestCheckExposure(t *testing.T) {
	tests := []struct {
		name       string
		http, grpc string
		tokens     bool
		allowOpen  bool
		wantFlag   string // in the error; "" for no error
	}{
		{name: "loopback", http: "127.0.0.1:7700", grpc: "127.0.0.1:7701"},
		{name: "localhost and IPv6 loopback", http: "localhost:7700", grpc: "[::1]:7701"},
		{name: "REST on every interface", http: "0.0.0.0:7700", grpc: "127.0.0.1:7701", wantFlag: "api.http-addr"},
		{name: "REST without host", http: ":7700", grpc: "127.0.0.1:7701", wantFlag: "api.http-addr"},
		{name: "gRPC on a LAN address", http: "127.0.0.1:7700", grpc: "192.168.1.5:7701", wantFlag: "api.grpc-addr"},
		{name: "gRPC on every IPv6 interface", http: "127.0.0.1:7700", grpc: "[::]:7701", wantFlag: "api.grpc-addr"},
		{name: "a host name", http: "myhost:7700", grpc: "127.0.0.1:7701", wantFlag: "api.http-addr"},
		{name: "open with tokens", http: "0.0.0.0:7700", grpc: "0.0.0.0:7701", tokens: true},
		{name: "open on purpose", http: "0.0.0.0:7700", grpc: "0.0.0.0:7701", allowOpen: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkExposure(Config{HTTPAddr: tt.http, GRPCAddr: tt.grpc, AllowOpen: tt.allowOpen}, tt.tokens)
			if tt.wantFlag == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatal("got no error, want the start refused")
			}
			for _, want := range []string{tt.wantFlag, "--api.tokens-file", auth.EnvTokens, "--api.allow-open"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
	// New refuses too, before it dials anything.
	cfg := testConfig("127.0.0.1:1", "")
	cfg.HTTPAddr = "0.0.0.0:0"
	if _, err := New(cfg, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), "--api.allow-open") {
		t.Errorf("New with an open REST address and no tokens: %v, want refused", err)
	}
}

// TestSecretsRedactedInStatus: an MCP server's last error quotes its URL with credentials;
// neither /v1/servers nor /readyz shows them.
func TestSecretsRedactedInStatus(t *testing.T) {
	const secret = "S3CRET-in-the-url"
	exec := &fakeExecutor{servers: []*toolmeshv1.Server{{
		Name: "remote", State: toolmeshv1.ServerState_SERVER_STATE_CONNECTING,
		Endpoint:  "https://mcp.example/sse",
		LastError: `connect: Get "https://me:` + secret + `@mcp.example/sse?api_key=` + secret + `": dial tcp: connection refused`,
	}}}
	ts := newGateway(t, startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) }))
	for _, path := range []string{"/v1/servers", "/readyz"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), secret) || !strings.Contains(string(b), "api_key=REDACTED") {
			t.Errorf("GET %s = %s; want the error with the URL's credentials masked", path, b)
		}
	}
}

// trickle sends a request whose body comes one byte every 200 ms and returns the status line,
// how long the answer took and whether the server closed the connection within wait.
func trickle(t *testing.T, addr, path, token string, wait time.Duration) (string, time.Duration, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	start := time.Now()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: 1000\r\n\r\n{", path, addr, auth)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", time.Since(start), false
	}
	took := time.Since(start)
	_, err = io.Copy(io.Discard, r) // the server closes the connection, or the deadline passes
	closed := err == nil
	return strings.TrimSpace(line), took, closed
}

// TestTrickledBody: a client that sends its body a byte at a time holds the connection no
// longer than api.body-timeout when the body would be read (408), and is refused at once,
// without waiting for its body, when its token is unknown (401).
func TestTrickledBody(t *testing.T) {
	const token = "a-long-enough-test-token-0123456789"
	cfg := testConfig("127.0.0.1:1", "")
	cfg.Tokens = "tester:" + token
	cfg.BodyTimeout = 2 * time.Second
	srv := httptest.NewServer(gatewayHandler(t, cfg))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		name, token, want string
		within            time.Duration
	}{
		{"authenticated, body never ends", token, "408", 5 * time.Second},
		{"unknown token", "wrong-token-wrong-token-0000", "401", time.Second}, // before the body timeout
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, took, closed := trickle(t, addr, "/v1/query", tc.token, 10*time.Second)
			t.Logf("%s after %s", line, took.Round(time.Millisecond))
			if !strings.Contains(line, tc.want) || took > tc.within {
				t.Errorf("got %q after %s, want %s within %s", line, took.Round(time.Millisecond), tc.want, tc.within)
			}
			if !closed {
				t.Error("the server kept reading the trickled body past the timeout")
			}
		})
	}
}
