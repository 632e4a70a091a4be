package serve

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/mcpservers/internal/mcptesting"
)

// recorded is a telemetry.Service whose spans and metrics the test reads back.
type recorded struct {
	tel     *telemetry.Service
	spans   *tracetest.InMemoryExporter
	metrics *sdkmetric.ManualReader
}

func newRecorded(t *testing.T, payloads telemetry.PayloadPolicy) *recorded {
	t.Helper()
	r := &recorded{spans: tracetest.NewInMemoryExporter(), metrics: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.metrics))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	r.tel = telemetry.NewForTest("mcp-traced", tp, mp, payloads)
	return r
}

// span returns the one ended span called name and forgets every span recorded so far.
func (r *recorded) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range r.spans.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	r.spans.Reset()
	if len(found) != 1 {
		t.Fatalf("got %d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

// histogramCount is how many values the histogram called name recorded with all of want.
func (r *recorded) histogramCount(t *testing.T, name string, want ...attribute.KeyValue) uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("%s is a %T, want a float64 histogram", name, m.Data)
			}
			for _, dp := range h.DataPoints {
				if hasAll(dp.Attributes, want) {
					n += dp.Count
				}
			}
		}
	}
	return n
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// tracedServer has tools that report what their handler's context carries, and tools that
// fail each way a call can fail.
func tracedServer() *server.MCPServer {
	s := server.NewMCPServer("traced", "1.0.0", server.WithToolCapabilities(false), server.WithRecovery())
	s.AddTool(mcp.NewTool("span", mcp.WithString("text")), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(trace.SpanContextFromContext(ctx).SpanID().String() + " " +
			baggage.FromContext(ctx).Member("tenant").Value()), nil
	})
	s.AddTool(mcp.NewTool("fail"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultError("no"), nil
	})
	s.AddTool(mcp.NewTool("broken"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("broken")
	})
	s.AddTool(mcp.NewTool("panic"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		panic("boom")
	})
	return s
}

// The callers' trace contexts: one in _meta, another in the HTTP headers.
var (
	metaParent   = remoteSpan("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
	headerParent = remoteSpan("4bf92f3577b34da6a3ce929d0e0e4736", "1111111111111111")
)

func remoteSpan(traceID, spanID string) trace.SpanContext {
	tid, _ := trace.TraceIDFromHex(traceID)
	sid, _ := trace.SpanIDFromHex(spanID)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// transportTest is one way of reaching a traced server.
type transportTest struct {
	name          string
	netTransport  string
	wantSession   bool
	headerCapable bool
	// connect returns an initialized client; header, when set, is sent as traceparent on
	// every HTTP request.
	connect func(t *testing.T, s *server.MCPServer, tel *telemetry.Service, header string) *client.Client
}

func httpTransportTest(name, transportName string, wantSession bool, opts ...client.ClientOption) transportTest {
	return transportTest{name: name, netTransport: "tcp", wantSession: wantSession, headerCapable: true,
		connect: func(t *testing.T, s *server.MCPServer, tel *telemetry.Service, header string) *client.Client {
			addr := startHTTPServer(t, s, Options{Transport: transportName, Telemetry: tel})
			headers := map[string]string{}
			if header != "" {
				headers["traceparent"] = header
			}
			var tr transport.Interface
			var err error
			if transportName == TransportSSE {
				tr, err = transport.NewSSE(URL(addr, transportName), transport.WithHTTPClient(httpClient(t)), transport.WithHeaders(headers))
			} else {
				tr, err = transport.NewStreamableHTTP(URL(addr, transportName), transport.WithHTTPBasicClient(httpClient(t)), transport.WithHTTPHeaders(headers))
			}
			if err != nil {
				t.Fatal(err)
			}
			c := client.NewClient(tr, opts...)
			mcptesting.Init(t, c)
			return c
		}}
}

var stdioTransportTest = transportTest{name: "stdio", netTransport: "pipe", wantSession: true,
	connect: func(t *testing.T, s *server.MCPServer, tel *telemetry.Service, _ string) *client.Client {
		serverIn, clientOut := io.Pipe()
		clientIn, serverOut := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, s, Options{Transport: TransportStdio, Stdin: serverIn, Stdout: serverOut, Telemetry: tel})
		}()
		c := client.NewClient(transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v, want nil after cancel", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Run did not return 5s after cancel")
			}
			// Closing the pipes releases mcp-go's blocked stdin reader.
			serverIn.Close()
			serverOut.Close()
		})
		mcptesting.Init(t, c)
		return c
	}}

func telemetryTransports() []transportTest {
	return []transportTest{
		httpTransportTest("sse", TransportSSE, true),
		httpTransportTest("streamable-http", TransportStreamableHTTP, false),
		httpTransportTest("streamable-http legacy", TransportStreamableHTTP, true, client.WithProtocolVersion(mcp.ProtocolVersion20251125)),
		stdioTransportTest,
	}
}

func TestTelemetrySpans(t *testing.T) {
	tests := []struct {
		name        string
		tool        string
		meta        bool // the caller's trace context in _meta (metaParent, with baggage)
		header      bool // headerParent in the traceparent header
		httpOnly    bool
		wantParent  trace.SpanContext
		wantLink    bool
		wantErrType string // "" for success
	}{
		{name: "meta", tool: "span", meta: true, wantParent: metaParent},
		{name: "header fallback", tool: "span", header: true, httpOnly: true, wantParent: headerParent},
		{name: "meta wins, header linked", tool: "span", meta: true, header: true, httpOnly: true, wantParent: metaParent, wantLink: true},
		{name: "no trace context", tool: "span"},
		{name: "tool error", tool: "fail", meta: true, wantParent: metaParent, wantErrType: "tool_error"},
		{name: "handler error", tool: "broken", meta: true, wantParent: metaParent, wantErrType: "-32603"},
		{name: "unknown tool", tool: "nope", meta: true, wantParent: metaParent, wantErrType: "-32602"},
		{name: "handler panic", tool: "panic", meta: true, wantParent: metaParent, wantErrType: "panic"},
	}
	for _, tr := range telemetryTransports() {
		t.Run(tr.name, func(t *testing.T) {
			rec := newRecorded(t, telemetry.PayloadPolicy{Limit: 1024})
			s := tracedServer()
			clients := map[bool]*client.Client{false: tr.connect(t, s, rec.tel, "")}
			if tr.headerCapable {
				// A second server: a client's headers are fixed when it is built.
				clients[true] = tr.connect(t, tracedServer(), rec.tel, traceparent(headerParent))
			}
			for _, tt := range tests {
				if tt.httpOnly && !tr.headerCapable {
					continue
				}
				t.Run(tt.name, func(t *testing.T) {
					req := mcp.CallToolRequest{}
					req.Params.Name = tt.tool
					if tt.meta {
						req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{
							"traceparent": traceparent(metaParent), "baggage": "tenant=acme"}}
					}
					ctx, cancel := context.WithTimeout(context.Background(), mcptesting.Timeout)
					defer cancel()
					res, callErr := clients[tt.header].CallTool(ctx, req)
					got := rec.span(t, "tools/call "+tt.tool)

					if got.SpanKind != trace.SpanKindServer {
						t.Errorf("span kind = %v, want server", got.SpanKind)
					}
					if tt.wantParent.IsValid() {
						if got.Parent.SpanID() != tt.wantParent.SpanID() || got.SpanContext.TraceID() != tt.wantParent.TraceID() {
							t.Errorf("parent = %s/%s, want %s/%s", got.SpanContext.TraceID(), got.Parent.SpanID(), tt.wantParent.TraceID(), tt.wantParent.SpanID())
						}
					} else if got.Parent.IsValid() {
						t.Errorf("parent = %s, want a root span", got.Parent.SpanID())
					}
					if gotLink := len(got.Links) == 1 && got.Links[0].SpanContext.SpanID() == headerParent.SpanID(); gotLink != tt.wantLink || (!tt.wantLink && len(got.Links) > 0) {
						t.Errorf("links = %v, want a link to the header's span: %v", got.Links, tt.wantLink)
					}

					a := attrs(got)
					want := map[attribute.Key]string{
						"mcp.method.name":       "tools/call",
						"gen_ai.tool.name":      tt.tool,
						"gen_ai.operation.name": "execute_tool",
						"network.transport":     tr.netTransport,
					}
					if tr.netTransport == "tcp" {
						want["client.address"] = "127.0.0.1"
					}
					if tt.wantErrType != "" {
						want["error.type"] = tt.wantErrType
					}
					for k, v := range want {
						if a[k].Emit() != v {
							t.Errorf("%s = %q, want %q", k, a[k].Emit(), v)
						}
					}
					if tt.wantErrType == "" {
						if _, ok := a["error.type"]; ok {
							t.Errorf("error.type = %q, want none", a["error.type"].Emit())
						}
					}
					if a["jsonrpc.request.id"].Emit() == "" {
						t.Error("jsonrpc.request.id missing")
					}
					if _, ok := a["mcp.session.id"]; ok != tr.wantSession {
						t.Errorf("mcp.session.id present = %v, want %v", ok, tr.wantSession)
					}
					for _, k := range []attribute.Key{"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
						if _, ok := a[k]; ok {
							t.Errorf("%s recorded without the payload opt-in", k)
						}
					}
					if wantErr := tt.wantErrType != ""; (got.Status.Code == otelcodes.Error) != wantErr {
						t.Errorf("status = %v, want error %v", got.Status, wantErr)
					}

					switch {
					case tt.wantErrType == "" || tt.wantErrType == "tool_error":
						if callErr != nil {
							t.Fatalf("CallTool: %v", callErr)
						}
						if res.IsError != (tt.wantErrType == "tool_error") {
							t.Errorf("IsError = %v", res.IsError)
						}
					case callErr == nil:
						t.Errorf("CallTool = %v, want a protocol error", res)
					}
					if tt.tool == "span" {
						// The handler ran inside the server span, with the caller's baggage.
						want := got.SpanContext.SpanID().String()
						if tt.meta {
							want += " acme"
						} else {
							want += " "
						}
						if text := mcptesting.Text(res); text != want {
							t.Errorf("handler saw %q, want %q", text, want)
						}
					}
				})
			}
			if n := rec.histogramCount(t, "mcp.server.operation.duration",
				attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", "fail"),
				attribute.String("error.type", "tool_error")); n != 1 {
				t.Errorf("mcp.server.operation.duration of failed fail calls: %d values, want 1", n)
			}
			if n := rec.histogramCount(t, "mcp.server.operation.duration", attribute.String("gen_ai.tool.name", "span")); n == 0 {
				t.Error("mcp.server.operation.duration recorded no span calls")
			}
			assertNoInflight(t)
		})
	}
}

func assertNoInflight(t *testing.T) {
	t.Helper()
	n := 0
	inflight.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d calls still in flight after every call returned", n)
	}
}

func TestTelemetryPayloads(t *testing.T) {
	tests := []struct {
		name     string
		payloads telemetry.PayloadPolicy
		wantArgs string // "" for absent
		wantRes  string // a prefix; "" for absent
	}{
		{"off by default", telemetry.PayloadPolicy{Limit: 1024}, "", ""},
		{"recorded", telemetry.PayloadPolicy{Record: true, Limit: 1024}, `{"text":"secret"}`, `{"content":[{"type":"text","text":"`},
		{"cut", telemetry.PayloadPolicy{Record: true, Limit: 8}, `{"text":…`, `{"conten…`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorded(t, tt.payloads)
			c := stdioTransportTest.connect(t, tracedServer(), rec.tel, "")
			mcptesting.Call(t, c, "span", map[string]any{"text": "secret"})
			a := attrs(rec.span(t, "tools/call span"))
			args, gotArgs := a["gen_ai.tool.call.arguments"]
			res, gotRes := a["gen_ai.tool.call.result"]
			if gotArgs != (tt.wantArgs != "") || args.Emit() != tt.wantArgs {
				t.Errorf("arguments = %q (present %v), want %q", args.Emit(), gotArgs, tt.wantArgs)
			}
			if gotRes != (tt.wantRes != "") || !strings.HasPrefix(res.Emit(), tt.wantRes) {
				t.Errorf("result = %q (present %v), want it to start with %q", res.Emit(), gotRes, tt.wantRes)
			}
		})
	}
}

// TestTelemetryInstalledTwice checks that one call still makes one span.
func TestTelemetryInstalledTwice(t *testing.T) {
	rec := newRecorded(t, telemetry.PayloadPolicy{})
	s := tracedServer()
	_ = Handler(s, Options{Telemetry: rec.tel})
	c := httpTransportTest("sse", TransportSSE, true).connect(t, s, rec.tel, "")
	res := mcptesting.Call(t, c, "span", nil)
	got := rec.span(t, "tools/call span")
	if want := got.SpanContext.SpanID().String() + " "; mcptesting.Text(res) != want {
		t.Errorf("handler saw %q, want %q", mcptesting.Text(res), want)
	}
	assertNoInflight(t)
}

// TestTelemetryOff checks that a server without Telemetry gets no hooks or middleware.
func TestTelemetryOff(t *testing.T) {
	s := tracedServer()
	_ = Handler(s, Options{})
	if s.GetHooks() != nil {
		t.Error("hooks installed without Telemetry")
	}
}
