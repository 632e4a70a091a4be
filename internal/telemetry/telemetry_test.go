package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWithoutEndpointSpansHaveIDsAndMetricsAreServed(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tel, err := New(Config{PayloadLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if tel.Exporting() {
		t.Fatal("exporting without an endpoint")
	}
	ctx := context.Background()
	api, err := tel.Service(ctx, "toolmesh-api")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := tel.Service(ctx, "toolmesh-executor")
	if err != nil {
		t.Fatal(err)
	}
	_, span := api.Tracer("test").Start(ctx, "q")
	if sc := span.SpanContext(); !sc.HasTraceID() || sc.IsSampled() || span.IsRecording() {
		t.Errorf("span context %v recording %v; want a trace id, not sampled, not recording", sc, span.IsRecording())
	}
	span.End()
	// The same instrument in two targets must not collide in one registry.
	for _, s := range []*Service{api, exe} {
		c, err := s.Meter("test").Int64Counter("toolmesh.test.calls")
		if err != nil {
			t.Fatal(err)
		}
		c.Add(ctx, 2)
	}
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{`toolmesh_test_calls_total{service_name="toolmesh-api"} 2`,
		`toolmesh_test_calls_total{service_name="toolmesh-executor"} 2`, "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

func TestNilServiceRecordsNothing(t *testing.T) {
	var s *Service
	_, span := s.Tracer("x").Start(context.Background(), "y")
	span.End()
	if s.GRPCServerOptions() != nil || s.GRPCDialOptions() != nil {
		t.Error("a nil Service adds gRPC options")
	}
	if s.HTTPTransport(nil) == nil {
		t.Error("a nil Service has no transport")
	}
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	tel, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	s, err := tel.Service(context.Background(), "toolmesh-api")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logger := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("target", "api")
	ctx, span := s.Tracer("t").Start(context.Background(), "q")
	logger.InfoContext(ctx, "inside")
	span.End()
	logger.Info("outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var in, out map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &in)
	_ = json.Unmarshal([]byte(lines[1]), &out)
	if in["trace_id"] != span.SpanContext().TraceID().String() || in["span_id"] != span.SpanContext().SpanID().String() || in["target"] != "api" {
		t.Errorf("inside a span: %v", in)
	}
	if _, ok := out["trace_id"]; ok {
		t.Errorf("outside a span: %v", out)
	}
}

func TestPayloadCut(t *testing.T) {
	cases := []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"0123456789abc", 10, "0123456789…"},
		{"ééééé", 3, "é…"},
		{"x", 0, "…"},
	}
	for _, tc := range cases {
		if got := (PayloadPolicy{Limit: tc.limit}).Cut(tc.in); got != tc.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
}

// TestHTTPServerAddressIsNotTheCallers: 38 requests with made-up Host headers make one
// series of http.server.request.duration, whose server.address is the server's own.
func TestHTTPServerAddressIsNotTheCallers(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	s := NewForTest("toolmesh-api", nil, mp, PayloadPolicy{})
	h := s.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), "rest", "127.0.0.1:7700", nil)
	for i := range 38 {
		r := httptest.NewRequest("GET", "/v1/tools", nil)
		r.Host = fmt.Sprintf("made-up-%d.example:%d", i, 1000+i)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "http.server.request.duration" {
				continue
			}
			dps := m.Data.(metricdata.Histogram[float64]).DataPoints
			if len(dps) != 1 {
				t.Fatalf("%d series, want 1", len(dps))
			}
			addr, _ := dps[0].Attributes.Value("server.address")
			port, _ := dps[0].Attributes.Value("server.port")
			if addr.AsString() != "127.0.0.1" || port.AsInt64() != 7700 {
				t.Errorf("server.address %v server.port %v, want 127.0.0.1 7700", addr, port)
			}
			return
		}
	}
	t.Fatal("no http.server.request.duration")
}
