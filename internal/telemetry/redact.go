package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolmesh/toolmesh/internal/redact"
)

// redactSpans wraps exp so that no span leaves the process with a URL credential in its name,
// status, attributes, events (an error's message) or links: each string goes through
// redact.Text. Spans with nothing to mask are passed on as they are.
func redactSpans(exp sdktrace.SpanExporter) sdktrace.SpanExporter { return redactingExporter{exp} }

type redactingExporter struct{ sdktrace.SpanExporter }

func (e redactingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	var out []sdktrace.ReadOnlySpan
	for i, s := range spans {
		if !spanMayHoldURL(s) {
			if out != nil {
				out = append(out, s)
			}
			continue
		}
		if out == nil {
			out = append(make([]sdktrace.ReadOnlySpan, 0, len(spans)), spans[:i]...)
		}
		out = append(out, redactedSpan{s})
	}
	if out == nil {
		out = spans
	}
	return e.SpanExporter.ExportSpans(ctx, out)
}

func spanMayHoldURL(s sdktrace.ReadOnlySpan) bool {
	if redact.MayHold(s.Name()) || redact.MayHold(s.Status().Description) || attrsHoldURL(s.Attributes()) {
		return true
	}
	for _, e := range s.Events() {
		if redact.MayHold(e.Name) || attrsHoldURL(e.Attributes) {
			return true
		}
	}
	for _, l := range s.Links() {
		if attrsHoldURL(l.Attributes) {
			return true
		}
	}
	return false
}

func attrsHoldURL(kvs []attribute.KeyValue) bool {
	for _, kv := range kvs {
		switch kv.Value.Type() {
		case attribute.STRING:
			if redact.MayHold(kv.Value.AsString()) {
				return true
			}
		case attribute.STRINGSLICE:
			for _, v := range kv.Value.AsStringSlice() {
				if redact.MayHold(v) {
					return true
				}
			}
		}
	}
	return false
}

// redactedSpan is a finished span seen through redact.Text.
type redactedSpan struct{ sdktrace.ReadOnlySpan }

func (s redactedSpan) Name() string { return redact.Text(s.ReadOnlySpan.Name()) }

func (s redactedSpan) Status() sdktrace.Status {
	st := s.ReadOnlySpan.Status()
	st.Description = redact.Text(st.Description)
	return st
}

func (s redactedSpan) Attributes() []attribute.KeyValue {
	return redactAttrs(s.ReadOnlySpan.Attributes())
}

func (s redactedSpan) Events() []sdktrace.Event {
	events := s.ReadOnlySpan.Events()
	out := make([]sdktrace.Event, len(events))
	for i, e := range events {
		e.Name = redact.Text(e.Name)
		e.Attributes = redactAttrs(e.Attributes)
		out[i] = e
	}
	return out
}

func (s redactedSpan) Links() []sdktrace.Link {
	links := s.ReadOnlySpan.Links()
	out := make([]sdktrace.Link, len(links))
	for i, l := range links {
		l.Attributes = redactAttrs(l.Attributes)
		out[i] = l
	}
	return out
}

func redactAttrs(kvs []attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(kvs))
	for i, kv := range kvs {
		switch kv.Value.Type() {
		case attribute.STRING:
			kv.Value = attribute.StringValue(redact.Text(kv.Value.AsString()))
		case attribute.STRINGSLICE:
			vs := kv.Value.AsStringSlice()
			for j := range vs {
				vs[j] = redact.Text(vs[j])
			}
			kv.Value = attribute.StringSliceValue(vs)
		}
		out[i] = kv
	}
	return out
}
