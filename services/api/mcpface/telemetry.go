package mcpface

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/internal/jsonrpcid"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Every MCP request the face answers is a SERVER span "{mcp.method.name} {tool}" with the
// attributes of the OpenTelemetry semantic conventions for MCP (semconv v1.41 gen-ai/mcp.md),
// and counts in mcp.server.operation.duration. Its parent is the trace context the client put
// in the request's params._meta (as MCP 2026-07-28 asks), linking the REST port's span of the
// HTTP request; without one, that HTTP span (which continues a traceparent header) is the
// parent. The call the span makes to the executor is its child.
//
// mcp-go's hooks see the request and its outcome but cannot change the context the tool
// handler gets; the handler finds its span by that context, which mcp-go hands to the hooks
// and the handler of one request alike (as in mcpservers/serve).

const scope = "github.com/toolmesh/toolmesh/services/api/mcpface"

// Attribute keys of our own; the others are semconv's.
const (
	attrView     = attribute.Key("toolmesh.mcp.endpoint") // the view's path: /mcp, /mcp/search, ...
	attrToolID   = attribute.Key("toolmesh.tool.id")      // the toolmesh id of the tool called
	attrCallCode = attribute.Key("toolmesh.call.code")    // the gRPC code of a failed call
)

// errTypeTool is the error.type of a call whose result has isError set.
const errTypeTool = "tool_error"

// buckets are semconv's for MCP operations (10 ms … 300 s) with finer ones below.
var buckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
	0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

type instruments struct {
	tel      *telemetry.Service
	tracer   trace.Tracer
	duration metric.Float64Histogram
	inflight sync.Map // context.Context → *request
	series   sync.Map // seriesKey → metric.RecordOption
}

type request struct {
	span   trace.Span
	method string
	view   string
	start  time.Time
}

func newInstruments(tel *telemetry.Service) *instruments {
	ins := &instruments{tel: tel, tracer: tel.Tracer(scope)}
	var err error
	if ins.duration, err = tel.Meter(scope).Float64Histogram("mcp.server.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of an MCP request the api's MCP endpoints answered, from receiving it until its result."),
		metric.WithExplicitBucketBoundaries(buckets...)); err != nil {
		ins.duration, _ = metricnoop.Meter{}.Float64Histogram("")
	}
	return ins
}

// install traces and measures the requests of the view at path.
func (ins *instruments) install(h *server.Hooks, path string) {
	h.AddBeforeAny(func(ctx context.Context, id any, method mcp.MCPMethod, message any) {
		ins.begin(ctx, path, id, method, message)
	})
	h.AddOnSuccess(func(ctx context.Context, _ any, _ mcp.MCPMethod, _ any, result any) { ins.end(ctx, result, nil) })
	h.AddOnError(func(ctx context.Context, _ any, _ mcp.MCPMethod, _ any, err error) { ins.end(ctx, nil, err) })
}

func (ins *instruments) begin(ctx context.Context, view string, id any, method mcp.MCPMethod, message any) {
	if _, ok := ins.inflight.Load(ctx); ok {
		return
	}
	tool := ""
	if r, ok := message.(*mcp.CallToolRequest); ok {
		tool = r.Params.Name
	}
	session := ""
	if s := server.ClientSessionFromContext(ctx); s != nil {
		session = s.SessionID()
	}
	version := server.RequestProtocolVersion(ctx)
	if p := peerOf(ctx); version == "" && p != nil {
		version = p.protocol
	}
	ins.start(ctx, view, id, method, tool, session, version)
}

// serverSpan is how every request's span starts, made once: it is on every request's path.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// start opens the span of a request and keeps it until end: what begin reads from mcp-go's
// context, the short path for tools/call (shortcall.go) gives from the request it read.
// session is the 2025-era session id ("" for none), version the request's protocol version.
func (ins *instruments) start(ctx context.Context, view string, id any, method mcp.MCPMethod, tool, session, version string) {
	name := string(method)
	if method == mcp.MethodToolsCall {
		name += " " + tool
	}
	opts := serverSpan
	p := peerOf(ctx)
	if p != nil && p.httpSpan.IsValid() && !p.httpSpan.Equal(trace.SpanContextFromContext(ctx)) {
		opts = []trace.SpanStartOption{serverSpan[0], trace.WithLinks(trace.Link{SpanContext: p.httpSpan})}
	}
	_, span := ins.tracer.Start(ctx, name, opts...)
	ins.inflight.Store(ctx, &request{span: span, method: string(method), view: view, start: time.Now()})
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.McpMethodNameKey.String(string(method)), attrView.String(view),
		semconv.NetworkTransportKey.String("tcp"), semconv.NetworkProtocolName("http"))
	if tool != "" {
		span.SetAttributes(semconv.GenAIToolNameKey.String(tool), semconv.GenAIOperationNameExecuteTool)
	}
	if rid := jsonrpcid.String(id); rid != "" {
		span.SetAttributes(semconv.JSONRPCRequestIDKey.String(rid))
	}
	if session != "" {
		span.SetAttributes(semconv.McpSessionIDKey.String(session))
	}
	if version != "" {
		span.SetAttributes(semconv.McpProtocolVersionKey.String(version))
	}
	if p != nil && p.addr != "" {
		span.SetAttributes(semconv.ClientAddressKey.String(p.addr), semconv.ClientPortKey.Int(p.port))
	}
}

func (ins *instruments) end(ctx context.Context, result any, err error) {
	v, ok := ins.inflight.LoadAndDelete(ctx)
	if !ok {
		return
	}
	r := v.(*request)
	errType := ""
	switch {
	case err != nil:
		errType, msg := "_OTHER", err.Error()
		if je, ok := err.(interface{ ToJSONRPCError() mcp.JSONRPCError }); ok {
			e := je.ToJSONRPCError().Error
			errType, msg = strconv.Itoa(e.Code), e.Message
			if r.span.IsRecording() {
				r.span.SetAttributes(semconv.RPCResponseStatusCodeKey.String(errType))
			}
		}
		if r.span.IsRecording() {
			r.span.SetAttributes(semconv.ErrorTypeKey.String(errType))
			r.span.SetStatus(otelcodes.Error, msg)
		}
	default:
		if res, ok := result.(*mcp.CallToolResult); ok && res.IsError {
			errType = errTypeTool
			if r.span.IsRecording() {
				r.span.SetAttributes(semconv.ErrorTypeKey.String(errType))
				r.span.SetStatus(otelcodes.Error, "the tool returned an error result")
			}
		}
	}
	r.span.End()
	if ins.duration.Enabled(ctx) {
		ins.duration.Record(trace.ContextWithSpan(ctx, r.span), time.Since(r.start).Seconds(), ins.seriesAttrs(r.method, r.view, errType))
	}
}

// callContext is ctx with the request's span in it, so that the call it makes to the executor
// is the span's child; id is the toolmesh id of the tool called.
func (ins *instruments) callContext(ctx context.Context, id string) context.Context {
	v, ok := ins.inflight.Load(ctx)
	if !ok {
		return ctx
	}
	span := v.(*request).span
	if span.IsRecording() {
		span.SetAttributes(attrToolID.String(id))
	}
	return trace.ContextWithSpan(ctx, span)
}

// noteCode records the gRPC code of a failed call on the span in ctx.
func noteCode(ctx context.Context, code codes.Code) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrCallCode.String(code.String()))
	}
}

// seriesKey names one series of mcp.server.operation.duration. The tool is not in it: the
// catalog may hold thousands, each a series of its own.
type seriesKey struct{ method, view, errType string }

func (ins *instruments) seriesAttrs(method, view, errType string) metric.RecordOption {
	k := seriesKey{method, view, errType}
	if o, ok := ins.series.Load(k); ok {
		return o.(metric.RecordOption)
	}
	attrs := []attribute.KeyValue{semconv.McpMethodNameKey.String(method), attrView.String(view)}
	if errType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
	}
	o, _ := ins.series.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	return o.(metric.RecordOption)
}

// metaPropagator reads the trace context a client put in a request's params._meta
// (traceparent, tracestate, baggage) before mcp-go hands the request to the hooks.
type metaPropagator struct{ tel *telemetry.Service }

func (metaPropagator) InjectMeta(_ context.Context, meta *mcp.Meta) *mcp.Meta { return meta }

func (p metaPropagator) ExtractMeta(ctx context.Context, meta *mcp.Meta) context.Context {
	if meta == nil || meta.AdditionalFields["traceparent"] == nil {
		return ctx
	}
	return p.tel.Extract(ctx, telemetry.MetaCarrier(meta.AdditionalFields))
}
