package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// TestToolLabelsBounded: a query that names 38 tools the executor does not know adds no
// series of toolmesh.query.tool_calls beyond the one "unknown" tool (issue 17: one such
// request added 38 series for good); a known tool keeps its own.
func TestToolLabelsBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	exec := &fakeExecutor{}
	cfg := testConfig(startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) }), "")
	cfg.QueryTimeout, cfg.MaxParallelCalls, cfg.MaxOutputBytes = 10*time.Second, 4, 4096
	cfg.MaxToolCalls = 64 // the 39 calls of the request in one query
	h := tracedGatewayHandler(t, cfg, telemetry.NewForTest("api", nil, mp, telemetry.PayloadPolicy{}))
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)

	series := func() []string {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "toolmesh.query.tool_calls" {
					for _, dp := range sum.DataPoints {
						tool, _ := dp.Attributes.Value(attribute.Key("gen_ai.tool.name"))
						outcome, _ := dp.Attributes.Value(attribute.Key("outcome"))
						out = append(out, tool.AsString()+"/"+outcome.AsString())
					}
				}
			}
		}
		slices.Sort(out)
		return out
	}
	query := func(prefix string) {
		t.Helper()
		calls := []string{`@calc.add({\"a\":2,\"b\":3})`}
		for i := range 38 {
			calls = append(calls, fmt.Sprintf("@%s.tool_%02d()", prefix, i))
		}
		body := `{"query":"` + strings.Join(calls, " ") + `"}`
		resp, err := http.Post(ts.URL+"/v1/query", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// Every call runs; the answer is the status of the first that failed.
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `unknown tool \"`+prefix+`.tool_00\"`) {
			t.Fatalf("query: %d %s", resp.StatusCode, b)
		}
	}
	want := []string{"calc.add/ok", "unknown/error"}
	query("nope")
	if got := series(); !slices.Equal(got, want) {
		t.Fatalf("series after 38 unknown tools: %v, want %v", got, want)
	}
	query("other")
	if got := series(); !slices.Equal(got, want) {
		t.Errorf("series after 38 more: %v, want %v", got, want)
	}
}
