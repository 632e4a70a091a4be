package telemetry

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
)

// memoryLogs is an sdklog.Exporter that keeps what it is given.
type memoryLogs struct {
	mu      sync.Mutex
	records []sdklog.Record
}

func (m *memoryLogs) Export(_ context.Context, rs []sdklog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rs {
		m.records = append(m.records, r.Clone())
	}
	return nil
}
func (m *memoryLogs) Shutdown(context.Context) error   { return nil }
func (m *memoryLogs) ForceFlush(context.Context) error { return nil }

// TestLogs: with log export on, a target's log records go out with its service name, in the
// trace of the context they were emitted with, flushed at Shutdown; with it off (the default)
// the logger emits nothing, so a caller can skip building records.
func TestLogs(t *testing.T) {
	t.Setenv("OTEL_LOGS_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "")
	ctx := context.Background()
	off, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := off.Service(ctx, "toolmesh-api")
	if err != nil {
		t.Fatal(err)
	}
	if s.Logger("test").Enabled(ctx, otellog.EnabledParameters{}) {
		t.Error("logs are exported without --otel.export-logs")
	}
	_ = off.Shutdown(ctx)
	var nilService *Service
	if nilService.Logger("test").Enabled(ctx, otellog.EnabledParameters{}) {
		t.Error("a nil Service emits logs")
	}

	exp := &memoryLogs{}
	on, err := New(Config{LogExporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	s, err = on.Service(ctx, "toolmesh-api")
	if err != nil {
		t.Fatal(err)
	}
	logger := s.Logger("github.com/toolmesh/toolmesh/internal/audit")
	if !logger.Enabled(ctx, otellog.EnabledParameters{}) {
		t.Fatal("log export on, but the logger emits nothing")
	}
	var rec otellog.Record
	rec.SetEventName("toolmesh.audit.call")
	rec.AddAttributes(attribute.String("gen_ai.tool.name", "calculator.add"))
	logger.Emit(ctx, rec)
	if err := on.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	exp.mu.Lock()
	defer exp.mu.Unlock()
	if len(exp.records) != 1 || exp.records[0].EventName() != "toolmesh.audit.call" {
		t.Fatalf("exported %v, want the one record", exp.records)
	}
	var service string
	for _, kv := range exp.records[0].Resource().Attributes() {
		if kv.Key == "service.name" {
			service = kv.Value.AsString()
		}
	}
	if service != "toolmesh-api" {
		t.Errorf("service.name %q, want toolmesh-api", service)
	}
}
