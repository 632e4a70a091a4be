package api

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// TestRetrievalQueryFollowUp: from step 2 on the search text is the question and the values of
// the calls run, never a tool id or an argument name. With the id ("calculator.add") the demo's
// "What is 2 plus 3?" matched every calculator tool in step 2, so the model was offered four
// tools instead of one: a prompt 3.2 times as long, a grammar 4 times, and +50% allocations
// per query in bench/loop (issue 28).
func TestRetrievalQueryFollowUp(t *testing.T) {
	args := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	long := strings.Repeat("x", 3*retrievalQueryBytes)
	tests := []struct {
		name string
		text string
		ran  []*toolmeshv1.ToolCallRecord
		want string
	}{
		{"step 1: the question", "What is 2 plus 3?", nil, "What is 2 plus 3?"},
		{"the demo's question after calculator.add", "What is 2 plus 3?",
			[]*toolmeshv1.ToolCallRecord{{Tool: "calculator.add", Arguments: args(map[string]any{"a": 2, "b": 3})}},
			"What is 2 plus 3? 2 3"},
		{"nested values in key order, every call of the step", "Find the table.",
			[]*toolmeshv1.ToolCallRecord{
				{Tool: "db.describe", Arguments: args(map[string]any{"table": "salaries", "opts": map[string]any{"z": true, "cols": []any{"name", 1.5}}})},
				{Tool: "db.count", Arguments: args(map[string]any{})},
				{Tool: "db.ping"},
			},
			"Find the table. name 1.5 true salaries"},
		{"bounded", "Q?", []*toolmeshv1.ToolCallRecord{{Tool: "a.b", Arguments: args(map[string]any{"s": long, "t": long})}},
			"Q? " + long[:retrievalQueryBytes-len("Q? ")]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &runner{q: query{text: tt.text}, lastRun: tt.ran}
			if got := r.retrievalQuery(); got != tt.want {
				t.Errorf("got %.80q (%d bytes), want %.80q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
		})
	}
}
