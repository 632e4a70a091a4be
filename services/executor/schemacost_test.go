package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// noLimits measures without refusing anything.
var noLimits = schemaLimits{maxBytes: math.MaxInt, maxDepth: math.MaxInt, maxPerValue: math.MaxInt64,
	maxSteps: math.MaxInt64, maxTime: time.Hour}

// doublingSchema is issue 17's attack: d_i = anyOf[$ref d_i+1, allOf[$ref d_i+1]],
// levels deep, the last level a string (so an object fails every path).
func doublingSchema(levels int) string {
	var b strings.Builder
	b.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := range levels {
		fmt.Fprintf(&b, `"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"allOf":[{"$ref":"#/$defs/d%d"}]}]},`, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}}}`, levels)
	return b.String()
}

func TestSchemaCost(t *testing.T) {
	cases := []struct {
		name    string
		schema  string
		want    int64  // perValue; 0 with err
		wantErr string // refused
	}{
		{"empty", `{}`, 1, ""},
		{"true", `true`, 1, ""},
		{"flat object", `{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"string"}},"required":["a"]}`, 1, ""},
		// The root and a property: one evaluation at each value.
		{"nested object", `{"properties":{"a":{"properties":{"b":{"type":"number"}}}}}`, 1, ""},
		{"anyOf of two at one value", `{"anyOf":[{"type":"string"},{"type":"number"}]}`, 3, ""},
		{"$ref counts its target", `{"properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"number"}}}`, 2, ""},
		// patternProperties and additionalProperties may both apply to one property.
		{"patterns add up", `{"properties":{"a":{}},"patternProperties":{"^a":{},"^b":{}},"additionalProperties":{}}`, 3, ""},
		{"then or else, not both", `{"if":{"type":"string"},"then":{"minLength":1},"else":{"allOf":[{},{}]}}`, 5, ""},
		// C(d_i) = 1 + (1 + C(d_i+1)) + (1 + 1 + C(d_i+1)): 1, 6, 16, 36, and the root's $ref.
		{"doubling, 3 levels", doublingSchema(3), 37, ""},
		{"doubling, 30 levels", doublingSchema(30), 0, "over the limit"},
		// Recursion that descends one property per level costs the same at every level.
		{"linked list", `{"$ref":"#/$defs/n","$defs":{"n":{"properties":{"v":{},"next":{"$ref":"#/$defs/n"}}}}}`, 2, ""},
		{"binary tree", `{"$ref":"#/$defs/n","$defs":{"n":{"properties":{"l":{"$ref":"#/$defs/n"},"r":{"$ref":"#/$defs/n"}}}}}`, 2, ""},
		{"any JSON value", `{"$ref":"#/$defs/v","$defs":{"v":{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#/$defs/v"}},{"type":"object","additionalProperties":{"$ref":"#/$defs/v"}}]}}}`, 5, ""},
		// Recursion that applies itself twice to the same property doubles per level.
		{"doubling through a property", `{"$ref":"#/$defs/n","$defs":{"n":{"anyOf":[{"properties":{"x":{"$ref":"#/$defs/n"}}},{"properties":{"x":{"$ref":"#/$defs/n"}}}]}}}`, 0, "over the limit"},
		{"in-place cycle", `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, 0, "cycle that never descends"},
		{"in-place cycle under a property", `{"properties":{"p":{"$ref":"#/$defs/a"}},"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"}]},"b":{"allOf":[{"$ref":"#/$defs/a"}]}}}`, 0, "cycle that never descends"},
		{"dynamic ref", `{"$dynamicAnchor":"m","properties":{"c":{"$dynamicRef":"#m"}}}`, 2, ""},
	}
	lim := testLimits
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := compileSchema("t.x", json.RawMessage(tc.schema), lim)
			var refused *refusedError
			if tc.wantErr != "" {
				if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want a refusal containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.cost.perValue; got != tc.want {
				t.Errorf("perValue = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSchemaTextLimits(t *testing.T) {
	lim := testLimits
	lim.maxBytes, lim.maxDepth = 100, 4
	cases := []struct {
		schema, want string
	}{
		{`{"properties":{"a":{"description":"` + strings.Repeat("x", 100) + `"}}}`, "bytes, over the limit of 100 (executor.schema-max-bytes)"},
		{`{"properties":{"a":{"items":[{"enum":[1]}]}}}`, "nests 6 levels deep, over the limit of 4 (executor.schema-max-depth)"},
		{`{"properties":{"a":{"description":"[[[[[[{{{{"}}}`, ""},
		{`{"properties":{"a":{"description":"\"[[[[[[{{{{"}}}`, ""},
	}
	for _, tc := range cases {
		err := checkSchemaText(json.RawMessage(tc.schema), lim)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkSchemaText(%s) = %v, want %q", tc.schema, err, tc.want)
		}
	}
}

// TestValidationBudget: a schema the measure lets through (the limit raised)
// is stopped by the budget: before validating when the measure says the
// arguments would cost too much, else while validating, by steps or by time.
func TestValidationBudget(t *testing.T) {
	big := map[string]any{"l": make([]any, 500)}
	for i := range big["l"].([]any) {
		big["l"].([]any)[i] = float64(i)
	}
	cases := []struct {
		name   string
		schema string
		args   map[string]any
		lim    func(*schemaLimits)
		want   string
	}{
		{"measured over the budget", doublingSchema(30), map[string]any{}, nil,
			"may take 5368709117 subschema evaluations, over the budget of 100000 (executor.schema-validation-steps)"},
		{"many values", `{"properties":{"l":{"items":{"anyOf":[{"type":"number"},{"type":"string"}]}}}}`, big,
			func(l *schemaLimits) { l.maxSteps = 1000 }, "(502 values) against the tool's input schema may take 1506 subschema evaluations, over the budget of 1000"},
		// The measure is told nothing is expensive (perValue forced to 1):
		// the counter stops the validation.
		{"steps while validating", doublingSchema(30), map[string]any{}, func(l *schemaLimits) { l.maxSteps = 5000 },
			"validation stopped after 5000 subschema evaluations, the budget (executor.schema-validation-steps)"},
		{"time while validating", doublingSchema(30), map[string]any{}, func(l *schemaLimits) { l.maxTime = 50 * time.Millisecond },
			"(executor.schema-validation-timeout)"},
		// The default budget is what bounds time and memory when the measure
		// is wrong: the steps, or on a slow machine the time.
		{"default budget while validating", doublingSchema(30), map[string]any{}, nil,
			"validation stopped after "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lim := noLimits
			lim.maxSteps, lim.maxTime = testLimits.maxSteps, testLimits.maxTime
			if tc.lim != nil {
				tc.lim(&lim)
			}
			a, err := compileSchema("t.x", json.RawMessage(tc.schema), lim)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(tc.name, "while validating") {
				a.cost.perValue = 1
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			start := time.Now()
			err = validateArgs(context.Background(), "t.x", a, tc.args)
			took := time.Since(start)
			runtime.ReadMemStats(&m1)
			t.Logf("%s, %d steps, %d KiB allocated", took.Round(time.Microsecond), a.steps.n, (m1.TotalAlloc-m0.TotalAlloc)>>10)
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Violations) != 1 || ve.Violations[0].Field != "arguments" ||
				!strings.Contains(ve.Violations[0].Description, tc.want) {
				t.Fatalf("got %v, want a violation of arguments containing %q", err, tc.want)
			}
			if took > 2*time.Second {
				t.Errorf("took %s", took)
			}
			if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 100<<20 {
				t.Errorf("allocated %d MiB", alloc>>20)
			}
			// The schema's next call is validated afresh.
			a.lim.maxSteps, a.lim.maxTime = math.MaxInt64, time.Hour
			if strings.Contains(tc.name, "many values") {
				if err := validateArgs(context.Background(), "t.x", a, tc.args); err != nil {
					t.Errorf("with the budget raised: %v", err)
				}
			}
		})
	}
}

// envMeasureServers names more stdio MCP servers to measure, as JSON:
// {"notion":["node","/path/to/notion-mcp-server/bin/cli.mjs"]}.
const envMeasureServers = "EXECUTOR_TEST_MEASURE_SERVERS"

// realSchemas returns the input schemas of real tools: the BFCL pool (in
// JSON Schema: BFCL writes "dict" for object and "float" for number), the
// servers toolmesh ships and, when installed, the reference server-everything
// and the servers envMeasureServers names.
func realSchemas(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	out := map[string]json.RawMessage{}
	if f, err := os.Open("../../testdata/bfcl/retrieval/pool.jsonl"); err != nil {
		t.Fatalf("the BFCL pool is part of the repository: %v", err)
	} else {
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		bfclTypes := strings.NewReplacer(`"type": "dict"`, `"type": "object"`, `"type": "float"`,
			`"type": "number"`, `"type": "tuple"`, `"type": "array"`, `"type": "any"`, `"type": {}`)
		for sc.Scan() {
			var line struct {
				ID         string          `json:"id"`
				Parameters json.RawMessage `json:"parameters"`
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			// "type": {} is not a type: drop it the way the bench converter does.
			p := bfclTypes.Replace(string(line.Parameters))
			p = strings.ReplaceAll(p, `"type": {}, `, ``)
			out["bfcl."+line.ID] = json.RawMessage(p)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range shippedSchemas(t) {
		out[fmt.Sprintf("shipped.%d", i)] = json.RawMessage(s)
	}
	servers := map[string]mcpconfig.Server{}
	if paths, ok := testbackend.Everything.Lookup(); !ok {
		t.Logf("server-everything not measured: not installed")
	} else {
		servers["everything"] = mcpconfig.Server{Transport: mcpconfig.TransportStdio, Command: paths[0], Args: []string{paths[1], "stdio"}}
	}
	if env := os.Getenv(envMeasureServers); env != "" {
		var more map[string][]string
		if err := json.Unmarshal([]byte(env), &more); err != nil {
			t.Fatalf("%s: %v", envMeasureServers, err)
		}
		for name, argv := range more {
			servers[name] = mcpconfig.Server{Transport: mcpconfig.TransportStdio, Command: argv[0], Args: argv[1:]}
		}
	}
	if len(servers) == 0 {
		return out
	}
	// Limits out of the way: this measures, it does not judge.
	h := startExecutor(t, Config{ConnectTimeout: 60 * time.Second, Servers: servers,
		SchemaMaxBytes: math.MaxInt32, SchemaMaxDepth: math.MaxInt32, SchemaMaxEvaluations: math.MaxInt})
	eventually.Check(t, 90*time.Second, "servers to measure ready", func() string {
		_, why := h.svc.Ready()
		return why
	})
	lt, err := h.client.ListTools(context.Background(), &toolmeshv1.ExecutorServiceListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.GetTools() {
		b, err := tl.GetInputSchema().MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		out[tl.GetId()] = b
	}
	for name := range servers {
		st := serverState(t, h, name)
		t.Logf("%s: %d tools", name, st.GetToolCount())
		if r := st.GetRefusedTools(); len(r) > 0 {
			t.Errorf("%s: refused %v", name, r)
		}
	}
	return out
}

// TestRealSchemasWithinDefaults measures real tools' input schemas: every one
// is within the default limits, by the margin the defaults document
// (docs/operations/limits.md quotes the maxima this logs).
func TestRealSchemasWithinDefaults(t *testing.T) {
	schemas := realSchemas(t)
	type most struct {
		v  int64
		id string
	}
	var size, depth, perValue, steps most
	var slowest time.Duration
	for id, raw := range schemas {
		if err := checkSchemaText(raw, testLimits); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		a, err := compileSchema(id, raw, testLimits)
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		for _, m := range []struct {
			p *most
			v int64
		}{{&size, int64(len(raw))}, {&depth, int64(jsonDepth(raw))}, {&perValue, a.cost.perValue}} {
			if m.v > m.p.v {
				*m.p = most{m.v, id}
			}
		}
		// The steps of validating an empty object and, where the schema
		// allows it, one made of its declared properties' examples-free zero values.
		start := time.Now()
		_ = validateArgs(context.Background(), id, a, map[string]any{})
		if d := time.Since(start); d > slowest {
			slowest = d
		}
		if a.steps.n > steps.v {
			steps = most{a.steps.n, id}
		}
	}
	t.Logf("%d real input schemas: largest %d bytes (%s), deepest %d (%s), most evaluations per value %d (%s), most steps validating {} %d (%s), slowest validation %s",
		len(schemas), size.v, size.id, depth.v, depth.id, perValue.v, perValue.id, steps.v, steps.id, slowest)
	if len(schemas) < 1900 {
		t.Logf("the BFCL pool was not measured")
	}
	for _, c := range []struct {
		name       string
		got, limit int64
		margin     int64
	}{
		{"executor.schema-max-bytes", size.v, DefaultSchemaMaxBytes, 8},
		{"executor.schema-max-depth", depth.v, DefaultSchemaMaxDepth, 4},
		{"executor.schema-max-evaluations", perValue.v, DefaultSchemaMaxEvaluations, 50},
	} {
		if c.got*c.margin > c.limit {
			t.Errorf("%s: the largest real schema measures %d, within %dx of the default %d", c.name, c.got, c.margin, c.limit)
		}
	}
}
