package audit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/trace"
)

// emit sends each line of a written batch as an OpenTelemetry log record: its body the line
// itself (so a log store holds a trail that verifies), its attributes the fields to search by,
// in the trace of the call it records.
func (w *writer) emit(heads []head) {
	if w.r.otel == nil {
		return
	}
	for _, h := range heads {
		var rec otellog.Record
		rec.SetBody(attribute.StringValue(string(h.line)))
		rec.SetSeverity(otellog.SeverityInfo)
		rec.SetSeverityText("INFO")
		rec.AddAttributes(attribute.Int64("toolmesh.audit.seq", int64(h.seq)), attribute.String("toolmesh.audit.hash", h.hash),
			attribute.String("toolmesh.audit.prev", h.prev))
		ctx := context.Background()
		if h.item < 0 {
			rec.SetEventName("toolmesh.audit.start")
			w.r.otel.Emit(ctx, rec)
			continue
		}
		it := &w.pending[h.item]
		r := &it.rec
		typ := typeOf(*r)
		rec.SetEventName("toolmesh.audit." + typ)
		rec.SetTimestamp(r.Time)
		rec.AddAttributes(attribute.String("toolmesh.audit.token", r.Token), attribute.String("client.address", r.Client),
			attribute.String("gen_ai.tool.name", r.Tool))
		if typ == "call" {
			rec.AddAttributes(attribute.String("toolmesh.audit.via", r.Via), attribute.String("toolmesh.audit.origin", r.Origin),
				attribute.String("toolmesh.audit.decision", r.Decision), attribute.Int("toolmesh.audit.result_bytes", r.ResultBytes),
				attribute.Bool("toolmesh.audit.is_error", r.IsError), attribute.Float64("toolmesh.audit.duration_ms", float64(r.Duration.Microseconds())/1000))
			if r.Rule != "" {
				rec.AddAttributes(attribute.String("toolmesh.audit.rule", r.Rule))
			}
			if r.Status != "" {
				rec.AddAttributes(attribute.String("toolmesh.audit.status", r.Status))
			}
		}
		if r.Decision == Denied || r.Type != "" {
			// A refusal, or an event about a tool's trust: what an operator wants to see.
			rec.SetSeverity(otellog.SeverityWarn)
			rec.SetSeverityText("WARN")
		}
		if it.sc.IsValid() {
			ctx = trace.ContextWithSpanContext(ctx, it.sc)
		}
		w.r.otel.Emit(ctx, rec)
	}
}
