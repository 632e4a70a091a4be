package jaegertest

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDecodeOTLPJSON reads a hand-written /api/v3 answer holding every AnyValue type, 64-bit
// integers as strings and as numbers, and enums as numbers and as names. It needs no Jaeger.
func TestDecodeOTLPJSON(t *testing.T) {
	b, err := os.ReadFile("testdata/traces.json")
	if err != nil {
		t.Fatal(err)
	}
	var resp otlpResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	got, err := resp.Result.traces()
	if err != nil {
		t.Fatalf("traces: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d traces, want 2:\n%v", len(got), got)
	}

	// NaN never equals itself: check those two apart, then compare the rest as a whole.
	attrs := got[0].Spans[0].Attributes
	if f, _ := attrs["nan"].(float64); !math.IsNaN(f) {
		t.Errorf("nan: got %#v, want NaN", attrs["nan"])
	}
	if f, _ := attrs["inf"].(float64); !math.IsInf(f, -1) {
		t.Errorf("inf: got %#v, want -Inf", attrs["inf"])
	}
	delete(attrs, "nan")
	delete(attrs, "inf")

	front := map[string]any{"service.name": "front", "host.cores": int64(2)}
	back := map[string]any{"service.name": "back"}
	want := []Trace{
		{
			TraceID: "0af7651916cd43dd8448eb211c80319c",
			Spans: []Span{
				{
					TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "00f067aa0ba902b7",
					Name: "POST /v1/query", Kind: "server", Service: "front", Resource: front, Scope: "toolmesh/api",
					Start: time.Unix(1764680000, 0).UTC(), End: time.Unix(1764680000, 250e6).UTC(),
					Attributes: map[string]any{
						"s": "text", "b": true, "i": int64(-42), "i_number": int64(7),
						"big": int64(9007199254740993), "d": 0.5, "bytes": []byte("hi"),
						"arr": []any{"a", int64(1)}, "kv": map[string]any{"k": false}, "empty": nil,
					},
					Status: Status{Code: "Unset"},
				},
				{
					TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331", ParentSpanID: "00f067aa0ba902b7",
					Name: "Work", Kind: "client", Service: "back", Resource: back,
					Start: time.Unix(1764680000, 100e6).UTC(), End: time.Unix(1764680000, 200e6).UTC(),
					Attributes: map[string]any{},
					Status:     Status{Code: "Error", Message: "disk full"},
					Events: []Event{{
						Name: "exception", Time: time.Unix(1764680000, 150e6).UTC(),
						Attributes: map[string]any{"exception.message": "disk full"},
					}},
				},
			},
		},
		{
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
			Spans: []Span{{
				TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "53995c3f42cd8ad8",
				Name: "other", Kind: "unspecified", Service: "back", Resource: back,
				Attributes: map[string]any{}, Status: Status{Code: "Ok"},
			}},
		},
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("trace %d:\ngot  %#v\nwant %#v", i, got[i], want[i])
		}
	}

	if s := got[0].Services(); !reflect.DeepEqual(s, []string{"back", "front"}) {
		t.Errorf("Services: got %v, want [back front]", s)
	}
	out := got[0].String()
	for _, line := range []string{
		`- front "POST /v1/query" server span=00f067aa0ba902b7 250ms {`,
		`  - back "Work" client span=b7ad6b7169203331 100ms Error "disk full" events=[exception]`,
	} {
		if !strings.Contains(out, line) {
			t.Errorf("String() lacks %q:\n%s", line, out)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ name, span, want string }{
		{"int not a number", `{"attributes":[{"key":"n","value":{"intValue":"x"}}]}`, `attribute "n"`},
		{"unknown kind", `{"kind":9}`, "kind: unknown value 9"},
		{"unknown status", `{"status":{"code":"STATUS_CODE_MAYBE"}}`, `status code: unknown value "STATUS_CODE_MAYBE"`},
		{"bad time", `{"startTimeUnixNano":"soon"}`, "start time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"resourceSpans":[{"scopeSpans":[{"spans":[` + tc.span + `]}]}]}`
			var r otlpTraces
			if err := json.Unmarshal([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			_, err := r.traces()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
