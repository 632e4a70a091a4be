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
