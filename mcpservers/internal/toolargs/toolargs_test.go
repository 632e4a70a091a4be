package toolargs

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestNumber(t *testing.T) {
	tests := []struct {
		arg     any
		want    float64
		wantErr string
	}{
		{2.5, 2.5, ""},
		{3, 3, ""},
		{int64(-4), -4, ""},
		{json.Number("1e3"), 1000, ""},
		{" 7.25 ", 7.25, ""},
		{"abc", 0, `must be a number, got "abc"`},
		{"NaN", 0, "finite"},
		{"-Inf", 0, "finite"},
		{true, 0, "got bool"},
		{nil, 0, "missing required argument"},
	}
	for _, tt := range tests {
		req := mcp.CallToolRequest{}
		req.Params.Arguments = map[string]any{"x": tt.arg}
		got, err := Number(req, "x")
		if tt.wantErr == "" {
			if err != nil || got != tt.want {
				t.Errorf("Number(%#v) = %v, %v; want %v", tt.arg, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Number(%#v) error = %v, want one containing %q", tt.arg, err, tt.wantErr)
		}
	}
	if _, err := Number(mcp.CallToolRequest{}, "x"); err == nil {
		t.Errorf("Number without arguments = nil error, want missing argument")
	}
}
