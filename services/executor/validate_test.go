package executor

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

func TestDropOptionalNulls(t *testing.T) {
	sch, err := compileSchema("t.x", json.RawMessage(`{"type":"object","required":["q"],"properties":{
		"q":{"type":["string","null"]},"verbose":{"type":"boolean"},"note":{"type":["string","null"]},"any":{}}}`), testLimits)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args map[string]any
		want []string // keys left
	}{
		{"optional null without null in its type is dropped", map[string]any{"q": "a", "verbose": nil}, []string{"q"}},
		{"a required null stays (and validation judges it)", map[string]any{"q": nil}, []string{"q"}},
		{"null allowed by the type stays", map[string]any{"q": "a", "note": nil}, []string{"note", "q"}},
		{"a property with no type keeps its null", map[string]any{"q": "a", "any": nil}, []string{"any", "q"}},
		{"an undeclared null is dropped", map[string]any{"q": "a", "extra": nil}, []string{"q"}},
		{"values are untouched", map[string]any{"q": "a", "verbose": false}, []string{"q", "verbose"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dropOptionalNulls(sch, tc.args)
			if got := slices.Sorted(maps.Keys(tc.args)); !slices.Equal(got, tc.want) {
				t.Errorf("keys = %v, want %v", got, tc.want)
			}
		})
	}
	if err := validateArgs(context.Background(), "t.x", sch, map[string]any{"q": "a"}); err != nil {
		t.Errorf("after dropping: %v", err)
	}
}

// testLimits are the default schema limits.
var testLimits = Config{}.withDefaults().schemaLimits()
