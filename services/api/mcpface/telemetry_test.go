package mcpface

import (
	"context"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// TestSpans: each MCP request is a SERVER span with the MCP semantic-convention attributes; a
// traceparent in params._meta makes it part of the client's trace, and the call it makes to
// the tools handler is its child.
func TestSpans(t *testing.T) {
	tel, spans, metrics := testTelemetry(t)
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.echo")), harnessOptions{tel: tel})
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			spans.Reset()
			c := h.connect(t, CatalogPath, v, "")
			const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			req := mcp.CallToolRequest{}
			req.Params.Name = "srv__echo"
			req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": "00-" + traceID + "-" + parentID + "-01"}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.CallTool(ctx, req); err != nil {
				t.Fatal(err)
			}
			var call sdktrace.ReadOnlySpan
			for _, s := range spans.GetSpans().Snapshots() {
				if s.Name() == "tools/call srv__echo" {
					call = s
				}
			}
			if call == nil {
				t.Fatalf("no span tools/call srv__echo among %d", len(spans.GetSpans()))
			}
			if call.SpanKind() != trace.SpanKindServer || call.Parent().TraceID().String() != traceID || call.Parent().SpanID().String() != parentID {
				t.Errorf("span kind %v, parent %v: want a SERVER span under the client's %s/%s", call.SpanKind(), call.Parent(), traceID, parentID)
			}
			attrs := map[attribute.Key]string{}
			for _, a := range call.Attributes() {
				attrs[a.Key] = a.Value.Emit()
			}
			for k, want := range map[attribute.Key]string{
				"mcp.method.name": "tools/call", "gen_ai.tool.name": "srv__echo", "gen_ai.operation.name": "execute_tool",
				"mcp.protocol.version": v, "network.transport": "tcp", "toolmesh.tool.id": "srv.echo", "toolmesh.mcp.endpoint": "/mcp",
				"client.address": "127.0.0.1",
			} {
				if attrs[k] != want {
					t.Errorf("%s = %q, want %q", k, attrs[k], want)
				}
			}
			if attrs["jsonrpc.request.id"] == "" {
				t.Error("no jsonrpc.request.id")
			}
			h.tools.mu.Lock()
			got := h.tools.spans[len(h.tools.spans)-1]
			h.tools.mu.Unlock()
			if got.SpanID() != call.SpanContext().SpanID() {
				t.Errorf("the tools handler's context holds span %s, want the MCP span %s", got.SpanID(), call.SpanContext().SpanID())
			}
		})
	}
	var rm metricdata.ResourceMetrics
	if err := metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			found = found || m.Name == "mcp.server.operation.duration"
		}
	}
	if !found {
		t.Error("no mcp.server.operation.duration")
	}
}

// testTelemetry is the api's telemetry with its spans kept in memory and its metrics read by
// hand.
func testTelemetry(t testing.TB) (*telemetry.Service, *tracetest.InMemoryExporter, *sdkmetric.ManualReader) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	metrics := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return telemetry.NewForTest("api", tp, mp, telemetry.PayloadPolicy{}), spans, metrics
}
