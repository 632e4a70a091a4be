package lexical

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

func TestWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"get_current_weather", []string{"get", "current", "weather"}},
		{"getCurrentWeather", []string{"get", "current", "weather"}},
		{"HTTPServerError", []string{"http", "server", "error"}},
		{"math.factorial", []string{"math", "factorial"}},
		{"celsius-to-fahrenheit", []string{"celsius", "to", "fahrenheit"}},
		{"mp3Player v2", []string{"mp", "3", "player", "v", "2"}},
		{"Café Zürich, ÉCOLE", []string{"cafe", "zurich", "ecole"}},
		{"Straße", []string{"strasse"}},
		{"What's the weather?", []string{"what", "s", "the", "weather"}},
		{"東京の天気", []string{"東", "京", "の", "天", "気"}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := Words(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("Words(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTerms(t *testing.T) {
	tests := []struct {
		in    string
		query bool
		want  []string
	}{
		{"Converts temperatures", false, []string{"convert", "temperatur"}},
		{"convert 30 degrees celsius to fahrenheit", true, []string{"convert", "degre", "celsius", "fahrenheit"}},
		{"convert 30 degrees", false, []string{"convert", "30", "degre"}},
		{"What is the running total of the numbers?", true, []string{"run", "total", "number"}},
		{"get_stock_prices x", false, []string{"get", "stock", "price"}},
		{"the of and", true, nil},
	}
	for _, tt := range tests {
		if got := Terms(tt.in, tt.query); !slices.Equal(got, tt.want) {
			t.Errorf("Terms(%q, %v) = %q, want %q", tt.in, tt.query, got, tt.want)
		}
	}
}

func tool(name, desc string, params map[string]any) *toolmeshv1.Tool {
	schema, err := structpb.NewStruct(map[string]any{"type": "object", "properties": params})
	if err != nil {
		panic(err)
	}
	return &toolmeshv1.Tool{Id: "s." + name, Server: "s", Name: name, Description: desc, InputSchema: schema}
}

// score is Σ idf·q·d over every vector, with idf 1 and the encoder's fusion weights.
func score(e *Encoder, q map[string]store.SparseVector, d map[string]store.SparseVector) float64 {
	total := 0.0
	for name, w := range e.Weights() {
		qv, dv := q[name], d[name]
		i, j := 0, 0
		for i < len(qv.Indices) && j < len(dv.Indices) {
			switch {
			case qv.Indices[i] < dv.Indices[j]:
				i++
			case qv.Indices[i] > dv.Indices[j]:
				j++
			default:
				total += w * float64(qv.Values[i]) * float64(dv.Values[j])
				i++
				j++
			}
		}
	}
	return total
}

func TestBM25FNameBeatsDescription(t *testing.T) {
	e := Default()
	byName := tool("get_forecast", "Returns data for a city.", nil)
	byDesc := tool("city_data", "Returns the forecast for a city.", nil)
	q := e.Query("forecast")
	if a, b := score(e, q, e.Document(byName)), score(e, q, e.Document(byDesc)); a <= b {
		t.Errorf("name match scored %.3f, description-only match %.3f; want the name match higher", a, b)
	}
}

func TestBM25FSaturationAndLength(t *testing.T) {
	e := New(func() Config { c := DefaultConfig(); c.CharN = 0; return c }())
	q := e.Query("weather")
	short := tool("a", "weather report", nil)
	long := tool("b", "weather report with many other words about cities countries regions and their many properties of all kinds here", nil)
	if a, b := score(e, q, e.Document(short)), score(e, q, e.Document(long)); a <= b {
		t.Errorf("short doc %.3f <= long doc %.3f; want length normalization to favour the short one", a, b)
	}
	once := e.Document(tool("c", "weather", nil))[VectorWords]
	many := e.Document(tool("c", "weather weather weather weather weather weather weather weather", nil))[VectorWords]
	if many.Values[0] > float32(e.cfg.K1+1) || many.Values[0] <= once.Values[0] {
		t.Errorf("tf weights once %.3f, many %.3f; want many > once and bounded by k1+1", once.Values[0], many.Values[0])
	}
}

func TestParametersAndEnums(t *testing.T) {
	e := Default()
	withEnum := tool("convert", "Convert a value.", map[string]any{
		"unit": map[string]any{"type": "string", "description": "Target unit.", "enum": []any{"celsius", "kelvin"}},
	})
	other := tool("transform", "Convert a value.", map[string]any{
		"unit": map[string]any{"type": "string", "description": "Target unit."},
	})
	q := e.Query("to kelvin")
	if a, b := score(e, q, e.Document(withEnum)), score(e, q, e.Document(other)); a <= b {
		t.Errorf("enum match %.3f <= no match %.3f", a, b)
	}
}

func TestVectorsSortedAndDeterministic(t *testing.T) {
	e := Default()
	tl := tool("getWeather", "Get the current weather in a city, in Celsius or Fahrenheit.", map[string]any{
		"city": map[string]any{"type": "string", "description": "City name"},
		"unit": map[string]any{"type": "string", "enum": []any{"celsius", "fahrenheit"}},
	})
	a, b := e.Document(tl), e.Document(tl)
	for name, v := range a {
		if !slices.IsSorted(v.Indices) || len(v.Indices) != len(v.Values) || len(v.Indices) == 0 {
			t.Errorf("%s: indices not sorted or sizes differ", name)
		}
		for i := 1; i < len(v.Indices); i++ {
			if v.Indices[i] == v.Indices[i-1] {
				t.Errorf("%s: duplicate index", name)
			}
		}
		if !slices.Equal(v.Indices, b[name].Indices) || !slices.Equal(v.Values, b[name].Values) {
			t.Errorf("%s: encoding not deterministic", name)
		}
	}
	if got, want := Hash("a"), uint32(0xe40c292c); got != want { // FNV-1a 32 test vector
		t.Errorf("Hash(%q) = %#x, want %#x", "a", got, want)
	}
}

func TestIDChangesWithConfig(t *testing.T) {
	c := DefaultConfig()
	c.K1 = 1.5
	if Default().ID() == New(c).ID() {
		t.Errorf("ID unchanged after a config change: %s", Default().ID())
	}
	if Default().ID() != Default().ID() {
		t.Errorf("ID not stable")
	}
}

func TestEmptyQuery(t *testing.T) {
	for name, v := range Default().Query("the of 42") {
		if len(v.Indices) != 0 {
			t.Errorf("%s: %d terms for a query of stop words and numbers", name, len(v.Indices))
		}
	}
}
