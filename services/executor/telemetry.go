package executor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/jsonrpcid"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// MCP requests are traced and measured as the OpenTelemetry semantic conventions for MCP
// describe them (semconv v1.41 gen-ai/mcp.md): a CLIENT span "{method} {tool}" per
// tools/call, tools/list and initialize, mcp.client.operation.duration per request and
// mcp.client.session.duration per connection. The span's context travels to the server in
// the request's params._meta when the span is sampled, and over HTTP always in the
// traceparent header.

const scope = "github.com/toolmesh/toolmesh/services/executor"

// Attribute keys of our own; the others are semconv's.
const (
	// attrServer is the server's name in our configuration (the SERVER of SERVER.TOOL).
	attrServer = attribute.Key("toolmesh.mcp.server")
	// attrState is a server's session state in toolmesh.mcp.sessions.
	attrState = attribute.Key("toolmesh.mcp.session.state")
)

// error.type values that are not JSON-RPC error codes.
const (
	errTypeTool        = "tool_error" // the result has isError set
	errTypeTimeout     = "timeout"
	errTypeCancelled   = "cancelled"
	errTypeUnavailable = "unavailable" // no connection, or it broke during the request
	errTypeExpired     = "session_expired"
	errTypeOther       = "_OTHER"
)

// callBuckets are semconv's buckets for MCP operations (10 ms … 300 s) with finer ones
// below: a held call on loopback takes about 100 µs.
var callBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
	0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

// sessionBuckets cover connections that last from a second to a day.
var sessionBuckets = []float64{1, 10, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 24 * 3600}

// instruments are the executor's tracer and meters. Built from a nil telemetry.Service
// they record nothing.
type instruments struct {
	tel      *telemetry.Service
	tracer   trace.Tracer
	meter    metric.Meter
	payloads telemetry.PayloadPolicy
	calls    metric.Float64Histogram // mcp.client.operation.duration
	conns    metric.Float64Histogram // mcp.client.session.duration
	sessions metric.Int64ObservableGauge
	// Configuration reloads, as Prometheus reports its own.
	reloads    metric.Int64Counter           // toolmesh.config.reloads
	lastOK     metric.Int64ObservableGauge   // toolmesh.config.last_reload_successful
	lastOKTime metric.Float64ObservableGauge // toolmesh.config.last_reload_success_timestamp
}

func newInstruments(tel *telemetry.Service) *instruments {
	ins := &instruments{tel: tel, tracer: tel.Tracer(scope), meter: tel.Meter(scope)}
	if tel != nil {
		ins.payloads = tel.Payloads
	}
	var err error
	if ins.calls, err = ins.meter.Float64Histogram("mcp.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of an MCP request as the executor saw it, from sending it until its response."),
		metric.WithExplicitBucketBoundaries(callBuckets...)); err != nil {
		ins.calls, _ = metricnoop.Meter{}.Float64Histogram("")
	}
	if ins.conns, err = ins.meter.Float64Histogram("mcp.client.session.duration", metric.WithUnit("s"),
		metric.WithDescription("How long an MCP session (one connection of the executor to a server) lasted."),
		metric.WithExplicitBucketBoundaries(sessionBuckets...)); err != nil {
		ins.conns, _ = metricnoop.Meter{}.Float64Histogram("")
	}
	if ins.sessions, err = ins.meter.Int64ObservableGauge("toolmesh.mcp.sessions",
		metric.WithDescription("MCP servers by the state of the executor's session with them: 1 per server, under its current state (ready means a live session).")); err != nil {
		ins.sessions, _ = metricnoop.Meter{}.Int64ObservableGauge("")
	}
	if ins.reloads, err = ins.meter.Int64Counter("toolmesh.config.reloads",
		metric.WithDescription("Reloads of the MCP server configuration (a changed config file, or SIGHUP), by result: ok (applied) or error (refused, the configuration in use kept).")); err != nil {
		ins.reloads, _ = metricnoop.Meter{}.Int64Counter("")
	}
	if ins.lastOK, err = ins.meter.Int64ObservableGauge("toolmesh.config.last_reload_successful",
		metric.WithDescription("1 when the last reload of the MCP server configuration was applied (or none was tried), 0 when it was refused.")); err != nil {
		ins.lastOK, _ = metricnoop.Meter{}.Int64ObservableGauge("")
	}
	if ins.lastOKTime, err = ins.meter.Float64ObservableGauge("toolmesh.config.last_reload_success_timestamp", metric.WithUnit("s"),
		metric.WithDescription("When the MCP server configuration in use was last loaded successfully (at start, or by a reload), in seconds since the Unix epoch.")); err != nil {
		ins.lastOKTime, _ = metricnoop.Meter{}.Float64ObservableGauge("")
	}
	return ins
}

// observeConfig registers the callback of the toolmesh.config.last_reload_* gauges.
func (ins *instruments) observeConfig(c *configState) (metric.Registration, error) {
	return ins.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.mu.Lock()
		ok, at := c.lastErr == "", c.lastOK
		c.mu.Unlock()
		v := int64(0)
		if ok {
			v = 1
		}
		o.ObserveInt64(ins.lastOK, v)
		o.ObserveFloat64(ins.lastOKTime, float64(at.UnixNano())/1e9)
		return nil
	}, ins.lastOK, ins.lastOKTime)
}

// reloaded counts one reload by result.
func (ins *instruments) reloaded(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	ins.reloads.Add(context.Background(), 1, metric.WithAttributes(attribute.String("result", result)))
}

// observeSessions registers the callback of toolmesh.mcp.sessions, over the sessions
// current when it runs; unregister it when the sessions stop.
func (ins *instruments) observeSessions(current func() []*session) (metric.Registration, error) {
	return ins.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, s := range current() {
			s.mu.Lock()
			st, _ := s.healthLocked()
			s.mu.Unlock()
			o.ObserveInt64(ins.sessions, 1, metric.WithAttributes(attrServer.String(s.name),
				semconv.NetworkTransportKey.String(s.netTransport), attrState.String(stateName(st))))
		}
		return nil
	}, ins.sessions)
}

// stateName is "ready" for SERVER_STATE_READY.
func stateName(st toolmeshv1.ServerState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "SERVER_STATE_"))
}

// peerAttrs are the attributes every span of a server carries: its name, network.transport
// (pipe for stdio, tcp otherwise) and, over HTTP, server.address and server.port.
func peerAttrs(name string, srv mcpconfig.Server) (netTransport string, attrs []attribute.KeyValue) {
	if srv.Transport == mcpconfig.TransportStdio {
		return "pipe", []attribute.KeyValue{attrServer.String(name), semconv.NetworkTransportKey.String("pipe")}
	}
	attrs = []attribute.KeyValue{attrServer.String(name), semconv.NetworkTransportKey.String("tcp")}
	if u, err := url.Parse(srv.URL); err == nil && u.Hostname() != "" {
		attrs = append(attrs, semconv.ServerAddressKey.String(u.Hostname()))
		port := u.Port()
		switch {
		case port != "":
		case u.Scheme == "https":
			port = "443"
		default:
			port = "80"
		}
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPortKey.Int(p))
		}
	}
	return "tcp", attrs
}

// rpc is one MCP request being traced and measured, from before it waits for a connection
// until its answer. The transport wrappers fill in what only the wire shows: the JSON-RPC id
// and error code.
type rpc struct {
	s      *session
	span   trace.Span
	method string
	tool   string
	start  time.Time

	// Set by answered, on the caller's goroutine.
	id      string
	code    int
	hasCode bool
}

type rpcKey struct{}

// startRPC starts the span of one request of method (on tool, for tools/call) and returns
// a context carrying it; end the rpc when the request is done.
func (s *session) startRPC(ctx context.Context, method, tool string) (context.Context, *rpc) {
	name := method
	if tool != "" {
		name = method + " " + tool
	}
	ctx, span := s.ins.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		// Attributes are only built for spans that keep them: with sampling off the span
		// exists for its ids alone.
		span.SetAttributes(semconv.McpMethodNameKey.String(method))
		span.SetAttributes(s.peerAttrs...)
		if tool != "" {
			span.SetAttributes(semconv.GenAIToolNameKey.String(tool), semconv.GenAIOperationNameExecuteTool)
		}
	}
	r := &rpc{s: s, span: span, method: method, tool: tool, start: time.Now()}
	return context.WithValue(ctx, rpcKey{}, r), r
}

// rpcFrom returns the rpc ctx carries, or nil.
func rpcFrom(ctx context.Context) *rpc {
	r, _ := ctx.Value(rpcKey{}).(*rpc)
	return r
}

// answered records what the transport saw of the request and its response.
func (r *rpc) answered(req transport.JSONRPCRequest, resp *transport.JSONRPCResponse) {
	if req.Method != r.method {
		return // e.g. server/discover, sent by mcp-go during initialize
	}
	if r.span.IsRecording() {
		r.id = jsonrpcid.String(req.ID.Value())
	}
	if resp != nil && resp.Error != nil {
		r.code, r.hasCode = resp.Error.Code, true
	}
}

// connected records the connection the request went out on.
func (r *rpc) connected(cn *conn) {
	if !r.span.IsRecording() {
		return
	}
	r.span.SetAttributes(semconv.McpProtocolVersionKey.String(cn.protocol))
	if cn.sessionID != "" {
		r.span.SetAttributes(semconv.McpSessionIDKey.String(cn.sessionID))
	}
}

// injectMeta returns the _meta of a request carrying the span's trace context (W3C
// traceparent, tracestate, baggage) when the span is sampled, else nil.
//
// Why not unsampled ones too: a _meta field makes mcp-go encode the request's _meta once
// more on our side and decode it three more times on the server's; with tracing off that
// measured 20–35 µs of CPU per call (10–15%) in bench/executor, whose server runs in the
// same process. Unsampled requests over HTTP still carry their trace context, flags 00, in
// the traceparent header (see headerPropagator), where OpenTelemetry's HTTP instrumentation
// and our servers (as a fallback) look for it; over stdio they carry none.
func (r *rpc) injectMeta(ctx context.Context) *mcp.Meta {
	if !r.span.SpanContext().IsSampled() {
		return nil
	}
	fields := telemetry.MetaCarrier{}
	r.s.ins.tel.Inject(ctx, fields)
	return &mcp.Meta{AdditionalFields: fields}
}

// end finishes the span and records the duration; res is the tools/call result, if any.
func (r *rpc) end(ctx context.Context, res *mcp.CallToolResult, err error) {
	errType := ""
	switch {
	case err != nil:
		errType = r.errorType(err)
	case res != nil && res.IsError:
		errType = errTypeTool
	}
	if r.span.IsRecording() {
		if r.id != "" {
			r.span.SetAttributes(semconv.JSONRPCRequestIDKey.String(r.id))
		}
		if r.hasCode {
			r.span.SetAttributes(semconv.RPCResponseStatusCodeKey.String(strconv.Itoa(r.code)))
		}
		switch {
		case err != nil:
			r.span.SetAttributes(semconv.ErrorTypeKey.String(errType))
			r.span.SetStatus(otelcodes.Error, err.Error())
		case errType != "":
			r.span.SetAttributes(semconv.ErrorTypeKey.String(errType))
			r.span.SetStatus(otelcodes.Error, "the tool returned an error result")
		}
		if res != nil && r.s.ins.payloads.Record {
			if b, err := json.Marshal(res); err == nil {
				r.span.SetAttributes(semconv.GenAIToolCallResultKey.String(r.s.ins.payloads.Cut(string(b))))
			}
		}
	}
	r.span.End()

	if r.s.ins.calls.Enabled(ctx) {
		r.s.ins.calls.Record(ctx, time.Since(r.start).Seconds(), r.s.opAttrs(r.method, r.tool, errType))
	}
}

// knownCodes are the JSON-RPC error codes error.type names: JSON-RPC's own and
// those the MCP specification and SDKs use.
var knownCodes = map[int]bool{
	-32700: true, -32600: true, -32601: true, -32602: true, -32603: true, // JSON-RPC
	-32000: true, -32001: true, -32002: true, -32042: true, // connection closed, request timeout, resource not found, URL elicitation required
}

// maxOpSets bounds a session's cache of attribute sets (opAttrs): tools come
// and go with the server's listings, and the cache starts over past it.
const maxOpSets = 4096

// opKey names one series of mcp.client.operation.duration of a server.
type opKey struct{ method, tool, errType string }

// opAttrs returns the attributes of one series, built once: building an attribute set
// sorts and hashes it, which would otherwise be done on every call. tool is always a tool of
// the catalog (callTool looks it up first), so a caller cannot make a series up.
func (s *session) opAttrs(method, tool, errType string) metric.RecordOption {
	k := opKey{method, tool, errType}
	if o, ok := s.ops.Load(k); ok {
		return o.(metric.RecordOption)
	}
	attrs := []attribute.KeyValue{semconv.McpMethodNameKey.String(method), attrServer.String(s.name)}
	if tool != "" {
		attrs = append(attrs, semconv.GenAIToolNameKey.String(tool))
	}
	if errType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
	}
	o, loaded := s.ops.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	if !loaded && s.opsLen.Add(1) > maxOpSets {
		s.ops.Clear()
		s.opsLen.Store(0)
	}
	return o.(metric.RecordOption)
}

// recordArguments puts the call's arguments on the span when payloads are recorded.
func (r *rpc) recordArguments(args any) {
	if !r.s.ins.payloads.Record || !r.span.IsRecording() {
		return
	}
	if b, ok := args.(json.RawMessage); ok {
		r.span.SetAttributes(semconv.GenAIToolCallArgumentsKey.String(r.s.ins.payloads.Cut(string(b))))
		return
	}
	if b, err := json.Marshal(args); err == nil {
		r.span.SetAttributes(semconv.GenAIToolCallArgumentsKey.String(r.s.ins.payloads.Cut(string(b))))
	}
}

// errorType is the error.type of a failed request: the JSON-RPC error code when the server
// answered with one, else what went wrong.
func (r *rpc) errorType(err error) string {
	switch {
	case r.hasCode && knownCodes[r.code]:
		return strconv.Itoa(r.code)
	case r.hasCode:
		// The server picks its codes: one that sent a new one per call would
		// make a series of each. The span keeps the code itself.
		return errTypeOther
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return errTypeTimeout
	case errors.Is(err, context.Canceled):
		return errTypeCancelled
	case errors.Is(err, ErrSessionExpired), errors.Is(err, transport.ErrSessionTerminated):
		return errTypeExpired
	case errors.Is(err, ErrUnavailable), isConnError(err):
		return errTypeUnavailable
	}
	return errTypeOther
}

// recordSession records how long a connection lasted once it has ended; errType says how
// it broke, "" when it was closed on purpose.
func (s *session) recordSession(ctx context.Context, cn *conn, up time.Time, errType string) {
	if !s.ins.conns.Enabled(ctx) {
		return
	}
	attrs := append([]attribute.KeyValue{semconv.McpProtocolVersionKey.String(cn.protocol)}, s.peerAttrs...)
	if errType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
	}
	s.ins.conns.Record(ctx, time.Since(up).Seconds(), metric.WithAttributes(attrs...))
}

// sessionIDOf is the connection's mcp.session.id: the Mcp-Session-Id of streamable HTTP,
// the sessionId of the SSE message endpoint, "" for stdio and stateless servers.
func sessionIDOf(tr transport.Interface) string {
	switch t := tr.(type) {
	case *streamableTransport:
		return t.GetSessionId()
	case *sseTransport:
		if u := t.GetEndpoint(); u != nil {
			return u.Query().Get("sessionId")
		}
	}
	return ""
}

// tracedWithinSpans traces the HTTP requests made for an MCP request whose span is being
// recorded, as children of that span, and leaves the others alone:
//   - with sampling off, otelhttp's span, metrics and request clone would cost several
//     times what the rest of the call's telemetry does (measured: ~28 allocations and a few
//     µs per call), and the headers get the trace context from headerPropagator anyway;
//   - the long-lived SSE and listen streams and fire-and-forget notifications, made
//     outside any MCP span, would each make a root trace of their own.
//
// So otelhttp's http.client.* metrics count sampled MCP requests only;
// mcp.client.operation.duration counts them all.
func tracedWithinSpans(tel *telemetry.Service, base http.RoundTripper) http.RoundTripper {
	if tel == nil {
		return base
	}
	return withinSpans{traced: tel.HTTPTransport(base), plain: base}
}

type withinSpans struct{ traced, plain http.RoundTripper }

func (t withinSpans) RoundTrip(r *http.Request) (*http.Response, error) {
	if trace.SpanFromContext(r.Context()).IsRecording() {
		return t.traced.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}

// headerPropagator puts the trace context in the HTTP headers of every MCP request over
// HTTP (mcp-go calls it as it builds the request), for servers and proxies that read it
// there rather than from _meta. otelhttp replaces it with its own span's, when it traces
// the request.
type headerPropagator struct{ tel *telemetry.Service }

func (p headerPropagator) Inject(ctx context.Context, h http.Header) {
	p.tel.Inject(ctx, propagation.HeaderCarrier(h))
}

func (p headerPropagator) Extract(ctx context.Context, h http.Header) context.Context {
	return p.tel.Extract(ctx, propagation.HeaderCarrier(h))
}
