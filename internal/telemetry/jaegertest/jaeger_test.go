package jaegertest_test

import (
	"context"
	"errors"
	"net"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/telemetry/jaegertest"
)

// newProvider is what a toolmesh process does: a TracerProvider for one service.name that
// batches spans to Jaeger over OTLP gRPC. Shutdown flushes it.
func newProvider(ctx context.Context, t *testing.T, j *jaegertest.Jaeger, service string) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(j.OTLPEndpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatalf("otlptracegrpc.New: %v", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) }) // after a t.Fatal too
	return tp
}

// TestRoundTrip sends a trace that spans two services the way toolmesh's hops will (the
// client span's context crosses as a W3C traceparent header), then reads it back through
// every query helper.
func TestRoundTrip(t *testing.T) {
	j := jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	since := time.Now().Add(-time.Second)

	front := newProvider(ctx, t, j, "jaegertest-front")
	back := newProvider(ctx, t, j, "jaegertest-back")

	ctx1, root := front.Tracer("jaegertest/front").Start(ctx, "POST /v1/query",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.route", "/v1/query"),
			attribute.Int("answer", 42),
			attribute.Bool("cached", true),
			attribute.Float64("score", 0.5),
			attribute.StringSlice("tools", []string{"calculator.add", "converter.length"}),
		))
	ctx2, call := front.Tracer("jaegertest/front").Start(ctx1, "toolmesh.v1.ExecutorService/CallTool",
		trace.WithSpanKind(trace.SpanKindClient))
	header := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx2, header)

	remote := propagation.TraceContext{}.Extract(context.Background(), header)
	_, work := back.Tracer("jaegertest/back").Start(remote, "tools/call calculator.add",
		trace.WithSpanKind(trace.SpanKindServer))
	work.AddEvent("retry", trace.WithAttributes(attribute.Int("attempt", 2)))
	work.RecordError(errors.New("disk full"))
	work.SetStatus(codes.Error, "disk full")
	work.End()
	call.End()
	root.End()
	for _, tp := range []*sdktrace.TracerProvider{front, back} {
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatalf("flushing spans: %v", err)
		}
	}

	traceID := root.SpanContext().TraceID().String()
	tr, err := j.WaitTrace(ctx, traceID, func(tr jaegertest.Trace) bool { return len(tr.Spans) == 3 })
	if err != nil {
		t.Fatalf("WaitTrace: %v\nlast seen: %v", err, tr)
	}
	t.Logf("%v", tr)

	if got, want := tr.Services(), []string{"jaegertest-back", "jaegertest-front"}; !reflect.DeepEqual(got, want) {
		t.Errorf("trace services: got %v, want %v", got, want)
	}
	services, err := j.Services(ctx)
	if err != nil {
		t.Fatalf("Services: %v", err)
	}
	for _, want := range []string{"jaegertest-back", "jaegertest-front"} {
		if !slices.Contains(services, want) {
			t.Errorf("Services: got %v, want it to hold %q", services, want)
		}
	}

	// Parentage, across the service boundary too.
	one := func(name string) jaegertest.Span {
		t.Helper()
		spans := tr.Named(name)
		if len(spans) != 1 {
			t.Fatalf("spans named %q: got %d, want 1\n%v", name, len(spans), tr)
		}
		return spans[0]
	}
	gotRoot, gotCall, gotWork := one("POST /v1/query"), one("toolmesh.v1.ExecutorService/CallTool"), one("tools/call calculator.add")
	if gotRoot.ParentSpanID != "" {
		t.Errorf("root span has parent %q", gotRoot.ParentSpanID)
	}
	if gotCall.ParentSpanID != gotRoot.SpanID || gotWork.ParentSpanID != gotCall.SpanID {
		t.Errorf("parentage: got root %s <- call (parent %s) %s <- work (parent %s), want a chain\n%v",
			gotRoot.SpanID, gotCall.ParentSpanID, gotCall.SpanID, gotWork.ParentSpanID, tr)
	}
	if gotRoot.SpanID != root.SpanContext().SpanID().String() {
		t.Errorf("root span id: got %s, want %s", gotRoot.SpanID, root.SpanContext().SpanID())
	}
	for _, c := range []struct {
		span          jaegertest.Span
		service, kind string
	}{
		{gotRoot, "jaegertest-front", "server"},
		{gotCall, "jaegertest-front", "client"},
		{gotWork, "jaegertest-back", "server"},
	} {
		if c.span.Service != c.service || c.span.Kind != c.kind {
			t.Errorf("%q: got service %q kind %q, want %q %q", c.span.Name, c.span.Service, c.span.Kind, c.service, c.kind)
		}
	}
	if gotWork.Scope != "jaegertest/back" {
		t.Errorf("scope: got %q, want jaegertest/back", gotWork.Scope)
	}
	if !gotRoot.Start.Before(gotRoot.End) || gotWork.Start.Before(gotRoot.Start) {
		t.Errorf("times: root %v..%v, work starts %v", gotRoot.Start, gotRoot.End, gotWork.Start)
	}

	// Attributes come back as Go values of their OTLP type.
	for k, want := range map[string]any{
		"http.route": "/v1/query",
		"answer":     int64(42),
		"cached":     true,
		"score":      0.5,
		"tools":      []any{"calculator.add", "converter.length"},
	} {
		if got := gotRoot.Attributes[k]; !reflect.DeepEqual(got, want) {
			t.Errorf("attribute %s: got %#v, want %#v", k, got, want)
		}
	}

	// The error status and the events.
	if want := (jaegertest.Status{Code: "Error", Message: "disk full"}); gotWork.Status != want {
		t.Errorf("work status: got %+v, want %+v", gotWork.Status, want)
	}
	if gotRoot.Status.Code != "Unset" {
		t.Errorf("root status: got %+v, want Unset", gotRoot.Status)
	}
	var names []string
	for _, e := range gotWork.Events {
		names = append(names, e.Name)
	}
	if !reflect.DeepEqual(names, []string{"retry", "exception"}) {
		t.Fatalf("events: got %v, want [retry exception]", names)
	}
	if got := gotWork.Events[0].Attributes["attempt"]; got != int64(2) {
		t.Errorf("retry event attempt: got %#v, want 2", got)
	}
	if got := gotWork.Events[1].Attributes["exception.message"]; got != "disk full" {
		t.Errorf("exception event message: got %#v, want disk full", got)
	}

	// Search by service.
	traces, err := j.Traces(ctx, "jaegertest-back", since)
	if err != nil {
		t.Fatalf("Traces: %v", err)
	}
	if len(traces) != 1 || traces[0].TraceID != traceID || len(traces[0].Spans) != 3 {
		t.Errorf("Traces(jaegertest-back): got %v, want only trace %s with 3 spans", traces, traceID)
	}
	if traces, err := j.Traces(ctx, "jaegertest-front", time.Now().Add(time.Hour)); err != nil || len(traces) != 0 {
		t.Errorf("Traces since the future: got %v, %v; want none, no error", traces, err)
	}
	if traces, err := j.Traces(ctx, "no-such-service", since); err != nil || len(traces) != 0 {
		t.Errorf("Traces(no-such-service): got %v, %v; want none, no error", traces, err)
	}

	// An unknown trace is ErrNotFound; waiting for it ends with ctx and says so.
	unknown := "0123456789abcdef0123456789abcdef"
	if _, err := j.Trace(ctx, unknown); !errors.Is(err, jaegertest.ErrNotFound) {
		t.Errorf("Trace(unknown): got %v, want ErrNotFound", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := j.WaitTrace(short, unknown, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitTrace(unknown): got %v, want a deadline error", err)
	}
	// A condition that never holds: the error says so, and the trace seen comes back.
	short, cancelShort = context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	last, err := j.WaitTrace(short, traceID, func(tr jaegertest.Trace) bool { return len(tr.Spans) > 3 })
	if !errors.Is(err, context.DeadlineExceeded) || len(last.Spans) != 3 {
		t.Errorf("WaitTrace(never): got %d spans, %v; want the 3 seen and a deadline error", len(last.Spans), err)
	}
}

// TestIsolated runs two Jaegers at once: each on its own loopback ports (none of Jaeger's
// defaults), and spans sent to one are not in the other.
func TestIsolated(t *testing.T) {
	a, b := jaegertest.Start(t), jaegertest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	defaults := []string{"4317", "4318", "16686", "16685", "13133", "13132"}
	for _, j := range []*jaegertest.Jaeger{a, b} {
		for _, addr := range []string{j.OTLPEndpoint, j.OTLPHTTPEndpoint, j.QueryURL[len("http://"):]} {
			host, port, err := net.SplitHostPort(addr)
			if err != nil || host != "127.0.0.1" || slices.Contains(defaults, port) {
				t.Errorf("address %q: want 127.0.0.1 and not a default port (%v)", addr, err)
			}
		}
	}
	if a.OTLPEndpoint == b.OTLPEndpoint || a.QueryURL == b.QueryURL {
		t.Fatalf("two Jaegers share an address: %+v %+v", a, b)
	}

	tp := newProvider(ctx, t, a, "jaegertest-only-a")
	_, span := tp.Tracer("jaegertest").Start(ctx, "hello")
	span.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("flushing spans: %v", err)
	}
	traceID := span.SpanContext().TraceID().String()
	if tr, err := a.WaitTrace(ctx, traceID, nil); err != nil {
		t.Fatalf("a: WaitTrace: %v\n%v", err, tr)
	}
	services, err := b.Services(ctx)
	if err != nil || len(services) != 0 {
		t.Errorf("b.Services: got %v, %v; want none", services, err)
	}
	if _, err := b.Trace(ctx, traceID); !errors.Is(err, jaegertest.ErrNotFound) {
		t.Errorf("b.Trace: got %v, want ErrNotFound", err)
	}
}
