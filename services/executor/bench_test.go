package executor

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// BenchmarkCallTool compares a direct held mcp-go call with the same call
// through the executor's gRPC API (bufconn), on one streamable HTTP server,
// and the executor's own cost with and without telemetry.
func BenchmarkCallTool(b *testing.B) {
	for _, era := range []struct{ name, version string }{{"legacy", mcp.ProtocolVersion20251125}, {"modern", ""}} {
		ts := newTestMCP("bench", 0)
		hh := newHTTPHarness(b, streamableHandler(fixed(ts)))
		url := "http://" + hh.addr + "/mcp"

		b.Run(era.name+"/direct", func(b *testing.B) {
			opts := []client.ClientOption{}
			if era.version != "" {
				opts = append(opts, client.WithProtocolVersion(era.version))
			}
			c, err := client.NewStreamableHttpClient(url)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range opts {
				o(c)
			}
			defer c.Close()
			ctx := context.Background()
			if err := c.Start(ctx); err != nil {
				b.Fatal(err)
			}
			req := mcp.InitializeRequest{}
			req.Params.ProtocolVersion = era.version
			req.Params.ClientInfo = clientInfo
			if _, err := c.Initialize(ctx, req); err != nil {
				b.Fatal(err)
			}
			call := mcp.CallToolRequest{}
			call.Params.Name = "add"
			call.Params.Arguments = map[string]any{"a": 1.0, "b": 2.0}
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.CallTool(ctx, call); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(era.name+"/executor", func(b *testing.B) {
			h := startExecutor(b, Config{Servers: map[string]mcpconfig.Server{
				"calc": {Transport: mcpconfig.TransportStreamableHTTP, URL: url, ProtocolVersion: era.version},
			}})
			h.waitReady(b)
			args, _ := structpb.NewStruct(map[string]any{"a": 1, "b": 2})
			req := &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "calc.add", Arguments: args}
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				if _, err := h.client.CallTool(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The executor's CallTool in-process (no gRPC), so that the cost of its own
		// telemetry stands out: inproc has none; -unsampled has telemetry as toolmesh runs
		// it without an exporter (spans never sampled, metrics kept); -sampled records
		// every span (and drops it: no exporter), the cost of tracing on.
		for _, tel := range []struct {
			name    string
			sampler sdktrace.Sampler // nil: no telemetry
		}{{"inproc", nil}, {"inproc-unsampled", sdktrace.NeverSample()}, {"inproc-sampled", sdktrace.AlwaysSample()}} {
			b.Run(era.name+"/"+tel.name, func(b *testing.B) {
				var ts *telemetry.Service
				if tel.sampler != nil {
					tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tel.sampler))
					mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
					b.Cleanup(func() {
						_ = tp.Shutdown(context.Background())
						_ = mp.Shutdown(context.Background())
					})
					ts = telemetry.NewForTest("toolmesh-executor", tp, mp, telemetry.PayloadPolicy{Limit: 1024})
				}
				h := startTracedExecutor(b, Config{Servers: map[string]mcpconfig.Server{
					"calc": {Transport: mcpconfig.TransportStreamableHTTP, URL: url, ProtocolVersion: era.version},
				}}, ts)
				h.waitReady(b)
				args, _ := structpb.NewStruct(map[string]any{"a": 1, "b": 2})
				req := &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "calc.add", Arguments: args}
				ctx := context.Background()
				b.ResetTimer()
				cpu := processCPU()
				for b.Loop() {
					if _, err := h.svc.CallTool(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
				// CPU time moves less than wall time when other work shares the machine.
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
		hh.kill()
	}
}

// processCPU is the user and system CPU time this process has used: the executor's and,
// here, the in-process test server's.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
