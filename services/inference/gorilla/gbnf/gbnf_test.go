package gbnf

import "testing"

func TestMatch(t *testing.T) {
	g, err := Parse(`root ::= "a" b{2,3} [^x\n] | "(" ( "z" | [0-9] )* ")"
b ::= [a-c]
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"abbq", true}, {"abbbq", true}, {"abq", false}, {"abbbbq", false}, {"abbx", false},
		{"()", true}, {"(z1z)", true}, {"(a)", false}, {"(", false},
	} {
		got, _, err := g.Match(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Match(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, src := range []string{
		`root ::= foo`,
		`root ::= "a" | b` + "\nb ::= b \"x\"\n",
		`rot ::= "a"`,
		`root ::= "a"{2001}` + "\n",
		`root ::= "a\q"`,
		`root ::= [a`,
		`root ::= ( "a" `,
		`root ::= "a"` + "\n" + `  "b"`,
		`Root_x ::= "a"`,
	} {
		if _, err := Parse(src); err == nil {
			t.Errorf("Parse(%q) = nil error", src)
		}
	}
}

func TestMaxLen(t *testing.T) {
	for _, tc := range []struct {
		src    string
		rule   string
		want   int
		finite bool
	}{
		{`root ::= "ab" | "c"`, "root", 2, true},
		{`root ::= [a-c]{2,5} "é"`, "root", 7, true},
		{`root ::= [\u0800-\uFFFF] | [\U00010000-\U0010FFFF] "x"`, "root", 5, true},
		{`root ::= [^a] "b"?`, "root", 5, true},
		{"root ::= x{1,3}\nx ::= \"ab\" | [\\u0080-\\u07FF]\n", "root", 6, true},
		{"root ::= x{1,3}\nx ::= \"ab\" | [\\u0080-\\u07FF]\n", "x", 2, true},
		{`root ::= "a"*`, "root", 0, false},
		{`root ::= "a" "b"+`, "root", 0, false},
		{"root ::= \"(\" root \")\" | \"x\"\n", "root", 0, false},
		{`root ::= "a"`, "nope", 0, false},
	} {
		g, err := Parse(tc.src)
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		n, finite := g.MaxLen(tc.rule)
		if n != tc.want || finite != tc.finite {
			t.Errorf("MaxLen(%q) of %q = %d, %v; want %d, %v", tc.rule, tc.src, n, finite, tc.want, tc.finite)
		}
	}
}
