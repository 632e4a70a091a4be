package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/jsonrpcid"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Tool calls are traced and measured as the OpenTelemetry semantic conventions for MCP
// describe them (semconv v1.41 gen-ai/mcp.md): a SERVER span "tools/call {tool}" per call,
// the child of the trace context the client put in the request's params._meta (or, failing
// that, in the HTTP headers), and mcp.server.operation.duration per call.
//
// mcp-go's hooks see the JSON-RPC id, the outcome and protocol errors (an unknown tool, a
// handler error) but cannot change the context the tool handler gets; a tool handler
// middleware can, but sees neither. So the hooks open and close the span, and the
// middleware hands it to the handler. mcp-go gives both the same context for one request,
// which is how the middleware finds the span.

const scope = "github.com/toolmesh/toolmesh/mcpservers/serve"

// errTypeTool is the error.type of a call whose result has isError set.
const errTypeTool = "tool_error"

// callBuckets are semconv's buckets for MCP operations (10 ms … 300 s) with finer ones
// below: most of our tools answer in microseconds.
var callBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
	0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

// serverTelemetry traces and measures the tools/call requests an MCP server answers.
type serverTelemetry struct {
	tel      *telemetry.Service
	tracer   trace.Tracer
	payloads telemetry.PayloadPolicy
	duration metric.Float64Histogram
	series   sync.Map // seriesKey → metric.RecordOption, see seriesAttrs
}

// instrument installs tracing and metrics on s. Installing it twice on one server still
// gives one span per call.
func instrument(s *server.MCPServer, tel *telemetry.Service) {
	if tel == nil {
		return
	}
	st := &serverTelemetry{tel: tel, tracer: tel.Tracer(scope), payloads: tel.Payloads}
	var err error
	if st.duration, err = tel.Meter(scope).Float64Histogram("mcp.server.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of an MCP request as the server saw it, from receiving it until its result."),
		metric.WithExplicitBucketBoundaries(callBuckets...)); err != nil {
		st.duration, _ = metricnoop.Meter{}.Float64Histogram("")
	}
	hooks := s.GetHooks()
	if hooks == nil {
		hooks = &server.Hooks{}
		server.WithHooks(hooks)(s)
	}
	hooks.AddBeforeCallTool(st.begin)
	hooks.AddAfterCallTool(st.after)
	hooks.AddOnError(st.failed)
	s.Use(st.middleware)
}

// peer is how a request reached the server: network.transport and the client's address.
type peer struct {
	transport string // "tcp" or "pipe"
	addr      string
	port      int
}

type peerKey struct{}

var stdioPeer = &peer{transport: "pipe"}

func withPeer(ctx context.Context, p *peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// httpPeer is the peer of an HTTP request.
func httpPeer(r *http.Request) *peer {
	p := &peer{transport: "tcp"}
	if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		p.addr = host
		p.port, _ = strconv.Atoi(port)
	}
	return p
}

// call is one tools/call being answered, from the before hook to the after or error hook.
type call struct {
	span  trace.Span
	bag   baggage.Baggage
	tool  string
	start time.Time
}

// inflight maps the context mcp-go hands to a request's hooks and tool handler to its call.
var inflight sync.Map // context.Context → *call

func (st *serverTelemetry) begin(ctx context.Context, id any, req *mcp.CallToolRequest) {
	if _, ok := inflight.Load(ctx); ok {
		return // instrumented twice: the first hook's span covers the call
	}
	parent, link := st.remoteParent(ctx, req)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	if link.SpanContext.IsValid() {
		opts = append(opts, trace.WithLinks(link))
	}
	tool := req.Params.Name
	_, span := st.tracer.Start(parent, string(mcp.MethodToolsCall)+" "+tool, opts...)
	// One request's hooks run one after the other on one goroutine: Load then Store is safe.
	inflight.Store(ctx, &call{span: span, bag: baggage.FromContext(parent), tool: tool, start: time.Now()})
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.McpMethodNameKey.String(string(mcp.MethodToolsCall)),
		semconv.GenAIToolNameKey.String(tool), semconv.GenAIOperationNameExecuteTool)
	if rid := jsonrpcid.String(id); rid != "" {
		span.SetAttributes(semconv.JSONRPCRequestIDKey.String(rid))
	}
	if sess := server.ClientSessionFromContext(ctx); sess != nil && sess.SessionID() != "" {
		span.SetAttributes(semconv.McpSessionIDKey.String(sess.SessionID()))
	}
	if v := server.RequestProtocolVersion(ctx); v != "" {
		span.SetAttributes(semconv.McpProtocolVersionKey.String(v))
	}
	if p, ok := ctx.Value(peerKey{}).(*peer); ok {
		span.SetAttributes(semconv.NetworkTransportKey.String(p.transport))
		if p.addr != "" {
			span.SetAttributes(semconv.ClientAddressKey.String(p.addr), semconv.ClientPortKey.Int(p.port))
		}
	}
	if st.payloads.Record {
		args := []byte(req.Params.RawArguments)
		if len(args) == 0 {
			args, _ = json.Marshal(req.Params.Arguments)
		}
		span.SetAttributes(semconv.GenAIToolCallArgumentsKey.String(st.payloads.Cut(string(args))))
	}
}

// remoteParent is the context holding the caller's trace context: from params._meta (MCP
// 2026-07-28 makes that the place for it), else from the HTTP headers. When both are there
// and differ, the headers' is usually the client's HTTP span: it becomes a link.
func (st *serverTelemetry) remoteParent(ctx context.Context, req *mcp.CallToolRequest) (context.Context, trace.Link) {
	var fromHeader context.Context
	if req.Header.Get("traceparent") != "" {
		fromHeader = st.tel.Extract(ctx, propagation.HeaderCarrier(req.Header))
	}
	if m := req.Params.Meta; m != nil && m.AdditionalFields["traceparent"] != nil {
		fromMeta := st.tel.Extract(ctx, telemetry.MetaCarrier(m.AdditionalFields))
		var link trace.Link
		if fromHeader != nil {
			hsc, msc := trace.SpanContextFromContext(fromHeader), trace.SpanContextFromContext(fromMeta)
			if hsc.IsValid() && !hsc.Equal(msc) {
				link = trace.Link{SpanContext: hsc}
			}
		}
		return fromMeta, link
	}
	if fromHeader != nil {
		return fromHeader, trace.Link{}
	}
	return ctx, trace.Link{}
}

// middleware runs the tool handler inside the call's span (and the caller's baggage).
func (st *serverTelemetry) middleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		v, ok := inflight.Load(ctx)
		if !ok {
			return next(ctx, req)
		}
		c := v.(*call)
		defer func() {
			// Without mcp-go's recovery middleware around us, a panic skips the hooks.
			if p := recover(); p != nil {
				if _, ok := inflight.LoadAndDelete(ctx); ok {
					st.end(ctx, c, nil, "panic", fmt.Sprint("tool handler panicked: ", p))
				}
				panic(p)
			}
		}()
		hctx := trace.ContextWithSpan(ctx, c.span)
		if c.bag.Len() > 0 {
			hctx = baggage.ContextWithBaggage(hctx, c.bag)
		}
		return next(hctx, req)
	}
}

func (st *serverTelemetry) after(ctx context.Context, _ any, _ *mcp.CallToolRequest, result any) {
	v, ok := inflight.LoadAndDelete(ctx)
	if !ok {
		return
	}
	res, _ := result.(*mcp.CallToolResult)
	errType := ""
	if res != nil && res.IsError {
		errType = errTypeTool
	}
	st.end(ctx, v.(*call), res, errType, "the tool returned an error result")
}

// failed ends the call's span with the JSON-RPC error the server answers with.
func (st *serverTelemetry) failed(ctx context.Context, _ any, method mcp.MCPMethod, _ any, err error) {
	if method != mcp.MethodToolsCall {
		return
	}
	v, ok := inflight.LoadAndDelete(ctx)
	if !ok {
		return
	}
	c := v.(*call)
	errType, msg := "_OTHER", err.Error()
	if je, ok := err.(interface{ ToJSONRPCError() mcp.JSONRPCError }); ok {
		e := je.ToJSONRPCError().Error
		errType, msg = strconv.Itoa(e.Code), e.Message
		if c.span.IsRecording() {
			c.span.SetAttributes(semconv.RPCResponseStatusCodeKey.String(errType))
		}
	}
	st.end(ctx, c, nil, errType, msg)
}

// end finishes the call's span and records its duration.
func (st *serverTelemetry) end(ctx context.Context, c *call, res *mcp.CallToolResult, errType, msg string) {
	if c.span.IsRecording() {
		if errType != "" {
			c.span.SetAttributes(semconv.ErrorTypeKey.String(errType))
			c.span.SetStatus(otelcodes.Error, msg)
		}
		if res != nil && st.payloads.Record {
			if b, err := json.Marshal(res); err == nil {
				c.span.SetAttributes(semconv.GenAIToolCallResultKey.String(st.payloads.Cut(string(b))))
			}
		}
	}
	c.span.End()
	if st.duration.Enabled(ctx) {
		st.duration.Record(trace.ContextWithSpan(ctx, c.span), time.Since(c.start).Seconds(), st.seriesAttrs(c.tool, errType))
	}
}

// seriesKey names one series of mcp.server.operation.duration.
type seriesKey struct{ tool, errType string }

// seriesAttrs returns the attributes of one series, built once: building an attribute set
// sorts and hashes it, which would otherwise be done on every call.
func (st *serverTelemetry) seriesAttrs(tool, errType string) metric.RecordOption {
	k := seriesKey{tool, errType}
	if o, ok := st.series.Load(k); ok {
		return o.(metric.RecordOption)
	}
	attrs := []attribute.KeyValue{semconv.McpMethodNameKey.String(string(mcp.MethodToolsCall)), semconv.GenAIToolNameKey.String(tool)}
	if errType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
	}
	o, _ := st.series.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	return o.(metric.RecordOption)
}
