package gorilla

import (
	"bufio"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/inference/gorilla/gbnf"
	"github.com/toolmesh/toolmesh/services/inference/llama"
)

type sampleCase struct {
	QID       string            `json:"qid"`
	Functions []json.RawMessage `json:"functions"`
	Output    string            `json:"output"`
	Calls     []struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	} `json:"calls"`
}

func readSample(t testing.TB) []sampleCase {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "bfcl-sample.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []sampleCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c sampleCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// sampleTools turns BFCL functions into tools as they are (BFCL's "dict"/"float" types are
// understood by the grammar builder).
func sampleTools(t testing.TB, fns []json.RawMessage) []*toolmeshv1.Tool {
	t.Helper()
	var tools []*toolmeshv1.Tool
	for _, raw := range fns {
		var f struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatal(err)
		}
		st, err := structpb.NewStruct(f.Parameters)
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, &toolmeshv1.Tool{Id: f.Name, Description: f.Description, InputSchema: st})
	}
	return tools
}

// TestBFCLSample parses ground-truth calls rendered by Python's repr (an independent renderer)
// and checks the grammar takes them.
func TestBFCLSample(t *testing.T) {
	for _, c := range readSample(t) {
		cat := mustBuild(t, sampleTools(t, c.Functions))
		got, _, err := cat.Parse(c.Output)
		if err != nil {
			t.Errorf("%s: %v", c.QID, err)
			continue
		}
		if len(got) != len(c.Calls) {
			t.Errorf("%s: %d calls, want %d", c.QID, len(got), len(c.Calls))
			continue
		}
		for i, w := range c.Calls {
			if got[i].ToolID != w.Name || !sameJSON(got[i].Arguments, w.Arguments) {
				t.Errorf("%s: call %d = %v %v, want %v %v", c.QID, i, got[i].ToolID, got[i].Arguments, w.Name, w.Arguments)
			}
		}
		// The grammar wants keyword arguments in schema order: re-render ours.
		var out strings.Builder
		for _, call := range got {
			s, err := cat.Render(call)
			if err != nil {
				t.Fatal(err)
			}
			out.WriteString(s)
		}
		g, err := gbnf.Parse(cat.Grammar())
		if err != nil {
			t.Fatalf("%s: grammar: %v", c.QID, err)
		}
		if ok, at, _ := g.Match(out.String()); !ok {
			t.Errorf("%s: grammar refuses %q at byte %d", c.QID, out.String(), at)
		}
	}
}

// sameJSON compares after a JSON round trip (numbers by value).
func sameJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		return false
	}
	var x, y any
	_ = json.Unmarshal(ja, &x)
	_ = json.Unmarshal(jb, &y)
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return string(xs) == string(ys)
}

func FuzzParse(f *testing.F) {
	for _, c := range readSample(f) {
		f.Add(c.Output)
	}
	for _, s := range []string{
		"", "plain answer", "<<function>>", "<<function>>calculator.add(a=1, b=2)",
		`<<function>>weather.get(location="it's \"here\"\n\t\\ \x41\u00e9\U0001F600\101", unit='<<function>>')`,
		`<<function>>calculator.add(a=[1, -2.5, True, None, (1,), {1, 2}, {'k': [{}]}], b=(0x1F, 0o17, 0b101, 1_000, .5, 5., 1E-3))`,
		"<<function>>calculator.add(a=math.pi, b=float('inf'))", "<<function>>x(''' ", `<<function>>weather.get(r'\`,
	} {
		f.Add(s)
	}
	tools := parserTools(f)
	for _, c := range readSample(f) {
		tools = append(tools, sampleTools(f, c.Functions)...)
	}
	// Drop duplicate ids (the same BFCL function appears in several cases).
	seen := map[string]bool{}
	uniq := tools[:0]
	for _, t := range tools {
		if !seen[t.Id] {
			seen[t.Id] = true
			uniq = append(uniq, t)
		}
	}
	cat := mustBuild(f, uniq)
	f.Fuzz(func(t *testing.T, out string) {
		calls, answer, err := cat.Parse(out)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(out) {
				t.Fatalf("error %v is not a SyntaxError within the output (len %d)", err, len(out))
			}
			return
		}
		if len(calls) == 0 && strings.Contains(out, fnDelim) {
			t.Fatalf("calls expected from %q", out)
		}
		if len(calls) > 0 && answer != "" {
			t.Fatalf("both calls and an answer from %q", out)
		}
		for _, c := range calls {
			if _, ok := cat.byID[c.ToolID]; !ok {
				t.Fatalf("call to unknown tool %q", c.ToolID)
			}
			if _, err := json.Marshal(c.Arguments); err != nil && !hasNaN(c.Arguments) {
				t.Fatalf("arguments do not marshal: %v", err)
			}
			// What Render writes, Parse reads back the same.
			s, err := cat.Render(c)
			if err != nil {
				continue // NaN-like values have no literal
			}
			back, _, err := cat.Parse(s)
			if err != nil || len(back) != 1 || !sameJSON(back[0].Arguments, c.Arguments) {
				t.Fatalf("Render/Parse round trip of %#v: %q -> %#v, %v", c, s, back, err)
			}
		}
	})
}

func hasNaN(v any) bool {
	switch v := v.(type) {
	case float64:
		return math.IsNaN(v) || math.IsInf(v, 0)
	case []any:
		for _, e := range v {
			if hasNaN(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range v {
			if hasNaN(e) {
				return true
			}
		}
	}
	return false
}

// grammarSeed is one input of FuzzGrammar: a tool id and its JSON Schema text.
type grammarSeed struct{ id, schema string }

// grammarSeeds are FuzzGrammar's seeds: every function of the BFCL sample, then schemas written
// to reach the grammar builder's corners.
func grammarSeeds(t testing.TB) []grammarSeed {
	var seeds []grammarSeed
	for _, c := range readSample(t) {
		for _, raw := range c.Functions {
			var fn struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			}
			if json.Unmarshal(raw, &fn) == nil {
				seeds = append(seeds, grammarSeed{fn.Name, string(fn.Parameters)})
			}
		}
	}
	for _, s := range []string{
		`{}`, `{"type":"object"}`, `{"type":"object","additionalProperties":{"type":"integer"}}`,
		`{"properties":{"a":{"$ref":"#/properties/a"}},"required":["a","b","a"]}`,
		`{"properties":{"x":{"anyOf":[{"type":"string"},{"type":"null"}],"nullable":true},"y":{"enum":[]},"z":{"const":{"a":[1]}}}}`,
		`{"properties":{"deep":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"object","properties":{"q":{"type":"string"}}}}}}}}}}`,
		`{"properties":{"\"weird\\ key\n":{"type":"string","enum":["a\"b","c'd","\u0000"]}},"required":["\"weird\\ key\n"]}`,
		`{"type":["object","array"],"properties":7,"required":"a"}`,
	} {
		seeds = append(seeds, grammarSeed{"srv.tool-name", s})
	}
	return seeds
}

// grammarInput is what FuzzGrammar builds catalogs of for one input: two tools sharing the
// schema, and the options of each build (the first small and unsized, the others as the
// input picks them); ok is false when the schema is not a JSON object.
func grammarInput(id, schema string) (tools []*toolmeshv1.Tool, m map[string]any, opts []Options, ok bool) {
	if id == "" {
		id = "x"
	}
	if json.Unmarshal([]byte(schema), &m) != nil {
		return nil, nil, nil, false
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		return nil, nil, nil, false
	}
	tools = []*toolmeshv1.Tool{
		{Id: id, Description: schema, InputSchema: st},
		{Id: id + ".2", InputSchema: st},
	}
	// Small tops keep the grammars, and each run of the fuzzer, small.
	budget := 16 + len(schema)*7%1000
	opts = []Options{
		{MaxStringLen: 16, MaxItems: 4, MaxDepth: 2},
		{MaxStringLen: 16, MaxItems: 4, MaxDepth: 2, MaxCalls: 1 + len(id)%3, CallsOnly: true},
		{MaxStringLen: 64, MaxItems: 8, MaxDepth: 3, MaxCalls: 8, MaxBytes: budget, CallsOnly: len(schema)%2 == 0},
	}
	return tools, m, opts, true
}

// FuzzGrammar builds catalogs from arbitrary schemas: Build never fails or panics on them, and
// every grammar loads in package gbnf, the project's recognizer that follows llama.cpp's
// grammar parser and its checks. That llama-server itself loads them is checked on a sample of
// the seeds by TestGrammarsLoadInLlamaServer (with a real llama-server only).
func FuzzGrammar(f *testing.F) {
	for _, s := range grammarSeeds(f) {
		f.Add(s.id, s.schema)
	}
	f.Fuzz(func(t *testing.T, id, schema string) {
		tools, m, opts, ok := grammarInput(id, schema)
		if !ok {
			return
		}
		id = tools[0].Id
		cat, err := BuildWith(tools, opts[0])
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		g, err := gbnf.Parse(cat.Grammar())
		if err != nil {
			t.Fatalf("grammar does not load: %v\n%s", err, cat.Grammar())
		}
		_ = cat.Prompt("q", []Step{{ToolID: id, Arguments: m, Output: schema}})
		// A call with no arguments is in the grammar exactly when no argument is required.
		name, _ := cat.Name(id)
		ok, _, err = g.Match(fnDelim + name + "()")
		if err != nil {
			t.Fatal(err)
		}
		if want := !anyRequired(cat, id); ok != want && !cat.byID[id].freeArgs {
			t.Fatalf("grammar on %s() = %v, want %v\n%s", name, ok, want, cat.Grammar())
		}
		// The length model agrees with the grammar's longest sentence, and a grammar sized to a
		// budget has no longer sentence.
		for _, o := range opts[1:] {
			c, err := BuildWith(tools, o)
			if err != nil {
				if o.CallsOnly && o.MaxBytes > 0 && errors.Is(err, ErrNoCallFits) {
					continue
				}
				t.Fatalf("Build %+v: %v", o, err)
			}
			g, err := gbnf.Parse(c.Grammar())
			if err != nil {
				t.Fatalf("%+v: grammar does not load: %v\n%s", o, err, c.Grammar())
			}
			n, finite := g.MaxLen("root")
			if !finite || n != c.MaxResponseBytes() || o.MaxBytes > 0 && n > o.MaxBytes {
				t.Fatalf("%+v: the grammar admits %d bytes (finite %v), the catalog says %d\n%s", o, n, finite, c.MaxResponseBytes(), c.Grammar())
			}
		}
	})
}

func anyRequired(c *Catalog, id string) bool {
	for _, p := range c.byID[id].params {
		if p.required {
			return true
		}
	}
	return false
}

// BenchmarkStep is the Gorilla work of one model step for 8 tools, as the inference service's
// Generate does it: a catalog unsized (for the prompt) and one sized to n_predict (for the
// grammar), the prompt, the grammar, and the parse of a two-call output.
//
//   - cold: both catalogs built, as on the first step with a tool set (sizing the grammar is
//     most of it);
//   - cached: both catalogs already built, as on later steps with the same tools at the same
//     budget, when the service's catalog cache answers (its lookup, a key of the tools' ids
//     and hashes and one map read, is not included).
func BenchmarkStep(b *testing.B) {
	tools := benchTools(b)
	sized := DefaultOptions
	// The service's n_predict ceiling (llama.DefaultNPredict), which it keeps when the context
	// has room; MaxBytes = n_predict - 1 as Generate sizes it.
	sized.MaxBytes = llama.DefaultNPredict - 1
	cat := mustBuild(b, tools)
	p0, p1 := cat.byID[tools[0].Id], cat.byID[tools[1].Id]
	out := fnDelim + p0.name + "(" + exampleArgs(p0) + ")" + fnDelim + p1.name + "(" + exampleArgs(p1) + ")"
	const query = "Find the area of a triangle with a base of 10 units and height of 5 units."
	build := func(b *testing.B) (unsized, grammar *Catalog) {
		unsized, err := Build(tools)
		if err != nil {
			b.Fatal(err)
		}
		if grammar, err = BuildWith(tools, sized); err != nil {
			b.Fatal(err)
		}
		return unsized, grammar
	}
	step := func(b *testing.B, unsized, grammar *Catalog) {
		_ = unsized.Prompt(query, nil)
		_ = grammar.Grammar()
		if _, _, err := grammar.Parse(out); err != nil {
			b.Fatalf("%s: %v", out, err)
		}
	}
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			unsized, grammar := build(b)
			step(b, unsized, grammar)
		}
	})
	b.Run("cached", func(b *testing.B) {
		unsized, grammar := build(b)
		b.ReportAllocs()
		for b.Loop() {
			step(b, unsized, grammar)
		}
	})
}

// benchTools are the first 8 tools of the BFCL sample, with ids made unique.
func benchTools(b *testing.B) []*toolmeshv1.Tool {
	var tools []*toolmeshv1.Tool
	for _, c := range readSample(b) {
		for _, t := range sampleTools(b, c.Functions) {
			if len(tools) < 8 {
				t.Id = "bfcl" + strconv.Itoa(len(tools)) + "." + strings.ReplaceAll(t.Id, ".", "_")
				tools = append(tools, t)
			}
		}
	}
	return tools
}

// BenchmarkBuildSized is Build of the same 8 tools with the grammar sized to n_predict 512
// (the service's default) and 1024.
func BenchmarkBuildSized(b *testing.B) {
	tools := benchTools(b)
	for _, n := range []int{512, 1024} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			opts := DefaultOptions
			opts.MaxBytes = n - 1
			b.ReportAllocs()
			for b.Loop() {
				if _, err := BuildWith(tools, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func exampleArgs(f *function) string {
	var parts []string
	for _, p := range f.params {
		if p.required {
			parts = append(parts, p.name+"='x'")
		}
	}
	return strings.Join(parts, ", ")
}
