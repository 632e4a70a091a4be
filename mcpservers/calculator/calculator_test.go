package calculator

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/mcpservers/internal/mcptesting"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestTools(t *testing.T) {
	c := mcptesting.InProcess(t, New())

	got := mcptesting.ToolNames(t, c)
	slices.Sort(got)
	want := []string{"add", "calculate", "divide", "multiply", "subtract"}
	if !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}

	tests := []struct {
		tool     string
		args     map[string]any
		wantText string // exact text, or a substring when wantErr
		wantErr  bool
	}{
		{"add", map[string]any{"a": 2, "b": 3}, "5", false},
		{"add", map[string]any{"a": 0.1, "b": 0.2}, "0.30000000000000004", false},
		{"add", map[string]any{"a": "2", "b": "3.5"}, "5.5", false},
		{"add", map[string]any{"a": 1e308, "b": 1e308}, "too large", true},
		{"add", map[string]any{"a": 2}, `missing required argument "b"`, true},
		{"add", map[string]any{"a": "two", "b": 3}, `argument "a" must be a number`, true},
		{"add", map[string]any{"a": "NaN", "b": 3}, "finite", true},
		{"subtract", map[string]any{"a": 10, "b": 4}, "6", false},
		{"subtract", map[string]any{"a": 4, "b": 10}, "-6", false},
		{"multiply", map[string]any{"a": 6, "b": 7}, "42", false},
		{"multiply", map[string]any{"a": 1e6, "b": 1e6}, "1000000000000", false},
		{"divide", map[string]any{"a": 7, "b": 2}, "3.5", false},
		{"divide", map[string]any{"a": 1, "b": 3}, "0.3333333333333333", false},
		{"divide", map[string]any{"a": 1, "b": 0}, "cannot divide 1 by zero", true},
		{"divide", map[string]any{"a": 0, "b": 0}, "by zero", true},
		{"calculate", map[string]any{"expression": "(2 + 3) * 4"}, "20", false},
		{"calculate", map[string]any{"expression": "2 ** 0.5"}, "1.4142135623730951", false},
		{"calculate", map[string]any{"expression": "1 / 0"}, "position 3: division by zero", true},
		{"calculate", map[string]any{"expression": "sqrt(2)"}, "position 1: function calls are not supported", true},
		{"calculate", map[string]any{"expression": strings.Repeat("1+", 600) + "1"}, "too long", true},
		{"calculate", map[string]any{}, `"expression"`, true},
	}
	for _, tt := range tests {
		res := mcptesting.Call(t, c, tt.tool, tt.args)
		text := mcptesting.Text(res)
		if res.IsError != tt.wantErr {
			t.Errorf("%s(%v) IsError = %v (text %q), want %v", tt.tool, tt.args, res.IsError, text, tt.wantErr)
			continue
		}
		if tt.wantErr {
			if !strings.Contains(text, tt.wantText) {
				t.Errorf("%s(%v) error text = %q, want it to contain %q", tt.tool, tt.args, text, tt.wantText)
			}
			continue
		}
		if text != tt.wantText {
			t.Errorf("%s(%v) text = %q, want %q", tt.tool, tt.args, text, tt.wantText)
		}
		// Structured content must be {"result": <the same number>}.
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatalf("marshal structured content: %v", err)
		}
		var sc struct {
			Result *float64 `json:"result"`
		}
		if err := json.Unmarshal(raw, &sc); err != nil || sc.Result == nil {
			t.Errorf("%s(%v) structured content = %s, want {\"result\": number}", tt.tool, tt.args, raw)
			continue
		}
		if got := Format(*sc.Result); got != tt.wantText {
			t.Errorf("%s(%v) structured result = %s, want %s", tt.tool, tt.args, got, tt.wantText)
		}
	}
}

func TestToolSchemas(t *testing.T) {
	for _, st := range New().ListTools() {
		tool := st.Tool
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		if tool.OutputSchema.Type != "object" {
			t.Errorf("tool %s output schema type = %q, want object", tool.Name, tool.OutputSchema.Type)
		}
		if _, ok := tool.OutputSchema.Properties["result"]; !ok {
			t.Errorf("tool %s output schema has no result property: %+v", tool.Name, tool.OutputSchema)
		}
		wantRequired := []string{"a", "b"}
		if tool.Name == "calculate" {
			wantRequired = []string{"expression"}
		}
		if !slices.Equal(tool.InputSchema.Required, wantRequired) {
			t.Errorf("tool %s required = %v, want %v", tool.Name, tool.InputSchema.Required, wantRequired)
		}
	}
	divide := New().GetTool("divide")
	if divide == nil || !strings.Contains(divide.Tool.Description, "error if b is 0") {
		t.Errorf("divide description should mention the zero divisor")
	}
}
