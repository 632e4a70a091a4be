package index

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/lexical"
	"github.com/toolmesh/toolmesh/services/retriever/store"
	"github.com/toolmesh/toolmesh/services/retriever/store/memory"
)

type param struct{ name, typ, desc string }

func mkTool(server, name, desc string, params ...param) *toolmeshv1.Tool {
	props := map[string]any{}
	var req []any
	for _, p := range params {
		props[p.name] = map[string]any{"type": p.typ, "description": p.desc}
		req = append(req, p.name)
	}
	schema, err := structpb.NewStruct(map[string]any{"type": "object", "properties": props, "required": req})
	if err != nil {
		panic(err)
	}
	return &toolmeshv1.Tool{Id: server + "." + name, Server: server, Name: name, Description: desc, InputSchema: schema}
}

// demoTools are the shipped calculator and converter servers' tools.
func demoTools() []*toolmeshv1.Tool {
	ab := []param{{"a", "number", "First operand"}, {"b", "number", "Second operand"}}
	return []*toolmeshv1.Tool{
		mkTool("calculator", "add", "Add two numbers", ab...),
		mkTool("calculator", "subtract", "Subtract b from a", ab...),
		mkTool("calculator", "multiply", "Multiply two numbers", ab...),
		mkTool("calculator", "divide", "Divide a by b", ab...),
		mkTool("calculator", "calculate", "Evaluate an arithmetic expression such as (2+3)*4",
			param{"expression", "string", "The arithmetic expression to evaluate"}),
		mkTool("converter", "celsius_to_fahrenheit", "Convert a temperature from degrees Celsius to degrees Fahrenheit",
			param{"celsius", "number", "Temperature in degrees Celsius"}),
		mkTool("converter", "fahrenheit_to_celsius", "Convert a temperature from degrees Fahrenheit to degrees Celsius",
			param{"fahrenheit", "number", "Temperature in degrees Fahrenheit"}),
		mkTool("converter", "convert_temperature", "Convert a temperature between Celsius, Fahrenheit and Kelvin",
			param{"value", "number", "The temperature value"}, param{"from_unit", "string", "Unit to convert from"},
			param{"to_unit", "string", "Unit to convert to"}),
	}
}

func newDemo(t testing.TB) *Index {
	t.Helper()
	ix := New(memory.New(), lexical.Default(), nil)
	if err := ix.Upsert(context.Background(), demoTools()); err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestSearchDemoTools(t *testing.T) {
	ix := newDemo(t)
	tests := []struct {
		query   string
		servers []string
		want    string
	}{
		{"convert 30 degrees celsius to fahrenheit", nil, "converter.celsius_to_fahrenheit"},
		{"what is 100 degrees fahrenheit in celsius?", nil, "converter.fahrenheit_to_celsius"},
		{"temperature in kelvin", nil, "converter.convert_temperature"},
		{"multiply 6 by 7", nil, "calculator.multiply"},
		{"add 2 and 3", nil, "calculator.add"},
		{"evaluate (2+3)*4", nil, "calculator.calculate"},
		{"add a temperature", []string{"calculator"}, "calculator.add"},
		{"add a temperature", []string{"converter"}, "converter."},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			got, err := ix.Search(context.Background(), tt.query, 3, tt.servers)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				t.Fatalf("no results")
			}
			first := got[0].GetTool().GetId()
			if first != tt.want && !(tt.want[len(tt.want)-1] == '.' && first[:len(tt.want)] == tt.want) {
				t.Errorf("first = %s, want %s (all: %v)", first, tt.want, idsOf(got))
			}
		})
	}
}

func idsOf(st []*toolmeshv1.ScoredTool) []string {
	out := make([]string, len(st))
	for i, s := range st {
		out[i] = s.GetTool().GetId()
	}
	return out
}

func TestMultiPartRequestCoversEveryPart(t *testing.T) {
	ix := newDemo(t)
	got, err := ix.Search(context.Background(), "Convert 30 degrees celsius to fahrenheit. Then multiply the result by 2.", 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := idsOf(got)
	for _, want := range []string{"converter.celsius_to_fahrenheit", "calculator.multiply"} {
		if !slices.Contains(ids, want) {
			t.Errorf("top 3 %v lacks %s", ids, want)
		}
	}
}

func TestParts(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Add 2 and 3.", []string{"Add 2 and 3."}},
		{"Find the area of a circle. Also get the weather in Paris!", []string{"Find the area of a circle.", "Also get the weather in Paris!"}},
		{"convert units; then call mom", []string{"convert units", "then call mom"}},
		{"Thanks. The end.", []string{"Thanks.", "The end."}},
		{"Hi. 42.", []string{"Hi."}},
	}
	for _, tt := range tests {
		if got := Parts(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("Parts(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestUpsertDeleteHashes(t *testing.T) {
	ctx := context.Background()
	ix := newDemo(t)
	h, err := ix.Hashes(ctx)
	if err != nil || len(h) != 8 || h["calculator.add"] == "" {
		t.Fatalf("Hashes = %v, %v", h, err)
	}
	tl := demoTools()[0]
	tl.Description = "Sum two numbers"
	if Hash(tl) == h["calculator.add"] {
		t.Errorf("hash unchanged after a description change")
	}
	if err := ix.Delete(ctx, []string{"converter.celsius_to_fahrenheit"}); err != nil {
		t.Fatal(err)
	}
	got, _ := ix.Search(ctx, "celsius to fahrenheit", 8, nil)
	if slices.Contains(idsOf(got), "converter.celsius_to_fahrenheit") {
		t.Errorf("deleted tool still found: %v", idsOf(got))
	}
	if err := ix.Upsert(ctx, []*toolmeshv1.Tool{{Name: "noid"}}); err == nil {
		t.Errorf("Upsert without id: want an error")
	}
	if _, err := ix.Search(ctx, "the of", 3, nil); !errors.Is(err, ErrEmptyQuery) {
		t.Errorf("stop-word query: err %v, want ErrEmptyQuery", err)
	}
	if ix.Name() != lexical.Default().ID() {
		t.Errorf("Name = %q", ix.Name())
	}
}

type fakeDense struct{ calls, texts int }

func (f *fakeDense) Embed(_ context.Context, texts []string) ([][]float32, error) {
	f.calls++
	f.texts += len(texts)
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = []float32{float32(len(t)), 1}
	}
	return out, nil
}
func (f *fakeDense) Model() string { return "fake" }
func (f *fakeDense) Dim() int      { return 2 }

func TestDenseBatching(t *testing.T) {
	f := &fakeDense{}
	ix := New(memory.New(), lexical.Default(), f)
	var tools []*toolmeshv1.Tool
	for i := range 70 {
		tools = append(tools, mkTool("s", fmt.Sprintf("tool_%d", i), "does things"))
	}
	if err := ix.Upsert(context.Background(), tools); err != nil {
		t.Fatal(err)
	}
	if f.calls != 3 || f.texts != 70 {
		t.Errorf("embed calls %d texts %d, want 3 calls (batches of %d) and 70 texts", f.calls, f.texts, EmbedBatch)
	}
	if _, err := ix.Search(context.Background(), "things", 3, nil); err != nil {
		t.Fatal(err)
	}
	if want := lexical.Default().ID() + "+fake/2"; ix.Name() != want {
		t.Errorf("Name = %q, want %q", ix.Name(), want)
	}
}

// BenchmarkSearch10k searches 10,000 tools (the demo tools' vocabulary spread over synthetic
// names) with the default options.
func BenchmarkSearch10k(b *testing.B) {
	ctx := context.Background()
	ix := New(memory.New(), lexical.Default(), nil)
	words := []string{"weather", "stock", "price", "convert", "currency", "temperature", "area", "circle",
		"triangle", "distance", "route", "flight", "hotel", "book", "search", "recipe", "movie", "music",
		"calendar", "event", "email", "send", "file", "upload", "translate", "text", "image", "resize"}
	var tools []*toolmeshv1.Tool
	for i := range 10000 {
		a, c, d := words[i%len(words)], words[(i/7)%len(words)], words[(i/31)%len(words)]
		tools = append(tools, mkTool(fmt.Sprintf("s%d", i%50), fmt.Sprintf("%s_%s_%d", a, c, i),
			fmt.Sprintf("Get the %s for a %s and %s, tool number %d.", a, c, d, i),
			param{"query", "string", "The " + d + " to look up"}, param{"limit", "integer", "How many " + c}))
	}
	for lo := 0; lo < len(tools); lo += 1000 {
		if err := ix.Upsert(ctx, tools[lo:lo+1000]); err != nil {
			b.Fatal(err)
		}
	}
	queries := []string{"what is the weather in Paris", "convert 100 dollars to euros",
		"find a flight and book a hotel. Then translate the email text.", "resize this image file"}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := ix.Search(ctx, queries[i%len(queries)], 10, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCapParts(t *testing.T) {
	lex := lexical.Default()
	_, parts := lex.QueryParts("Find the area of a circle. Convert 10 celsius to fahrenheit. Then get the weather in Paris. Also book a flight to Rome. And translate hello to French. Finally compute the gcd of 12 and 18.")
	if len(parts) != 6 {
		t.Fatalf("got %d parts, want 6", len(parts))
	}
	total := func(ps []map[string]store.SparseVector) float64 {
		s := 0.0
		for _, p := range ps {
			for _, v := range p[lexical.VectorWords].Values {
				s += float64(v)
			}
		}
		return s
	}
	capped := capParts(parts, 4)
	if len(capped) != 4 {
		t.Fatalf("got %d parts, want 4", len(capped))
	}
	if a, b := total(parts), total(capped); a != b {
		t.Errorf("word counts %v, after capping %v", a, b)
	}
	if len(parts) != 6 {
		t.Errorf("capParts changed its argument")
	}
	if got := capParts(parts[:3], 4); len(got) != 3 {
		t.Errorf("short request capped to %d parts", len(got))
	}
}
