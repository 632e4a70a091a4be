package executor

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/mcpservers/calculator"
	"github.com/toolmesh/toolmesh/mcpservers/converter"
)

// shippedSchemas is the input schema of every tool the demo servers ship, as the executor
// receives them over MCP.
func shippedSchemas(f testing.TB) []string {
	f.Helper()
	var out []string
	for _, s := range []*server.MCPServer{calculator.New(), converter.New()} {
		tools := s.ListTools()
		names := make([]string, 0, len(tools))
		for n := range tools {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := json.Marshal(tools[n].Tool)
			if err != nil {
				f.Fatal(err)
			}
			var t struct {
				InputSchema json.RawMessage `json:"inputSchema"`
			}
			if err := json.Unmarshal(b, &t); err != nil {
				f.Fatal(err)
			}
			out = append(out, string(t.InputSchema))
		}
	}
	return out
}

// FuzzValidateArgs drives the validation path a call takes: a server's schema is compiled at
// discovery, then each call's arguments have optional nulls dropped and are validated. Neither
// step may panic, and a refusal is always a *ValidationError naming at least one field.
func FuzzValidateArgs(f *testing.F) {
	args := []string{
		`{}`, `{"a":2,"b":3}`, `{"a":"2","b":3}`, `{"a":null}`, `{"expression":"1+2"}`,
		`{"celsius":100}`, `{"value":1,"from":"km","to":"mi"}`, `{"a":[1,[2,[3]]]}`, `{"x":{"y":{"z":true}}}`,
	}
	schemas := append(shippedSchemas(f),
		`{"type":"object","properties":null,"required":null}`,
		`{"type":"object","properties":{"n":{"type":["integer","null"]}},"required":["n"],"additionalProperties":false}`,
		`{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"number","minimum":0}]}}}`,
		`{"type":"object","properties":{"v":{"oneOf":[{"const":1},{"enum":[2,3]}]}}}`,
		`{"type":"object","properties":{"l":{"type":"array","items":{"$ref":"#/$defs/i"},"maxItems":2}},"$defs":{"i":{"type":"integer"}}}`,
		`{"$ref":"http://example.com/schema.json"}`,
		`{"type":"object","properties":{"s":{"type":"string","pattern":"^[a-z]+$","format":"email"}}}`,
		`{"type":"object","patternProperties":{"^x":{"type":"boolean"}},"propertyNames":{"maxLength":3}}`,
		`{"if":{"required":["a"]},"then":{"required":["b"]},"else":false}`,
		`true`, `false`, `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, `[]`, `{`,
	)
	for i, s := range schemas {
		f.Add(s, args[i%len(args)])
	}
	f.Fuzz(func(t *testing.T, schema, argsJSON string) {
		sch, err := compileSchema("fuzz.tool", json.RawMessage(schema), testLimits)
		if err != nil {
			return // such tools are called unvalidated, or refused
		}
		var args map[string]any
		if json.Unmarshal([]byte(argsJSON), &args) != nil || args == nil {
			return
		}
		dropOptionalNulls(sch, args)
		err = validateArgs(context.Background(), "fuzz.tool", sch, args)
		if err == nil {
			return
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("validateArgs(%s, %s) = %v (%T), want a *ValidationError", schema, argsJSON, err, err)
		}
		if ve.Tool != "fuzz.tool" || len(ve.Violations) == 0 {
			t.Fatalf("validateArgs(%s, %s) = %+v, want the tool and at least one violation", schema, argsJSON, ve)
		}
		for _, v := range ve.Violations {
			if !strings.HasPrefix(v.Field, "arguments") || v.Description == "" {
				t.Fatalf("validateArgs(%s, %s): violation %+v does not name a field under arguments and why", schema, argsJSON, v)
			}
		}
		_ = err.Error()
	})
}
