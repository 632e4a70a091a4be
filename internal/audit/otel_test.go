package audit

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/log/embedded"
	"go.opentelemetry.io/otel/trace"
)

// fakeLogger keeps what is emitted, with the trace context each record came with.
type fakeLogger struct {
	embedded.Logger
	mu      sync.Mutex
	records []otellog.Record
	traces  []trace.SpanContext
}

func (l *fakeLogger) Emit(ctx context.Context, r otellog.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	l.traces = append(l.traces, trace.SpanContextFromContext(ctx))
}

func (l *fakeLogger) Enabled(context.Context, otellog.EnabledParameters) bool { return true }

// TestOTelRecords: each record is also an OpenTelemetry log record, in the call's trace, with
// the record's fields and its place in the chain; a refused call is a warning. Without a file
// the trail is those records alone.
func TestOTelRecords(t *testing.T) {
	for _, file := range []string{"", filepath.Join(t.TempDir(), "audit.jsonl")} {
		logger := &fakeLogger{}
		r, err := New(Config{File: file, Arguments: ArgumentsDigest}, Options{Log: logger})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Enabled() {
			t.Fatalf("file %q with an OTel logger: not enabled", file)
		}
		tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
		sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
		ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
		r.Record(ctx, Record{Token: "ci", Client: "203.0.113.7:5000", Via: "rest", Origin: OriginCall, Tool: "calculator.add", Decision: Allowed, ResultBytes: 7})
		r.Record(ctx, Record{Token: "ci", Via: "grpc", Origin: OriginCall, Tool: "db.drop", Decision: Denied, Rule: "scope"})
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		logger.mu.Lock()
		if len(logger.records) != 3 || logger.records[0].EventName() != "toolmesh.audit.start" {
			t.Fatalf("file %q: %d OTel records, want the start record's and 2", file, len(logger.records))
		}
		logger.records, logger.traces = logger.records[1:], logger.traces[1:]
		if len(logger.records) != 2 {
			t.Fatalf("file %q: %d OTel records, want 2", file, len(logger.records))
		}
		attrs := map[string]attribute.Value{}
		logger.records[0].WalkAttributes(func(kv attribute.KeyValue) bool { attrs[string(kv.Key)] = kv.Value; return true })
		checks := []struct {
			name string
			ok   bool
		}{
			{"event name", logger.records[0].EventName() == "toolmesh.audit.call"},
			{"in the call's trace", logger.traces[0].TraceID() == tid},
			{"tool", attrs["gen_ai.tool.name"].AsString() == "calculator.add"},
			{"token", attrs["toolmesh.audit.token"].AsString() == "ci"},
			{"client", attrs["client.address"].AsString() == "203.0.113.7:5000"},
			{"result size", attrs["toolmesh.audit.result_bytes"].AsInt64() == 7},
			{"hash", len(attrs["toolmesh.audit.hash"].AsString()) == 64},
			{"allowed is info", logger.records[0].Severity() == otellog.SeverityInfo},
			{"denied is a warning", logger.records[1].Severity() == otellog.SeverityWarn},
		}
		logger.mu.Unlock()
		for _, c := range checks {
			if !c.ok {
				t.Errorf("file %q: %s: attributes %v", file, c.name, attrs)
			}
		}
	}
}

// TestOff: with no file and no OTel logs the Recorder records nothing and costs nothing.
func TestOff(t *testing.T) {
	r, err := New(Config{Arguments: ArgumentsDigest}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Enabled() {
		t.Error("a Recorder without a file or OTel logs is enabled")
	}
	r.Record(context.Background(), Record{Tool: "calculator.add"})
	if err := r.Ready(); err != nil {
		t.Error(err)
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
}
