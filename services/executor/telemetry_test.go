package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/mcpservers/serve"
)

// envSpanFile makes the re-executed test binary a stdio MCP server served by
// mcpservers/serve with telemetry, writing its spans to this file.
const envSpanFile = "EXECUTOR_TEST_SPAN_FILE"

// spanRecord is what the tests check of a span, wherever it was recorded.
type spanRecord struct {
	Name     string
	Kind     string
	TraceID  string
	SpanID   string
	ParentID string
	Links    []string // span ids
	Status   string
	Attrs    map[string]string
}

func recordOf(s sdktrace.ReadOnlySpan) spanRecord {
	r := spanRecord{Name: s.Name(), Kind: s.SpanKind().String(), TraceID: s.SpanContext().TraceID().String(),
		SpanID: s.SpanContext().SpanID().String(), Status: s.Status().Code.String(), Attrs: map[string]string{}}
	if s.Parent().IsValid() {
		r.ParentID = s.Parent().SpanID().String()
	}
	for _, l := range s.Links() {
		r.Links = append(r.Links, l.SpanContext.SpanID().String())
	}
	for _, kv := range s.Attributes() {
		r.Attrs[string(kv.Key)] = kv.Value.Emit()
	}
	return r
}

// recorded is a telemetry.Service whose spans and metrics the test reads back.
type recorded struct {
	tel     *telemetry.Service
	spans   *tracetest.InMemoryExporter
	metrics *sdkmetric.ManualReader
}

func newRecorded(t *testing.T, name string, payloads telemetry.PayloadPolicy) *recorded {
	t.Helper()
	r := &recorded{spans: tracetest.NewInMemoryExporter(), metrics: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.metrics))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	r.tel = telemetry.NewForTest(name, tp, mp, payloads)
	return r
}

func (r *recorded) records() []spanRecord {
	var out []spanRecord
	for _, s := range r.spans.GetSpans().Snapshots() {
		out = append(out, recordOf(s))
	}
	return out
}

// waitSpans returns the spans recorded so far once one of them satisfies keep.
func (r *recorded) waitSpans(t *testing.T, keep func(spanRecord) bool) []spanRecord {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		spans := r.records()
		if len(findSpans(spans, keep)) > 0 || time.Now().After(deadline) {
			return spans
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// collect returns the data points of the metric called name.
func (r *recorded) collect(t *testing.T, name string) metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	return nil
}

// histogramCount is how many values the histogram called name recorded with all of want.
func (r *recorded) histogramCount(t *testing.T, name string, want ...attribute.KeyValue) uint64 {
	t.Helper()
	var n uint64
	h, _ := r.collect(t, name).(metricdata.Histogram[float64])
	for _, dp := range h.DataPoints {
		if hasAll(dp.Attributes, want) {
			n += dp.Count
		}
	}
	return n
}

// gaugeValue is the value the int64 gauge called name reported with all of want, if any.
func (r *recorded) gaugeValue(t *testing.T, name string, want ...attribute.KeyValue) (int64, bool) {
	t.Helper()
	g, _ := r.collect(t, name).(metricdata.Gauge[int64])
	for _, dp := range g.DataPoints {
		if hasAll(dp.Attributes, want) {
			return dp.Value, true
		}
	}
	return 0, false
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func findSpans(spans []spanRecord, keep func(spanRecord) bool) []spanRecord {
	var out []spanRecord
	for _, s := range spans {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// addBrokenTool adds a tool whose handler fails, so the server answers with a JSON-RPC error.
func addBrokenTool(ts *testMCP) {
	ts.srv.AddTool(mcp.NewTool("broken", mcp.WithDescription("Fails with a protocol error")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, errors.New("broken")
		})
}

// serveTracedStdio is the re-executed test binary's main as a traced stdio server.
func serveTracedStdio() int {
	f, err := os.OpenFile(os.Getenv(envSpanFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "span file:", err)
		return 1
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(&fileExporter{f: f}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ts := newTestMCP("stdio", 0)
	addBrokenTool(ts)
	tel := telemetry.NewForTest("mcp-test", tp, nil, telemetry.PayloadPolicy{})
	if err := serve.Run(context.Background(), ts.srv, serve.Options{Transport: serve.TransportStdio, Telemetry: tel}); err != nil {
		fmt.Fprintln(os.Stderr, "stdio server:", err)
		return 1
	}
	return 0
}

// fileExporter writes spans to a file as JSON lines, for the parent test to read.
type fileExporter struct {
	mu sync.Mutex
	f  *os.File
}

func (e *fileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		b, err := json.Marshal(recordOf(s))
		if err != nil {
			return err
		}
		if _, err := e.f.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

func (e *fileExporter) Shutdown(context.Context) error { return e.f.Close() }

func readSpanFile(t *testing.T, path string) []spanRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("span file: %v", err)
	}
	defer f.Close()
	var out []spanRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r spanRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("span file line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// tracedServer is a test MCP server served by mcpservers/serve with telemetry over one
// transport; spans returns what the server recorded.
type tracedServer struct {
	cfg   mcpconfig.Server
	spans func() []spanRecord
}

func startTracedServer(t *testing.T, transport string) tracedServer {
	t.Helper()
	if transport == serve.TransportStdio {
		cfg, _ := stdioServer(t, 0)
		path := t.TempDir() + "/spans.jsonl"
		cfg.Env[envSpanFile] = path
		return tracedServer{cfg: cfg, spans: func() []spanRecord { return readSpanFile(t, path) }}
	}
	rec := newRecorded(t, "mcp-test", telemetry.PayloadPolicy{})
	ts := newTestMCP(transport, 0)
	addBrokenTool(ts)
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve.Run(ctx, ts.srv, serve.Options{Transport: transport, Telemetry: rec.tel, ShutdownTimeout: time.Second,
			OnListen: func(a net.Addr) { addrc <- a }})
	}()
	t.Cleanup(func() {
		ts.stop()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve.Run: %v", err)
		}
	})
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("serve.Run: %v", err)
	}
	tr := mcpconfig.TransportSSE
	if transport == serve.TransportStreamableHTTP {
		tr = mcpconfig.TransportStreamableHTTP
	}
	return tracedServer{cfg: mcpconfig.Server{Transport: tr, URL: serve.URL(addr, transport)}, spans: rec.records}
}

// TestTelemetryCalls checks the executor's tools/call spans and metrics, and that the
// trace continues in our MCP servers over every transport: their span's parent is the
// executor's span.
func TestTelemetryCalls(t *testing.T) {
	calls := []struct {
		name        string
		tool        string
		args        map[string]any
		timeout     time.Duration
		wantCode    codes.Code
		wantErrType string // "" for success
		wantServer  bool   // check the server's span
	}{
		{name: "ok", tool: "add", args: map[string]any{"a": 2, "b": 3}, wantServer: true},
		{name: "tool error", tool: "fail", wantErrType: "tool_error", wantServer: true},
		{name: "protocol error", tool: "broken", wantCode: codes.Unknown, wantErrType: "-32603", wantServer: true},
		{name: "timeout", tool: "slow", args: map[string]any{"ms": 5000}, timeout: 100 * time.Millisecond,
			wantCode: codes.DeadlineExceeded, wantErrType: "timeout"},
	}
	for _, transport := range []string{serve.TransportSSE, serve.TransportStreamableHTTP, serve.TransportStdio} {
		t.Run(transport, func(t *testing.T) {
			srv := startTracedServer(t, transport)
			rec := newRecorded(t, "toolmesh-executor", telemetry.PayloadPolicy{Limit: 1024})
			h := startTracedExecutor(t, Config{Servers: map[string]mcpconfig.Server{"calc": srv.cfg}}, rec.tel)
			h.waitReady(t)

			for _, tt := range calls {
				t.Run(tt.name, func(t *testing.T) {
					rec.spans.Reset()
					args, _ := structpb.NewStruct(tt.args)
					req := &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "calc." + tt.tool, Arguments: args}
					if tt.timeout > 0 {
						req.Timeout = durationpb.New(tt.timeout)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_, err := h.client.CallTool(ctx, req)
					if got := status.Code(err); got != tt.wantCode {
						t.Fatalf("CallTool: %v, want code %v", err, tt.wantCode)
					}

					// otelgrpc ends its span after the response is on its way.
					spans := rec.waitSpans(t, func(s spanRecord) bool { return s.Name == "toolmesh.v1.ExecutorService/CallTool" })
					calls := findSpans(spans, func(s spanRecord) bool { return s.Name == "tools/call "+tt.tool })
					if len(calls) != 1 {
						t.Fatalf("got %d client spans tools/call %s, want 1 (all: %v)", len(calls), tt.tool, spans)
					}
					cs := calls[0]
					if cs.Kind != "client" {
						t.Errorf("span kind = %s, want client", cs.Kind)
					}
					grpcSpans := findSpans(spans, func(s spanRecord) bool { return s.SpanID == cs.ParentID })
					if len(grpcSpans) != 1 || grpcSpans[0].Name != "toolmesh.v1.ExecutorService/CallTool" {
						t.Errorf("parent of the client span = %v, want the executor's gRPC server span", grpcSpans)
					}
					want := map[string]string{
						"mcp.method.name":       "tools/call",
						"gen_ai.tool.name":      tt.tool,
						"gen_ai.operation.name": "execute_tool",
						"toolmesh.mcp.server":   "calc",
						"network.transport":     "tcp",
						"mcp.protocol.version":  mcp.LATEST_PROTOCOL_VERSION,
						"error.type":            tt.wantErrType,
					}
					if transport == serve.TransportStdio {
						want["network.transport"] = "pipe"
					} else {
						want["server.address"] = "127.0.0.1"
					}
					if transport == serve.TransportSSE {
						want["mcp.session.id"] = "*"
					}
					if strings.HasPrefix(tt.wantErrType, "-") {
						want["rpc.response.status_code"] = tt.wantErrType
					}
					for k, v := range want {
						got, ok := cs.Attrs[k]
						switch {
						case v == "" && ok:
							t.Errorf("%s = %q, want none", k, got)
						case v == "*" && got == "", v != "" && v != "*" && got != v:
							t.Errorf("%s = %q, want %q", k, got, v)
						}
					}
					if cs.Attrs["jsonrpc.request.id"] == "" && tt.wantErrType != "timeout" {
						t.Error("jsonrpc.request.id missing")
					}
					if transport != serve.TransportStdio && cs.Attrs["server.port"] == "" {
						t.Error("server.port missing")
					}
					for _, k := range []string{"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
						if _, ok := cs.Attrs[k]; ok {
							t.Errorf("%s recorded without the payload opt-in", k)
						}
					}
					if wantStatus := map[bool]string{true: "Error", false: "Unset"}[tt.wantErrType != ""]; cs.Status != wantStatus {
						t.Errorf("status = %s, want %s", cs.Status, wantStatus)
					}
					if !tt.wantServer {
						return
					}

					// The server continued the trace from _meta: its span is the child of ours.
					ss := findSpans(srv.spans(), func(s spanRecord) bool { return s.Name == "tools/call "+tt.tool })
					if len(ss) == 0 {
						t.Fatal("the server recorded no span for the call")
					}
					got := ss[len(ss)-1]
					if got.Kind != "server" || got.TraceID != cs.TraceID || got.ParentID != cs.SpanID {
						t.Errorf("server span %s trace %s parent %s, want a server span in trace %s under %s",
							got.Kind, got.TraceID, got.ParentID, cs.TraceID, cs.SpanID)
					}
					if got.Attrs["error.type"] != tt.wantErrType {
						t.Errorf("server error.type = %q, want %q", got.Attrs["error.type"], tt.wantErrType)
					}
					if transport != serve.TransportStdio {
						// The traceparent header is the executor's HTTP span, a child of ours: linked.
						httpSpans := findSpans(spans, func(s spanRecord) bool { return s.ParentID == cs.SpanID && s.Kind == "client" })
						if len(httpSpans) != 1 || len(got.Links) != 1 || got.Links[0] != httpSpans[0].SpanID {
							t.Errorf("server span links %v, want the executor's HTTP span %v", got.Links, httpSpans)
						}
					}
				})
			}

			for _, m := range []struct {
				tool, errType string
			}{{"add", ""}, {"fail", "tool_error"}, {"broken", "-32603"}, {"slow", "timeout"}} {
				want := []attribute.KeyValue{attribute.String("mcp.method.name", "tools/call"),
					attribute.String("gen_ai.tool.name", m.tool), attribute.String("toolmesh.mcp.server", "calc")}
				if m.errType != "" {
					want = append(want, attribute.String("error.type", m.errType))
				}
				if n := rec.histogramCount(t, "mcp.client.operation.duration", want...); n != 1 {
					t.Errorf("mcp.client.operation.duration %v: %d values, want 1", want, n)
				}
			}
			for _, method := range []string{"initialize", "tools/list"} {
				if n := rec.histogramCount(t, "mcp.client.operation.duration", attribute.String("mcp.method.name", method)); n == 0 {
					t.Errorf("mcp.client.operation.duration recorded no %s", method)
				}
			}
			if v, ok := rec.gaugeValue(t, "toolmesh.mcp.sessions", attribute.String("toolmesh.mcp.server", "calc"),
				attribute.String("toolmesh.mcp.session.state", "ready")); !ok || v != 1 {
				t.Errorf("toolmesh.mcp.sessions{calc, ready} = %d (reported %v), want 1", v, ok)
			}
		})
	}
}

// TestTelemetryPayloads checks that tool arguments and results are on the span only when
// asked for, and cut to the limit.
func TestTelemetryPayloads(t *testing.T) {
	tests := []struct {
		name     string
		payloads telemetry.PayloadPolicy
		wantArgs string // "" for absent
		wantRes  string // in the result; "" for absent
	}{
		{"off by default", telemetry.PayloadPolicy{Limit: 1024}, "", ""},
		{"recorded", telemetry.PayloadPolicy{Record: true, Limit: 1024}, `{"a":2,"b":3}`, `"content":[{"type":"text","text":"5"}]`},
		{"cut", telemetry.PayloadPolicy{Record: true, Limit: 8}, `{"a":2,"…`, `…`},
	}
	ts := newTestMCP("payloads", 0)
	hh := newHTTPHarness(t, streamableHandler(fixed(ts)))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorded(t, "toolmesh-executor", tt.payloads)
			h := startTracedExecutor(t, Config{Servers: map[string]mcpconfig.Server{
				"calc": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"}}}, rec.tel)
			h.waitReady(t)
			if _, err := call(t, h, "calc.add", map[string]any{"a": 2, "b": 3}); err != nil {
				t.Fatal(err)
			}
			spans := findSpans(rec.records(), func(s spanRecord) bool { return s.Name == "tools/call add" })
			if len(spans) != 1 {
				t.Fatalf("got %d spans tools/call add, want 1", len(spans))
			}
			args, gotArgs := spans[0].Attrs["gen_ai.tool.call.arguments"]
			res, gotRes := spans[0].Attrs["gen_ai.tool.call.result"]
			if gotArgs != (tt.wantArgs != "") || args != tt.wantArgs {
				t.Errorf("arguments = %q (present %v), want %q", args, gotArgs, tt.wantArgs)
			}
			if gotRes != (tt.wantRes != "") || !strings.Contains(res, tt.wantRes) || len(res) > tt.payloads.Limit+len("…") {
				t.Errorf("result = %q (present %v), want at most %d bytes holding %q", res, gotRes, tt.payloads.Limit, tt.wantRes)
			}
		})
	}
}

// TestTelemetrySessions checks toolmesh.mcp.sessions and mcp.client.session.duration as a
// server goes away.
func TestTelemetrySessions(t *testing.T) {
	ts := newTestMCP("sessions", 0)
	hh := newHTTPHarness(t, sseHandler(fixed(ts)))
	rec := newRecorded(t, "toolmesh-executor", telemetry.PayloadPolicy{})
	h := startTracedExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"calc": {Transport: mcpconfig.TransportSSE, URL: "http://" + hh.addr + "/sse"}}}, rec.tel)
	h.waitReady(t)
	server := attribute.String("toolmesh.mcp.server", "calc")
	if v, ok := rec.gaugeValue(t, "toolmesh.mcp.sessions", server, attribute.String("toolmesh.mcp.session.state", "ready")); !ok || v != 1 {
		t.Errorf("sessions{ready} = %d (reported %v), want 1", v, ok)
	}

	hh.kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ok, _ := h.svc.Ready(); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still ready 10s after the server was killed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := rec.gaugeValue(t, "toolmesh.mcp.sessions", server, attribute.String("toolmesh.mcp.session.state", "ready")); ok {
		t.Error("sessions{ready} still reported after the server was killed")
	}
	// The run loop records the session once the broken connection is closed.
	for {
		n := rec.histogramCount(t, "mcp.client.session.duration", server, attribute.String("network.transport", "tcp"),
			attribute.String("error.type", "unavailable"))
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mcp.client.session.duration{error.type=unavailable}: %d values, want 1", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTelemetryNotSampled checks that with sampling off (no exporter) the trace context
// still reaches the server, unsampled, in the traceparent header, but not in _meta.
func TestTelemetryNotSampled(t *testing.T) {
	var gotMeta map[string]any
	var gotHeader string
	var mu sync.Mutex
	ts := newTestMCP("unsampled", 0)
	ts.srv.AddTool(mcp.NewTool("meta"), func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if r.Params.Meta != nil {
			gotMeta = r.Params.Meta.AdditionalFields
		}
		gotHeader = r.Header.Get("traceparent")
		return mcp.NewToolResultText("ok"), nil
	})
	hh := newHTTPHarness(t, streamableHandler(fixed(ts)))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel := telemetry.NewForTest("toolmesh-executor", tp, nil, telemetry.PayloadPolicy{Record: true, Limit: 1024})
	h := startTracedExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"calc": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"}}}, tel)
	h.waitReady(t)
	if _, err := call(t, h, "calc.meta", nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	meta, header := gotMeta, gotHeader
	mu.Unlock()
	parts := strings.Split(header, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || parts[3] != "00" {
		t.Errorf("traceparent header = %q, want an unsampled W3C traceparent", header)
	}
	if v, ok := meta["traceparent"]; ok {
		t.Errorf("_meta traceparent = %v, want none for an unsampled call", v)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans exported with sampling off", n)
	}
}
