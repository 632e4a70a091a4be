package localclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// probe is an executor double whose CallTool does what the tool id says and tells what its
// context held; WatchTools sends three events, then ends as the request metadata's x-end says.
type probe struct {
	toolmeshv1.UnimplementedExecutorServiceServer
	saw chan handlerView
}

// handlerView is what a handler found in its context.
type handlerView struct {
	deadline    time.Time
	hasDeadline bool
	md          metadata.MD
	peer        bool
	method      string
	callerValue any
	span        trace.SpanContext
}

type callerKey struct{}

func (p *probe) look(ctx context.Context) {
	v := handlerView{callerValue: ctx.Value(callerKey{}), span: trace.SpanContextFromContext(ctx)}
	v.deadline, v.hasDeadline = ctx.Deadline()
	v.md, _ = metadata.FromIncomingContext(ctx)
	_, v.peer = peer.FromContext(ctx)
	v.method, _ = grpc.Method(ctx)
	select {
	case p.saw <- v:
	default:
	}
}

func (p *probe) CallTool(ctx context.Context, req *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	p.look(ctx)
	switch req.GetToolId() {
	case "ok":
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-cut", "7"))
		return &toolmeshv1.ExecutorServiceCallToolResponse{Content: []*toolmeshv1.Content{{Type: "text", Text: ptr("5")}}}, nil
	case "not-found":
		return nil, status.Error(codes.NotFound, "tool calc.nope: not found")
	case "plain":
		return nil, errors.New("boom")
	case "wrapped":
		return nil, fmt.Errorf("calling: %w", status.Error(codes.InvalidArgument, "argument a: not a number"))
	case "credentials":
		return nil, status.Error(codes.Unavailable, "dial https://user:hunter2@mcp.example.com/sse: refused")
	case "slow":
		<-ctx.Done()
		return nil, ctx.Err()
	case "panic":
		panic("a handler bug")
	}
	return nil, status.Error(codes.InvalidArgument, "unknown probe")
}

func (p *probe) WatchTools(_ *toolmeshv1.WatchToolsRequest, stream grpc.ServerStreamingServer[toolmeshv1.WatchToolsResponse]) error {
	p.look(stream.Context())
	for i := range 3 {
		if err := stream.Send(&toolmeshv1.WatchToolsResponse{Revision: uint64(i + 1)}); err != nil {
			return err
		}
	}
	md, _ := metadata.FromIncomingContext(stream.Context())
	switch end := md.Get("x-end"); {
	case slices.Contains(end, "fail"):
		return status.Error(codes.Aborted, "catalog changed")
	case slices.Contains(end, "hold"):
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// path is one way to call the probe: over gRPC on loopback, or in the process.
type path struct {
	client        toolmeshv1.ExecutorServiceClient
	probe         *probe
	callerSpans   *tracetest.InMemoryExporter
	serverSpans   *tracetest.InMemoryExporter
	callerMetrics *sdkmetric.ManualReader
	serverMetrics *sdkmetric.ManualReader
	stop          func() // stops the server (its drain)
}

func telemetryFor(t *testing.T, name string) (*telemetry.Service, *tracetest.InMemoryExporter, *sdkmetric.ManualReader) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	return telemetry.NewForTest(name, tp, mp, telemetry.PayloadPolicy{}), spans, reader
}

// paths are the two ways, each with its own probe, caller and server telemetry.
var paths = map[string]func(t *testing.T) *path{
	"grpc": func(t *testing.T) *path {
		p := newPath(t)
		callerTel, serverTel := p.tels(t)
		g, err := server.NewGRPC("127.0.0.1:0", slog.New(slog.DiscardHandler), time.Second, serverTel.GRPCServerOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		toolmeshv1.RegisterExecutorServiceServer(g.Server, p.probe)
		p.stop = runUntilStopped(t, g.Run)
		conn, err := grpc.NewClient(g.Addr(), append(server.DialOptions(), callerTel.GRPCDialOptions()...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		p.client = toolmeshv1.NewExecutorServiceClient(conn)
		return p
	},
	"local": func(t *testing.T) *path {
		p := newPath(t)
		callerTel, serverTel := p.tels(t)
		l := server.NewLocal("executor", slog.New(slog.DiscardHandler), time.Second, serverTel.GRPCServerStats())
		toolmeshv1.RegisterExecutorServiceServer(l, p.probe)
		p.stop = runUntilStopped(t, l.Run)
		p.client = Executor(l.Client(callerTel.GRPCClientStats()))
		return p
	},
}

func newPath(*testing.T) *path { return &path{probe: &probe{saw: make(chan handlerView, 1)}} }

func (p *path) tels(t *testing.T) (caller, srv *telemetry.Service) {
	caller, p.callerSpans, p.callerMetrics = telemetryFor(t, "toolmesh-api")
	srv, p.serverSpans, p.serverMetrics = telemetryFor(t, "toolmesh-executor")
	return caller, srv
}

// runUntilStopped runs run until the returned stop (or the test's end) and waits for it.
func runUntilStopped(t *testing.T, run func(context.Context) error) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func (p *path) seen(t *testing.T) handlerView {
	t.Helper()
	select {
	case v := <-p.probe.saw:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("the handler was not called")
		return handlerView{}
	}
}

// metricPoints are the data points of the histogram name: its attributes, as key=value.
func metricPoints(t *testing.T, r *sdkmetric.ManualReader, name string) [][]string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("%s: %T, want a float64 histogram", name, m.Data)
			}
			for _, dp := range h.DataPoints {
				var kv []string
				for _, a := range dp.Attributes.ToSlice() {
					if a.Key == "server.address" || a.Key == "server.port" || a.Key == "network.peer.address" || a.Key == "network.peer.port" {
						continue // where the server listens: none in the process
					}
					kv = append(kv, string(a.Key)+"="+a.Value.Emit())
				}
				slices.Sort(kv)
				out = append(out, kv)
			}
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if a.Key == attribute.Key(key) {
			return a.Value.Emit()
		}
	}
	return ""
}

// TestSameAsGRPC runs one table of checks against a service called over gRPC (serve) and in
// the process (up, server.Local): spans, metrics, deadlines, cancellation, metadata, peer,
// trailers, error codes and masking, panics, streams and the stop behave the same.
func TestSameAsGRPC(t *testing.T) {
	checks := []struct {
		name  string
		check func(t *testing.T, p *path)
	}{
		{"a call returns the handler's response and trailer", func(t *testing.T, p *path) {
			var trailer metadata.MD
			resp, err := p.client.CallTool(context.Background(), &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "ok"}, grpc.Trailer(&trailer))
			if err != nil || resp.GetContent()[0].GetText() != "5" {
				t.Fatalf("got %v, %v; want the text 5", resp, err)
			}
			if got := trailer.Get("x-cut"); !slices.Equal(got, []string{"7"}) {
				t.Errorf("trailer x-cut %v, want [7]", got)
			}
			if v := p.seen(t); v.method != toolmeshv1.ExecutorService_CallTool_FullMethodName || !v.peer {
				t.Errorf("handler saw method %q, peer %v; want the full method and a peer", v.method, v.peer)
			}
		}},
		{"one trace: a client span in the caller, its child server span in the service", func(t *testing.T, p *path) {
			if _, err := p.client.CallTool(context.Background(), &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "not-found"}); err == nil {
				t.Fatal("no error")
			}
			v := p.seen(t)
			// Over gRPC the server's span ends after its answer has left.
			eventually.True(t, 5*time.Second, "the server span", func() bool { return len(p.serverSpans.GetSpans()) > 0 })
			cs, ss := p.callerSpans.GetSpans(), p.serverSpans.GetSpans()
			if len(cs) != 1 || len(ss) != 1 {
				t.Fatalf("%d caller spans, %d server spans; want one each", len(cs), len(ss))
			}
			c, s := cs[0], ss[0]
			const name = "toolmesh.v1.ExecutorService/CallTool"
			if c.Name != name || s.Name != name || c.SpanKind != trace.SpanKindClient || s.SpanKind != trace.SpanKindServer {
				t.Errorf("spans %q (%v), %q (%v); want %q client and server", c.Name, c.SpanKind, s.Name, s.SpanKind, name)
			}
			if s.Parent.SpanID() != c.SpanContext.SpanID() || s.SpanContext.TraceID() != c.SpanContext.TraceID() || !s.Parent.IsRemote() {
				t.Errorf("server span's parent %v, want the client span %v (remote)", s.Parent, c.SpanContext)
			}
			if v.span.SpanID() != s.SpanContext.SpanID() {
				t.Errorf("the handler's span %v, want the server span %v", v.span.SpanID(), s.SpanContext.SpanID())
			}
			for _, sp := range []tracetest.SpanStub{c, s} {
				if got := attr(sp.Snapshot(), "rpc.response.status_code"); got != "NOT_FOUND" {
					t.Errorf("%v span: rpc.response.status_code %q, want NOT_FOUND", sp.SpanKind, got)
				}
			}
		}},
		{"metrics: rpc call durations on both sides with method and code", func(t *testing.T, p *path) {
			if _, err := p.client.CallTool(context.Background(), &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "ok"}); err != nil {
				t.Fatal(err)
			}
			want := []string{"rpc.method=toolmesh.v1.ExecutorService/CallTool", "rpc.response.status_code=OK", "rpc.system.name=grpc"}
			for side, r := range map[string]*sdkmetric.ManualReader{"rpc.client.call.duration": p.callerMetrics, "rpc.server.call.duration": p.serverMetrics} {
				// Over gRPC the server records after its answer has left.
				eventually.Check(t, 5*time.Second, side, func() string {
					if got := metricPoints(t, r, side); len(got) != 1 || !slices.Equal(got[0], want) {
						return fmt.Sprintf("points %v, want one with %v", got, want)
					}
					return ""
				})
			}
		}},
		{"the handler has the caller's deadline and metadata, none of its values", func(t *testing.T, p *path) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ctx = context.WithValue(metadata.AppendToOutgoingContext(ctx, "x-request", "r1"), callerKey{}, "secret")
			if _, err := p.client.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "ok"}); err != nil {
				t.Fatal(err)
			}
			v := p.seen(t)
			want, _ := ctx.Deadline()
			if !v.hasDeadline || v.deadline.Sub(want).Abs() > 50*time.Millisecond {
				t.Errorf("handler deadline %v (%v), want about %v", v.deadline, v.hasDeadline, want)
			}
			if got := v.md.Get("x-request"); !slices.Equal(got, []string{"r1"}) {
				t.Errorf("incoming x-request %v, want [r1]", got)
			}
			if len(v.md.Get("traceparent")) != 1 {
				t.Errorf("incoming metadata %v: want the trace context", v.md)
			}
			if v.callerValue != nil {
				t.Errorf("the handler read the caller's context value %v", v.callerValue)
			}
		}},
		{"a deadline that passes ends the call with DeadlineExceeded", func(t *testing.T, p *path) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := p.client.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "slow", Timeout: durationpb.New(time.Second)})
			if status.Code(err) != codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v; want a DeadlineExceeded status (not the context's own error)", err)
			}
		}},
		{"a caller that cancels ends the handler with Canceled", func(t *testing.T, p *path) {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { p.seen(t); cancel() }()
			_, err := p.client.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "slow"})
			if status.Code(err) != codes.Canceled {
				t.Errorf("got %v; want Canceled", err)
			}
		}},
		{"error statuses: kept, wrapped, plain, masked, panics", func(t *testing.T, p *path) {
			for _, c := range []struct {
				tool string
				code codes.Code
				msg  string
			}{
				{"not-found", codes.NotFound, "tool calc.nope: not found"},
				{"wrapped", codes.InvalidArgument, "calling: rpc error: code = InvalidArgument desc = argument a: not a number"},
				{"plain", codes.Unknown, "boom"},
				{"credentials", codes.Unavailable, "dial https://REDACTED@mcp.example.com/sse: refused"},
				{"panic", codes.Internal, "internal error"},
			} {
				_, err := p.client.CallTool(context.Background(), &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: c.tool})
				st, ok := status.FromError(err)
				if !ok || st.Code() != c.code || st.Message() != c.msg {
					t.Errorf("%s: got %v; want %v %q", c.tool, err, c.code, c.msg)
				}
				<-p.probe.saw
			}
		}},
		{"a stream delivers every message in order, then EOF or the handler's status", func(t *testing.T, p *path) {
			for _, end := range []string{"ok", "fail"} {
				ctx := metadata.AppendToOutgoingContext(context.Background(), "x-end", end)
				s, err := p.client.WatchTools(ctx, &toolmeshv1.WatchToolsRequest{})
				if err != nil {
					t.Fatal(err)
				}
				var revs []uint64
				for {
					m, err := s.Recv()
					if err != nil {
						if end == "ok" && err != io.EOF || end == "fail" && status.Code(err) != codes.Aborted {
							t.Errorf("%s: stream ended with %v", end, err)
						}
						break
					}
					revs = append(revs, m.GetRevision())
				}
				if !slices.Equal(revs, []uint64{1, 2, 3}) {
					t.Errorf("%s: revisions %v, want [1 2 3]", end, revs)
				}
				<-p.probe.saw
			}
			eventually.True(t, 5*time.Second, "a server span per stream", func() bool { return len(p.serverSpans.GetSpans()) == 2 })
		}},
		{"a stream's caller that cancels ends the handler", func(t *testing.T, p *path) {
			ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-end", "hold"))
			s, err := p.client.WatchTools(ctx, &toolmeshv1.WatchToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, err := s.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			if _, err := s.Recv(); status.Code(err) != codes.Canceled {
				t.Errorf("after cancel: %v; want Canceled", err)
			}
			p.stop() // returns only once the handler has ended (the drain waits for it)
		}},
		{"a stopped server refuses calls with Unavailable", func(t *testing.T, p *path) {
			p.stop()
			_, err := p.client.CallTool(context.Background(), &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "ok"})
			if status.Code(err) != codes.Unavailable {
				t.Errorf("got %v; want Unavailable", err)
			}
		}},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			for _, name := range []string{"grpc", "local"} {
				t.Run(name, func(t *testing.T) { c.check(t, paths[name](t)) })
			}
		})
	}
}

// BenchmarkCallTool compares one unary call over gRPC (TCP loopback, a Unix socket: what `up`
// did before issue 28) with the in-process call, each with the same interceptors and stats
// handlers (no-op telemetry).
func BenchmarkCallTool(b *testing.B) {
	req := &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "ok"}
	for _, via := range []string{"tcp", "unix", "local"} {
		b.Run(via, func(b *testing.B) {
			p := &probe{saw: make(chan handlerView)}
			tel := telemetry.NewForTest("bench", nil, nil, telemetry.PayloadPolicy{})
			var client toolmeshv1.ExecutorServiceClient
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var done chan struct{}
			switch via {
			case "local":
				l := server.NewLocal("executor", slog.New(slog.DiscardHandler), time.Second, tel.GRPCServerStats())
				toolmeshv1.RegisterExecutorServiceServer(l, p)
				done = make(chan struct{})
				go func() { defer close(done); _ = l.Run(ctx) }()
				client = Executor(l.Client(tel.GRPCClientStats()))
			default:
				addr := "127.0.0.1:0"
				if via == "unix" {
					addr = "unix:" + b.TempDir() + "/executor.sock"
				}
				g, err := server.NewGRPC(addr, slog.New(slog.DiscardHandler), time.Second, tel.GRPCServerOptions()...)
				if err != nil {
					b.Fatal(err)
				}
				toolmeshv1.RegisterExecutorServiceServer(g.Server, p)
				done = make(chan struct{})
				go func() { defer close(done); _ = g.Run(ctx) }()
				conn, err := grpc.NewClient(g.Addr(), append(server.DialOptions(), tel.GRPCDialOptions()...)...)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				client = toolmeshv1.NewExecutorServiceClient(conn)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.CallTool(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cancel()
			<-done
		})
	}
}
