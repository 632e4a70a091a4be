package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestSpansRedacted: a span that records an MCP server's URL with credentials anywhere (name,
// attributes, an error event, status, a link) leaves the process with them masked; a span
// without a URL is passed on as it was.
func TestSpansRedacted(t *testing.T) {
	const secret = "S3CRET-k3y"
	u := "https://user:" + secret + "@mcp.example/sse?api_key=" + secret
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(redactSpans(mem)))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("test")

	_, clean := tr.Start(context.Background(), "tools/call add", trace.WithAttributes(attribute.String("gen_ai.tool.name", "add")))
	clean.End()
	link := trace.Link{SpanContext: clean.SpanContext(), Attributes: []attribute.KeyValue{attribute.String("why", u)}}
	_, s := tr.Start(context.Background(), "connect "+u, trace.WithLinks(link), trace.WithAttributes(
		attribute.String("url.full", u), attribute.StringSlice("urls", []string{u, "x"}), attribute.Int("n", 1)))
	s.RecordError(fmt.Errorf("get %q: %w", u, errors.New("refused")))
	s.SetStatus(codes.Error, "connect "+u)
	s.End()

	spans := mem.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans exported, want 2", len(spans))
	}
	if got := fmt.Sprintf("%+v", spans[0]); !strings.Contains(got, "tools/call add") {
		t.Errorf("clean span changed: %s", got)
	}
	got := fmt.Sprintf("%+v", spans[1])
	if strings.Contains(got, secret) {
		t.Fatalf("exported span holds the secret:\n%s", got)
	}
	for _, want := range []string{"connect https://REDACTED@mcp.example/sse?api_key=REDACTED", "url.full", "exception", "urls"} {
		if !strings.Contains(got, want) {
			t.Errorf("exported span lacks %q:\n%s", want, got)
		}
	}
	if spans[1].Attributes[2].Value.AsInt64() != 1 {
		t.Errorf("a number attribute changed: %v", spans[1].Attributes)
	}
}
