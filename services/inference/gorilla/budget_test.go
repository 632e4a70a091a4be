package gorilla

import (
	"fmt"
	"strings"
	"testing"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/inference/gorilla/gbnf"
)

// budgetTools cover every kind of value the grammar writes: numbers, enums, text arguments,
// lists, typed and free-form dicts, $refs, unions, nested lists, free keyword arguments.
func budgetTools(t testing.TB) []*toolmeshv1.Tool {
	return append(append(parserTools(t), mappedTools(t)...),
		tool(t, "mail.send", "", `{"type":"object","properties":{"to":{"type":"string"},"cc":{"type":"string"},"subject":{"type":"string"},
			"body":{"type":"string"},"urgent":{"type":"boolean"}},"required":["to","subject","body"]}`),
		tool(t, "db.query", "", `{"type":"object","properties":{"filter":{"$ref":"#/$defs/F"},"opt":{"anyOf":[{"type":"integer"},{"type":"null"}]},"any":{}},"required":["filter"],
			"$defs":{"F":{"type":"object","properties":{"field":{"type":"string"},"op":{"enum":["=",">"]}},"required":["field","op"]}}}`),
		tool(t, "free.kw", "", `{"type":"object","additionalProperties":true}`),
		tool(t, "stats.weights", "", `{"type":"object","properties":{"w":{"type":"object","additionalProperties":{"type":"number"}},"tags":{"type":"object"}}}`),
		tool(t, "matrix.solve", "", `{"type":"object","properties":{"rows":{"type":"array","items":{"type":"array","items":{"type":"integer"}}},"note":{"type":["string","null"]}},"required":["rows"]}`),
	)
}

// longest is the most bytes of a sentence of g, as a recognizer that follows llama.cpp sees it.
func longest(t *testing.T, grammar string) int {
	t.Helper()
	g, err := gbnf.Parse(grammar)
	if err != nil {
		t.Fatalf("grammar does not load: %v\n%s", err, grammar)
	}
	n, finite := g.MaxLen("root")
	if !finite {
		t.Fatalf("the grammar's language is unbounded:\n%s", grammar)
	}
	return n
}

// TestLengthModel checks the length of every tool's longest call, as the fit computes it from
// its shapes, against the longest sentence of a grammar with that one call, under several
// limits (with the long text limit above the others, and not).
func TestLengthModel(t *testing.T) {
	for _, lim := range []limits{
		{str: 1000, items: 64, depth: 4, digits: 17, long: 1000},
		{str: 7, items: 3, depth: 2, digits: 4, long: 50},
		{str: 0, items: 1, depth: 1, digits: 1, long: 1},
		{str: 3, items: 0, depth: 0, digits: 2, long: 3},
		{str: 12, items: 5, depth: 3, digits: 9, long: 12},
	} {
		for _, tl := range budgetTools(t) {
			c := mustBuild(t, []*toolmeshv1.Tool{tl})
			f := c.funcs[0]
			grammar := buildGrammar([]class{{units: 1, funcs: []*function{f}, lim: []limits{lim}}}, 1, 0, true)
			if got, want := len(fnDelim)+functionLen(f, lim), longest(t, grammar); got != want {
				t.Errorf("%s under %+v: the length model says %d bytes, the grammar's longest sentence has %d", tl.GetId(), lim, got, want)
			}
		}
	}
}

// TestGrammarSizedToBudget: with MaxBytes, no sentence of the grammar is longer than it, and
// the catalog says exactly how long the longest is; the calls real requests make still fit.
func TestGrammarSizedToBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tools  []*toolmeshv1.Tool
		budget int
		accept []string
		refuse []string
	}{
		{name: "calculator in 63 bytes", tools: parserTools(t), budget: 63,
			accept: []string{"<<function>>calculator.add(a=2, b=3)", "Five.", "<<function>>noargs.ping()<<function>>noargs.ping()"},
			refuse: []string{"<<function>>calculator.add(a=2, b=3)<<function>>calculator.add(a=4, b=5)", strings.Repeat("x", 64)}},
		{name: "one long text among short strings", tools: only(t, budgetTools(t), "mail.send"), budget: 511,
			accept: []string{"<<function>>mail.send(to='a@b.c', subject='Hi', body='" + strings.Repeat("b", 300) + "')",
				"<<function>>mail.send(to='a@b.c', subject='" + strings.Repeat("s", 300) + "', body='short')"},
			refuse: []string{"<<function>>mail.send(to='a@b.c', subject='" + strings.Repeat("s", 300) + "', body='" + strings.Repeat("b", 300) + "')"}},
		{name: "a long call and short ones", tools: only(t, budgetTools(t), "mail.send"), budget: 1023,
			accept: []string{"<<function>>mail.send(to='a@b.c', subject='Hi', body='" + strings.Repeat("b", 180) + "')" +
				strings.Repeat("<<function>>mail.send(to='x@y.z', subject='Hi', body='ok')", 3)}},
		{name: "every kind of value", tools: budgetTools(t), budget: 511,
			accept: []string{"<<function>>db.query(filter={'field': 'age', 'op': '>'}, any=[1, {'k': None}], opt=None)",
				"<<function>>matrix.solve(rows=[[1, 2], [3, 4]])"}},
		{name: "tiny budget", tools: budgetTools(t), budget: 5, accept: []string{"Yes."}},
		{name: "large budget", tools: budgetTools(t), budget: 4095},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, callsOnly := range []bool{false, true} {
				opts := DefaultOptions
				opts.MaxBytes, opts.CallsOnly = tc.budget, callsOnly
				c, err := BuildWith(tc.tools, opts)
				if callsOnly && err != nil {
					if len(tc.accept) > 0 && strings.HasPrefix(tc.accept[0], fnDelim) {
						t.Fatalf("calls only: %v", err)
					}
					continue // no call fits at all: refused, as documented
				}
				if err != nil {
					t.Fatal(err)
				}
				n := longest(t, c.Grammar())
				if n > tc.budget || n != c.MaxResponseBytes() {
					t.Errorf("calls only %v: the grammar admits %d bytes, the catalog says %d, the budget is %d\n%s",
						callsOnly, n, c.MaxResponseBytes(), tc.budget, strings.Join(c.Limits(), "\n"))
				}
				if callsOnly {
					continue
				}
				g, _ := gbnf.Parse(c.Grammar())
				for _, in := range tc.accept {
					if ok, at, err := g.Match(in); !ok || err != nil {
						t.Errorf("refuses %.80q at byte %d (%v)\n%s", in, at, err, strings.Join(c.Limits(), "\n"))
					}
					if _, _, err := c.Parse(in); err != nil {
						t.Errorf("%.60q does not parse: %v", in, err)
					}
				}
				for _, in := range tc.refuse {
					if ok, _, _ := g.Match(in); ok {
						t.Errorf("accepts %.80q", in)
					}
				}
			}
		})
	}
}

// TestUncallable: a tool whose least call does not fit is left out of the grammar and named.
func TestUncallable(t *testing.T) {
	tools := []*toolmeshv1.Tool{
		tool(t, "short.x", "", `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`),
		tool(t, "very_long_server_name.with_a_very_long_tool_name", "", `{"type":"object","properties":{"first_argument":{"type":"string"},"second_argument":{"type":"string"}},"required":["first_argument","second_argument"]}`),
	}
	opts := DefaultOptions
	opts.MaxBytes = 40
	c, err := BuildWith(tools, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Uncallable(); len(got) != 1 || got[0] != tools[1].GetId() {
		t.Errorf("uncallable = %v, want the long one", got)
	}
	if strings.Contains(c.Grammar(), "with_a_very_long_tool_name(") || !strings.Contains(c.Grammar(), `"short.x("`) {
		t.Errorf("grammar:\n%s", c.Grammar())
	}
	opts.MaxBytes, opts.CallsOnly = 10, true
	if _, err := BuildWith(tools, opts); err == nil {
		t.Error("calls only, and no call fits: no error")
	}
}

// TestFitKeepsWhatRealCallsNeed: the limits a fit chooses for a typical tool leave room for
// the values real calls have (BFCL: strings up to about 24 bytes besides one longer text,
// lists of up to 20, numbers of 12 digits).
func TestFitKeepsWhatRealCallsNeed(t *testing.T) {
	c := mustBuild(t, budgetTools(t))
	for _, tc := range []struct {
		id     string
		budget int
		want   limits // at least
	}{
		{"calculator.add", 100, limits{digits: 12}},
		{"weather.get", 60, limits{str: 24, long: 24}},
		{"mail.send", 200, limits{str: 20, long: 56}},
		{"mail.send", 500, limits{str: 24, long: 256}},
		{"github.create_issue", 300, limits{str: 16, long: 32, items: 5, digits: 6}},
	} {
		f := c.byID[tc.id]
		top := limits{str: 1000, items: 64, depth: 4, digits: 17, long: 1000}
		got, ok := fit(f, top, tc.budget)
		if !ok || functionLen(f, got) > tc.budget {
			t.Errorf("%s in %d bytes: %+v (%d bytes), %v", tc.id, tc.budget, got, functionLen(f, got), ok)
			continue
		}
		if !got.covers(tc.want) || got.long < tc.want.long {
			t.Errorf("%s in %d bytes: %+v, want at least %+v", tc.id, tc.budget, got, tc.want)
		}
	}
}

func TestUnitCounts(t *testing.T) {
	for units, want := range map[int]string{1: "[1]", 2: "[1 2]", 5: "[1 2 3 4 5]", 16: "[1 2 3 4 6 8 12 16]", 40: "[1 2 3 4 6 8 12 16 24 32 40]"} {
		if got := fmt.Sprint(unitCounts(units)); got != want {
			t.Errorf("unitCounts(%d) = %s, want %s", units, got, want)
		}
	}
}

// only is the tool of tools with the given id.
func only(t *testing.T, tools []*toolmeshv1.Tool, id string) []*toolmeshv1.Tool {
	t.Helper()
	for _, tl := range tools {
		if tl.GetId() == id {
			return []*toolmeshv1.Tool{tl}
		}
	}
	t.Fatalf("no tool %s", id)
	return nil
}

// TestRequiredKeys: a dict whose schema requires keys (with or without a property for them,
// as BFCL writes some) is written with those keys, also past the depth limit, where it has
// only them.
func TestRequiredKeys(t *testing.T) {
	tools := []*toolmeshv1.Tool{tool(t, "waste.calc", "", `{"type":"object","properties":{
		"population":{"type":"object","required":["adults","children"]},
		"site":{"type":"object","properties":{"home":{"type":"object","properties":{"rooms":{"type":"integer"},"size":{"type":"number"}},"required":["rooms"]}},"required":["home"]}},
		"required":["population"]}`)}
	const pop = "<<function>>waste.calc(population={'adults': 2, 'children': 1}"
	for _, o := range []Options{DefaultOptions, {MaxDepth: 1}} {
		c, err := BuildWith(tools, o)
		if err != nil {
			t.Fatal(err)
		}
		g, err := gbnf.Parse(c.Grammar())
		if err != nil {
			t.Fatal(err)
		}
		for in, want := range map[string]bool{
			pop + ")": true,
			"<<function>>waste.calc(population={'adults': 2, 'children': 'x'})": true,
			"<<function>>waste.calc(population={})":                             false,
			"<<function>>waste.calc(population={'adults': 2})":                  false,
			"<<function>>waste.calc(population={'children': 1, 'adults': 2})":   false, // schema order
			pop + ", site={'home': {'rooms': 3}})":                              true,
			pop + ", site={'home': {}})":                                        false,
			pop + ", site={'home': {'rooms': 3, 'size': 1.5}})":                 o.MaxDepth != 1, // past the depth limit
		} {
			if ok, at, _ := g.Match(in); ok != want {
				t.Errorf("depth %d: grammar on %q = %v (at %d), want %v", o.MaxDepth, in, ok, at, want)
			}
		}
		call := Call{ToolID: "waste.calc", Arguments: map[string]any{"population": map[string]any{"children": 1.0, "adults": 2.0}}}
		if s, err := c.Render(call); err != nil || s != pop+")" {
			t.Errorf("Render = %q, %v", s, err)
		}
	}
}
