package server

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// runGRPC starts a server from NewGRPC until the test ends.
func runGRPC(t testing.TB, opts ...grpc.ServerOption) *GRPC {
	t.Helper()
	g, err := NewGRPC("127.0.0.1:0", slog.New(slog.DiscardHandler), time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

// TestMaxConcurrentStreams reads the SETTINGS frame a toolmesh gRPC server sends a new
// connection: it must bound the streams one connection may open (grpc-go's default is none).
func TestMaxConcurrentStreams(t *testing.T) {
	g := runGRPC(t)
	conn, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no SETTINGS frame from the server: %v", err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		got, ok := sf.Value(http2.SettingMaxConcurrentStreams)
		if !ok || got != MaxConcurrentStreams {
			t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v), want %d", got, ok, MaxConcurrentStreams)
		}
		return
	}
}

// TestErrorStatusRedacted: a handler's error that quotes an MCP server URL reaches the client
// with the URL's credentials masked, its code and details kept.
func TestErrorStatusRedacted(t *testing.T) {
	const secret = "S3CRET-k3y"
	fail := func() error {
		st, _ := status.New(codes.Unavailable, `server "x" is unavailable: Get "https://user:`+secret+`@mcp.example/sse?api_key=`+secret+`": dial tcp: connection refused`).
			WithDetails(&errdetails.ErrorInfo{Reason: "SERVER_DOWN"})
		return st.Err()
	}
	g := runGRPC(t,
		grpc.ChainUnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) { return nil, fail() }),
		grpc.ChainStreamInterceptor(func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error { return fail() }))
	conn, err := grpc.NewClient(g.Addr(), DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	_, unaryErr := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
	w, streamErr := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if streamErr == nil {
		_, streamErr = w.Recv()
	}
	for name, err := range map[string]error{"unary": unaryErr, "stream": streamErr} {
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || strings.Contains(st.Message(), secret) ||
			!strings.Contains(st.Message(), "https://REDACTED@mcp.example/sse?api_key=REDACTED") {
			t.Errorf("%s: %v, want Unavailable with the URL's credentials masked", name, err)
		}
		if d := st.Details(); len(d) != 1 {
			t.Errorf("%s: details %v, want the ErrorInfo kept", name, d)
		}
	}
}
