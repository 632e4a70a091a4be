package converter

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

func TestConvert(t *testing.T) {
	tests := []struct {
		v        float64
		from, to Unit
		want     float64
	}{
		{100, Celsius, Fahrenheit, 212},
		{0, Celsius, Fahrenheit, 32},
		{-40, Celsius, Fahrenheit, -40},
		{-40, Fahrenheit, Celsius, -40},
		{212, Fahrenheit, Celsius, 100},
		{98.6, Fahrenheit, Celsius, 37},
		{0, Kelvin, Celsius, -273.15},
		{0, Kelvin, Fahrenheit, -459.67},
		{-273.15, Celsius, Kelvin, 0},
		{-459.67, Fahrenheit, Kelvin, 0},
		{0, Celsius, Kelvin, 273.15},
		{373.15, Kelvin, Celsius, 100},
		{300, Kelvin, Kelvin, 300},
		{21.5, Celsius, Celsius, 21.5},
	}
	for _, tt := range tests {
		got, err := Convert(tt.v, tt.from, tt.to)
		if err != nil || got != tt.want {
			t.Errorf("Convert(%v, %s, %s) = %v, %v; want %v", tt.v, tt.from, tt.to, got, err, tt.want)
		}
	}
}

func TestConvertBelowAbsoluteZero(t *testing.T) {
	tests := []struct {
		v    float64
		from Unit
	}{
		{-273.16, Celsius},
		{-459.68, Fahrenheit},
		{-0.01, Kelvin},
		{-1e300, Celsius},
	}
	for _, tt := range tests {
		if got, err := Convert(tt.v, tt.from, Kelvin); err == nil || !strings.Contains(err.Error(), "below absolute zero") {
			t.Errorf("Convert(%v, %s, K) = %v, %v; want a below-absolute-zero error", tt.v, tt.from, got, err)
		}
	}
}

func TestParseUnit(t *testing.T) {
	tests := []struct {
		in   string
		want Unit
	}{
		{"C", Celsius}, {"c", Celsius}, {"celsius", Celsius}, {"Celsius", Celsius}, {"°C", Celsius},
		{"F", Fahrenheit}, {"fahrenheit", Fahrenheit}, {" f ", Fahrenheit},
		{"K", Kelvin}, {"kelvin", Kelvin},
	}
	for _, tt := range tests {
		if got, err := ParseUnit(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseUnit(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "X", "rankine", "CF"} {
		if got, err := ParseUnit(bad); err == nil {
			t.Errorf("ParseUnit(%q) = %q, want an error", bad, got)
		}
	}
}

func TestTools(t *testing.T) {
	c := mcptesting.InProcess(t, New())

	got := mcptesting.ToolNames(t, c)
	slices.Sort(got)
	want := []string{"celsius_to_fahrenheit", "convert_temperature", "fahrenheit_to_celsius"}
	if !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}

	tests := []struct {
		tool     string
		args     map[string]any
		wantText string // exact text, or a substring when wantErr
		wantUnit Unit
		wantErr  bool
	}{
		{"celsius_to_fahrenheit", map[string]any{"celsius": 100}, "212", Fahrenheit, false},
		{"celsius_to_fahrenheit", map[string]any{"celsius": -40}, "-40", Fahrenheit, false},
		{"celsius_to_fahrenheit", map[string]any{"celsius": 37}, "98.6", Fahrenheit, false},
		{"celsius_to_fahrenheit", map[string]any{"celsius": -300}, "below absolute zero", "", true},
		{"celsius_to_fahrenheit", map[string]any{}, `missing required argument "celsius"`, "", true},
		{"fahrenheit_to_celsius", map[string]any{"fahrenheit": 212}, "100", Celsius, false},
		{"fahrenheit_to_celsius", map[string]any{"fahrenheit": -40}, "-40", Celsius, false},
		{"fahrenheit_to_celsius", map[string]any{"fahrenheit": -500}, "below absolute zero (-459.67 °F = 0 K)", "", true},
		{"convert_temperature", map[string]any{"value": 0, "from_unit": "K", "to_unit": "C"}, "-273.15", Celsius, false},
		{"convert_temperature", map[string]any{"value": 0, "from_unit": "C", "to_unit": "K"}, "273.15", Kelvin, false},
		{"convert_temperature", map[string]any{"value": 100, "from_unit": "celsius", "to_unit": "f"}, "212", Fahrenheit, false},
		{"convert_temperature", map[string]any{"value": -1, "from_unit": "K", "to_unit": "C"}, "below absolute zero", "", true},
		{"convert_temperature", map[string]any{"value": 1, "from_unit": "R", "to_unit": "C"}, `argument "from_unit": unknown temperature unit "R"`, "", true},
		{"convert_temperature", map[string]any{"value": 1, "from_unit": "C"}, `"to_unit"`, "", true},
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
		raw, _ := json.Marshal(res.StructuredContent)
		var sc Result
		if err := json.Unmarshal(raw, &sc); err != nil || format(sc.Value) != tt.wantText || sc.Unit != tt.wantUnit {
			t.Errorf("%s(%v) structured content = %s, want value %s unit %s", tt.tool, tt.args, raw, tt.wantText, tt.wantUnit)
		}
	}
}

func TestSchema(t *testing.T) {
	tool := New().GetTool("convert_temperature")
	if tool == nil {
		t.Fatal("no convert_temperature tool")
	}
	for _, key := range []string{"from_unit", "to_unit"} {
		prop, _ := tool.Tool.InputSchema.Properties[key].(map[string]any)
		enum, _ := prop["enum"].([]string)
		if !slices.Equal(enum, []string{"C", "F", "K"}) {
			t.Errorf("%s enum = %v, want [C F K]", key, prop["enum"])
		}
	}
	if !strings.Contains(tool.Tool.Description, "absolute zero") {
		t.Errorf("description should mention absolute zero: %q", tool.Tool.Description)
	}
}
