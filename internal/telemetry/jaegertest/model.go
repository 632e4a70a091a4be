package jaegertest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Trace is one trace as Jaeger stored it: every span it has under the trace id, as sent. The
// helpers ask for raw traces because by default the query service adjusts them for display
// first: it sorts events by name, moves some span attributes to the resource, shifts spans it
// believes clock-skewed and drops duplicates, which would hide or fake what a test checks.
type Trace struct {
	TraceID string // 32 lower-case hex digits
	Spans   []Span // in the order Jaeger returned them
}

// Span is one span, flattened out of OTLP's resource/scope nesting.
type Span struct {
	TraceID      string
	SpanID       string // 16 lower-case hex digits
	ParentSpanID string // "" for a root span
	Name         string
	// Kind is "server", "client", "internal", "producer", "consumer" or "unspecified", as
	// go.opentelemetry.io/otel/trace.SpanKind's String method names them.
	Kind string
	// Service is the resource's service.name: which process sent the span.
	Service  string
	Resource map[string]any // all resource attributes
	Scope    string         // the instrumentation scope (tracer) name
	Start    time.Time
	End      time.Time
	// Attributes hold string, bool, int64, float64, []byte, []any or map[string]any values
	// (OTLP's string, bool, int, double, bytes, array and kvlist values).
	Attributes map[string]any
	Status     Status
	Events     []Event
}

// Status is a span's status.
type Status struct {
	// Code is "Unset", "Ok" or "Error", as go.opentelemetry.io/otel/codes.Code's String
	// method names them.
	Code    string
	Message string
}

// Event is a span event (span.AddEvent; RecordError adds one named "exception").
type Event struct {
	Name       string
	Time       time.Time
	Attributes map[string]any
}

// Services lists the distinct service names of the trace's spans, sorted.
func (t Trace) Services() []string {
	var out []string
	for _, s := range t.Spans {
		if !slices.Contains(out, s.Service) {
			out = append(out, s.Service)
		}
	}
	slices.Sort(out)
	return out
}

// Named returns the spans called name, in the trace's order.
func (t Trace) Named(name string) []Span {
	var out []Span
	for _, s := range t.Spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Span returns the span with the given id.
func (t Trace) Span(spanID string) (Span, bool) {
	for _, s := range t.Spans {
		if s.SpanID == spanID {
			return s, true
		}
	}
	return Span{}, false
}

// String prints the trace as an indented tree (children under their parent, by start time)
// with each span's service, name, kind, status, attributes and event names: what a failing
// test should show.
func (t Trace) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: %d spans from %v\n", t.TraceID, len(t.Spans), t.Services())
	spans := slices.Clone(t.Spans)
	slices.SortStableFunc(spans, func(a, b Span) int { return a.Start.Compare(b.Start) })
	children := map[string][]Span{}
	for _, s := range spans {
		children[s.ParentSpanID] = append(children[s.ParentSpanID], s)
	}
	printed := map[string]bool{}
	var write func(s Span, depth int, note string)
	write = func(s Span, depth int, note string) {
		if printed[s.SpanID] {
			return // a span listed twice, or a parent cycle
		}
		printed[s.SpanID] = true
		fmt.Fprintf(&b, "%s- %s %q %s span=%s %v", strings.Repeat("  ", depth), s.Service, s.Name, s.Kind,
			s.SpanID, s.End.Sub(s.Start).Round(time.Microsecond))
		if s.Status.Code != "" && s.Status.Code != "Unset" {
			fmt.Fprintf(&b, " %s %q", s.Status.Code, s.Status.Message)
		}
		if len(s.Attributes) > 0 {
			b.WriteString(" {")
			for i, k := range slices.Sorted(maps.Keys(s.Attributes)) {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%s=%v", k, s.Attributes[k])
			}
			b.WriteString("}")
		}
		if len(s.Events) > 0 {
			names := make([]string, len(s.Events))
			for i, e := range s.Events {
				names[i] = e.Name
			}
			fmt.Fprintf(&b, " events=%v", names)
		}
		b.WriteString(note + "\n")
		for _, c := range children[s.SpanID] {
			write(c, depth+1, "")
		}
	}
	for _, s := range spans {
		if s.ParentSpanID == "" {
			write(s, 0, "")
		}
	}
	// Spans whose parent is not (yet) in the trace: a missing hop is what these tests look for.
	for _, s := range spans {
		if _, ok := t.Span(s.ParentSpanID); s.ParentSpanID != "" && !ok {
			write(s, 0, " (parent "+s.ParentSpanID+" not in the trace)")
		}
	}
	for _, s := range spans {
		write(s, 0, " (in a parent cycle)")
	}
	return b.String()
}

// The /api/v3 answer: {"result": TracesData}, TracesData in OTLP's JSON encoding. OTLP-JSON
// carries 64-bit integers as strings and enums as numbers, but a plain protobuf JSON encoder
// writes enum names, so both are accepted.
type otlpResponse struct {
	Result otlpTraces `json:"result"`
}

type otlpTraces struct {
	ResourceSpans []struct {
		Resource struct {
			Attributes []keyValue `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Scope struct {
				Name string `json:"name"`
			} `json:"scope"`
			Spans []otlpSpan `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
}

type otlpSpan struct {
	TraceID           string          `json:"traceId"`
	SpanID            string          `json:"spanId"`
	ParentSpanID      string          `json:"parentSpanId"`
	Name              string          `json:"name"`
	Kind              json.RawMessage `json:"kind"`
	StartTimeUnixNano json.RawMessage `json:"startTimeUnixNano"`
	EndTimeUnixNano   json.RawMessage `json:"endTimeUnixNano"`
	Attributes        []keyValue      `json:"attributes"`
	Events            []struct {
		TimeUnixNano json.RawMessage `json:"timeUnixNano"`
		Name         string          `json:"name"`
		Attributes   []keyValue      `json:"attributes"`
	} `json:"events"`
	Status struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	} `json:"status"`
}

type keyValue struct {
	Key   string   `json:"key"`
	Value anyValue `json:"value"`
}

// anyValue is OTLP's AnyValue: an object with exactly one of these keys set.
type anyValue struct {
	StringValue *string         `json:"stringValue"`
	BoolValue   *bool           `json:"boolValue"`
	IntValue    json.RawMessage `json:"intValue"`    // "5" (or 5)
	DoubleValue json.RawMessage `json:"doubleValue"` // 0.5, or "NaN", "Infinity", "-Infinity"
	BytesValue  *string         `json:"bytesValue"`  // base64
	ArrayValue  *struct {
		Values []anyValue `json:"values"`
	} `json:"arrayValue"`
	KvlistValue *struct {
		Values []keyValue `json:"values"`
	} `json:"kvlistValue"`
}

// Span kinds and status codes by their OTLP enum numbers.
var (
	kindNames   = []string{"unspecified", "internal", "server", "client", "producer", "consumer"}
	statusNames = []string{"Unset", "Ok", "Error"}
)

// traces flattens the answer into traces, grouped by trace id in the order first seen.
func (r otlpTraces) traces() ([]Trace, error) {
	var out []Trace
	index := map[string]int{}
	for _, rs := range r.ResourceSpans {
		resource, err := attributes(rs.Resource.Attributes)
		if err != nil {
			return nil, fmt.Errorf("resource: %w", err)
		}
		service, _ := resource["service.name"].(string)
		for _, ss := range rs.ScopeSpans {
			for _, raw := range ss.Spans {
				s, err := raw.span()
				if err != nil {
					return nil, fmt.Errorf("span %s %q: %w", raw.SpanID, raw.Name, err)
				}
				s.Service, s.Resource, s.Scope = service, resource, ss.Scope.Name
				i, ok := index[s.TraceID]
				if !ok {
					i = len(out)
					index[s.TraceID] = i
					out = append(out, Trace{TraceID: s.TraceID})
				}
				out[i].Spans = append(out[i].Spans, s)
			}
		}
	}
	return out, nil
}

func (o otlpSpan) span() (Span, error) {
	s := Span{
		TraceID:      strings.ToLower(o.TraceID),
		SpanID:       strings.ToLower(o.SpanID),
		ParentSpanID: strings.ToLower(o.ParentSpanID),
		Name:         o.Name,
	}
	var err error
	if s.Kind, err = enumName(o.Kind, "SPAN_KIND_", kindNames); err != nil {
		return Span{}, fmt.Errorf("kind: %w", err)
	}
	if s.Start, err = unixNano(o.StartTimeUnixNano); err != nil {
		return Span{}, fmt.Errorf("start time: %w", err)
	}
	if s.End, err = unixNano(o.EndTimeUnixNano); err != nil {
		return Span{}, fmt.Errorf("end time: %w", err)
	}
	if s.Attributes, err = attributes(o.Attributes); err != nil {
		return Span{}, err
	}
	if s.Status.Code, err = enumName(o.Status.Code, "STATUS_CODE_", statusNames); err != nil {
		return Span{}, fmt.Errorf("status code: %w", err)
	}
	s.Status.Message = o.Status.Message
	for _, oe := range o.Events {
		e := Event{Name: oe.Name}
		if e.Time, err = unixNano(oe.TimeUnixNano); err != nil {
			return Span{}, fmt.Errorf("event %q time: %w", oe.Name, err)
		}
		if e.Attributes, err = attributes(oe.Attributes); err != nil {
			return Span{}, fmt.Errorf("event %q: %w", oe.Name, err)
		}
		s.Events = append(s.Events, e)
	}
	return s, nil
}

func attributes(kvs []keyValue) (map[string]any, error) {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v, err := kv.Value.value()
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", kv.Key, err)
		}
		m[kv.Key] = v
	}
	return m, nil
}

// value is the Go value of an AnyValue; an empty AnyValue ({}) is nil.
func (a anyValue) value() (any, error) {
	switch {
	case a.StringValue != nil:
		return *a.StringValue, nil
	case a.BoolValue != nil:
		return *a.BoolValue, nil
	case a.IntValue != nil:
		return strconv.ParseInt(unquote(a.IntValue), 10, 64)
	case a.DoubleValue != nil:
		// ParseFloat reads "NaN", "Infinity" and "-Infinity" too.
		return strconv.ParseFloat(unquote(a.DoubleValue), 64)
	case a.BytesValue != nil:
		return base64.StdEncoding.DecodeString(*a.BytesValue)
	case a.ArrayValue != nil:
		out := make([]any, len(a.ArrayValue.Values))
		for i, v := range a.ArrayValue.Values {
			var err error
			if out[i], err = v.value(); err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return out, nil
	case a.KvlistValue != nil:
		return attributes(a.KvlistValue.Values)
	}
	return nil, nil
}

// unquote strips the quotes around a JSON string holding a number ("5" → 5).
func unquote(raw json.RawMessage) string {
	return strings.Trim(string(raw), `"`)
}

// unixNano reads nanoseconds since the epoch, as a string or a number; absent is the zero time.
func unixNano(raw json.RawMessage) (time.Time, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(unquote(raw), 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	if n == 0 {
		return time.Time{}, nil
	}
	return time.Unix(0, n).UTC(), nil
}

// enumName reads an OTLP enum written as its number (OTLP-JSON) or as its protobuf name
// (prefix + upper-case name); absent is the zero value.
func enumName(raw json.RawMessage, prefix string, names []string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return names[0], nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		if n < 0 || n >= len(names) {
			return "", fmt.Errorf("unknown value %d", n)
		}
		return names[n], nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("neither a number nor a string: %s", raw)
	}
	for _, name := range names {
		if strings.EqualFold(prefix+name, s) || strings.EqualFold(name, s) {
			return name, nil
		}
	}
	return "", fmt.Errorf("unknown value %q", s)
}
