package server

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGRPCHealthAndReflection checks what grpcurl needs: reflection lists the services and
// health answers SERVING until the server stops.
func TestGRPCHealthAndReflection(t *testing.T) {
	g, err := NewGRPC("127.0.0.1:0", slog.New(slog.DiscardHandler), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()

	conn, err := grpc.NewClient(g.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	rc, err := reflectpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}

	hc := healthpb.NewHealthClient(conn)
	got, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || got.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, %v; want SERVING", got.GetStatus(), err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v after stop, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of stop")
	}
}

// TestGRPCDrainDeadline checks that a stuck stream cannot hold a stop past the drain deadline.
func TestGRPCDrainDeadline(t *testing.T) {
	g, err := NewGRPC("127.0.0.1:0", slog.New(slog.DiscardHandler), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()

	conn, err := grpc.NewClient(g.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A Watch stream stays open until the server goes away.
	w, err := healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cancel()
	select {
	case <-done:
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("stop took %v, want about the 200ms drain deadline", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s although the drain deadline is 200ms")
	}
}

// TestGRPCExtraInterceptors checks that interceptors passed to NewGRPC run inside its panic
// recovery and call log: a call they refuse is logged, and a panic in them is recovered.
func TestGRPCExtraInterceptors(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	refuse := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		switch {
		case len(md.Get("panic")) > 0:
			panic("interceptor panic")
		case len(md.Get("refuse")) > 0:
			return status.Error(codes.Unauthenticated, "refused")
		}
		return nil
	}
	unary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if err := refuse(ctx); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
		if err := refuse(ss.Context()); err != nil {
			return err
		}
		return next(srv, ss)
	}
	g, err := NewGRPC("127.0.0.1:0", logger, time.Second, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(g.Addr(), DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)

	// A panic unwinds through the call log, so the recovery's own line is what records it.
	tests := []struct {
		key                   string
		wantCode              codes.Code
		wantUnary, wantStream []string // substrings of one log line each
	}{
		{key: "refuse", wantCode: codes.Unauthenticated,
			wantUnary:  []string{`msg="grpc call"`, "Health/Check", "code=Unauthenticated"},
			wantStream: []string{`msg="grpc stream"`, "Health/Watch", "code=Unauthenticated"}},
		{key: "panic", wantCode: codes.Internal,
			wantUnary:  []string{`msg="panic in grpc handler"`, "Health/Check", "interceptor panic"},
			wantStream: []string{`msg="panic in grpc stream handler"`, "Health/Watch", "interceptor panic"}},
		// The watch ends when the client cancels it after the first message.
		{key: "none", wantCode: codes.OK,
			wantUnary:  []string{`msg="grpc call"`, "Health/Check", "code=OK"},
			wantStream: []string{`msg="grpc stream"`, "Health/Watch", "code=Canceled"}},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			ctx := metadata.AppendToOutgoingContext(context.Background(), tt.key, "1")
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			if status.Code(err) != tt.wantCode {
				t.Errorf("unary: %v, want %v", err, tt.wantCode)
			}
			sctx, scancel := context.WithCancel(ctx)
			w, err := hc.Watch(sctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = w.Recv()
			}
			scancel()
			if status.Code(err) != tt.wantCode {
				t.Errorf("stream: %v, want %v", err, tt.wantCode)
			}
		})
		for _, want := range [][]string{tt.wantUnary, tt.wantStream} {
			if !logs.waitFor(want...) {
				t.Errorf("%s: no log line with all of %q:\n%s", tt.key, want, logs.String())
			}
		}
	}
}

// syncBuffer collects log lines written by server goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor reports whether a line containing all of subs appears within a second: a stream's
// log line is written after the client has already seen the stream end.
func (b *syncBuffer) waitFor(subs ...string) bool {
	for range 100 {
		for line := range strings.SplitSeq(b.String(), "\n") {
			all := true
			for _, s := range subs {
				all = all && strings.Contains(line, s)
			}
			if all {
				return true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// TestGRPCUnixSocket: a "unix:PATH" address listens on a socket only its owner may connect to
// (0600), Addr names it as a target grpc-go dials, and the file is gone once the server stopped.
func TestGRPCUnixSocket(t *testing.T) {
	path := t.TempDir() + "/executor.sock"
	g, err := NewGRPC("unix:"+path, slog.New(slog.DiscardHandler), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := g.Addr(), "unix:"+path; got != want {
		t.Errorf("Addr() = %q, want %q", got, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	conn, err := grpc.NewClient(g.Addr(), DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || got.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health over the socket = %v, %v; want SERVING", got.GetStatus(), err)
	}
	_ = conn.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket file after stop: %v, want it removed", err)
	}
}

// TestLoopback: which listen addresses take connections from this host only.
func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7704": true, "localhost:7704": true, "[::1]:7704": true, "127.0.0.2:0": true,
		"0.0.0.0:7704": false, ":7704": false, "[::]:7704": false, "10.0.0.5:7704": false, "executor:7704": false, "nonsense": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
