package auth

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/server"
)

// fakeTools answers ListTools with one tool named after the caller's token.
type fakeTools struct {
	toolmeshv1.UnimplementedToolServiceServer
}

func (fakeTools) ListTools(ctx context.Context, _ *toolmeshv1.ListToolsRequest) (*toolmeshv1.ListToolsResponse, error) {
	return &toolmeshv1.ListToolsResponse{Tools: []*toolmeshv1.Tool{{Id: "who.ami", Name: Name(ctx)}}}, nil
}

// fakeAgent streams two events, the second naming the caller's token.
type fakeAgent struct {
	toolmeshv1.UnimplementedAgentServiceServer
}

func (fakeAgent) QueryStream(_ *toolmeshv1.QueryStreamRequest, s grpc.ServerStreamingServer[toolmeshv1.QueryStreamResponse]) error {
	for _, delta := range []string{"caller=", Name(s.Context())} {
		if err := s.Send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: delta}}); err != nil {
			return err
		}
	}
	return nil
}

// startGRPC runs a server.NewGRPC server guarded by g, logging to logger, until the test ends,
// and returns a client connection to it.
func startGRPC(t *testing.T, g *Guard, logger *slog.Logger) *grpc.ClientConn {
	t.Helper()
	srv, err := server.NewGRPC("127.0.0.1:0", logger, time.Second, g.ServerOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	toolmeshv1.RegisterToolServiceServer(srv.Server, fakeTools{})
	toolmeshv1.RegisterAgentServiceServer(srv.Server, fakeAgent{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	conn, err := grpc.NewClient(srv.Addr(), server.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("grpc server: %v", err)
		}
	})
	return conn
}

func withAuth(value string) context.Context {
	if value == "" {
		return context.Background()
	}
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", value)
}

// queryStream reads a whole QueryStream and returns its text, the stream's header and error.
func queryStream(ctx context.Context, conn *grpc.ClientConn) (string, metadata.MD, error) {
	s, err := toolmeshv1.NewAgentServiceClient(conn).QueryStream(ctx, &toolmeshv1.QueryStreamRequest{})
	if err != nil {
		return "", nil, err
	}
	var text string
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return text, nil, nil
		}
		if err != nil {
			md, _ := s.Header()
			return text, md, err
		}
		text += m.GetAnswerDelta()
	}
}

func TestGRPC(t *testing.T) {
	g, _ := newGuard(t, Config{}, "")
	conn := startGRPC(t, g, slogDiscard())
	tests := []struct {
		name     string
		auth     string
		wantCode codes.Code
		wantMsg  string // in the error, or the caller's name on success
	}{
		{name: "no metadata", wantCode: codes.Unauthenticated, wantMsg: "missing Authorization header"},
		{name: "wrong scheme", auth: "Basic " + tokenCI, wantCode: codes.Unauthenticated, wantMsg: "not a Bearer token"},
		{name: "unknown token", auth: "Bearer not-a-configured-token-123", wantCode: codes.Unauthenticated, wantMsg: "unknown token"},
		{name: "first token", auth: "Bearer " + tokenCI, wantCode: codes.OK, wantMsg: "ci"},
		{name: "second token", auth: "Bearer " + tokenOps, wantCode: codes.OK, wantMsg: "ops"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/unary", func(t *testing.T) {
			resp, err := toolmeshv1.NewToolServiceClient(conn).ListTools(withAuth(tt.auth), &toolmeshv1.ListToolsRequest{})
			checkCall(t, err, tt.wantCode, tt.wantMsg, func() string { return resp.GetTools()[0].GetName() })
		})
		t.Run(tt.name+"/stream", func(t *testing.T) {
			text, _, err := queryStream(withAuth(tt.auth), conn)
			checkCall(t, err, tt.wantCode, tt.wantMsg, func() string { return text[len("caller="):] })
		})
	}

	t.Run("health needs no token", func(t *testing.T) {
		hc := healthpb.NewHealthClient(conn)
		if resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check = %v, %v; want SERVING", resp.GetStatus(), err)
		}
		w, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		if err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	t.Run("reflection needs a token", func(t *testing.T) {
		rc, err := reflectpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
		if err == nil {
			_ = rc.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}})
			_, err = rc.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("reflection without a token: %v, want Unauthenticated", err)
		}
	})
}

func checkCall(t *testing.T, err error, wantCode codes.Code, wantMsg string, got func() string) {
	t.Helper()
	if status.Code(err) != wantCode {
		t.Fatalf("code = %v (%v), want %v", status.Code(err), err, wantCode)
	}
	if err != nil {
		if msg := status.Convert(err).Message(); !strings.Contains(msg, wantMsg) {
			t.Errorf("message = %q, want it to contain %q", msg, wantMsg)
		}
		return
	}
	if name := got(); name != wantMsg {
		t.Errorf("Name(ctx) in the handler = %q, want %q", name, wantMsg)
	}
}

func TestGRPCRateLimit(t *testing.T) {
	g, _ := newGuard(t, Config{RateLimit: 0.01, RateBurst: 1}, "")
	conn := startGRPC(t, g, slogDiscard())
	tools := toolmeshv1.NewToolServiceClient(conn)

	if _, err := tools.ListTools(withAuth("Bearer "+tokenCI), &toolmeshv1.ListToolsRequest{}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	var header metadata.MD
	_, err := tools.ListTools(withAuth("Bearer "+tokenCI), &toolmeshv1.ListToolsRequest{}, grpc.Header(&header))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v, want ResourceExhausted", err)
	}
	checkRetryAfter(t, header)

	// The limit is per token: ops still has its burst, for the stream too.
	if _, _, err := queryStream(withAuth("Bearer "+tokenOps), conn); err != nil {
		t.Fatalf("other token's stream: %v", err)
	}
	_, header, err = queryStream(withAuth("Bearer "+tokenOps), conn)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("other token's second stream: %v, want ResourceExhausted", err)
	}
	checkRetryAfter(t, header)

	// Health is neither checked nor counted.
	for range 3 {
		if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health: %v", err)
		}
	}
}

func checkRetryAfter(t *testing.T, header metadata.MD) {
	t.Helper()
	v := header.Get("retry-after")
	if len(v) != 1 {
		t.Fatalf("retry-after header = %v, want one value", v)
	}
	if secs, err := strconv.Atoi(v[0]); err != nil || secs < 90 || secs > 100 {
		t.Errorf("retry-after = %q, want whole seconds near 100", v[0])
	}
}
