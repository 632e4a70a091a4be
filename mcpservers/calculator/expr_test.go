package calculator

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestEvaluate(t *testing.T) {
	tests := []struct {
		expr string
		want float64
	}{
		{"5", 5},
		{"  42  ", 42},
		{"1.5", 1.5},
		{".5", 0.5},
		{"5.", 5},
		{"1e3", 1000},
		{"1E-3", 0.001},
		{"2.5e+2", 250},
		{"1e-400", 0}, // underflow is fine
		{"2+3", 5},
		{"2 + 3 * 4", 14},
		{"(2 + 3) * 4", 20},
		{"10 - 4 - 3", 3},     // left-associative
		{"100 / 10 / 5", 2},   // left-associative
		{"2 * 3 / 4", 1.5},    // same precedence, left to right
		{"7 / 2", 3.5},        // true division
		{"2 ** 3", 8},         //
		{"2 ** 3 ** 2", 512},  // right-associative
		{"(2 ** 3) ** 2", 64}, //
		{"-2 ** 2", -4},       // ** binds tighter than unary minus
		{"(-2) ** 2", 4},      //
		{"2 ** -1", 0.5},      // unary minus in the exponent
		{"2 ** -1 ** 2", 0.5}, // 2 ** (-(1 ** 2))
		{"-3", -3},            //
		{"+3", 3},             //
		{"--3", 3},            //
		{"-+-3", 3},           //
		{"3 - -3", 6},         //
		{"2 * -3", -6},        //
		{"-2 * 3 ** 2", -18},  //
		{"7 % 3", 1},          //
		{"-7 % 3", 2},         // floored, like Python
		{"7 % -3", -2},        // sign of the divisor
		{"7.5 % 2", 1.5},      //
		{"6 % 3", 0},          //
		{"2 + 3 % 2", 3},      // % binds like *
		{"((((1))))", 1},      //
		{"1 + (2 * (3 + (4 - 1)))", 13},
		{"0.1 + 0.2", 0.30000000000000004},
		{"4 ** 0.5", 2},
		{"0 ** 0", 1},
		{"-0", 0},
		{"1\t+\n2", 3},
	}
	for _, tt := range tests {
		got, err := Evaluate(tt.expr)
		if err != nil {
			t.Errorf("Evaluate(%q) error = %v, want %v", tt.expr, err, tt.want)
			continue
		}
		if got != tt.want {
			t.Errorf("Evaluate(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

func TestEvaluateErrors(t *testing.T) {
	tests := []struct {
		expr    string
		wantPos int
		wantMsg string // substring of the error message
	}{
		{"", 0, "expression is empty"},
		{"   ", 0, "expression is empty"},
		{"1 +", 4, "unexpected end of expression"},
		{"1 + * 2", 5, `unexpected "*"`},
		{"(1 + 2", 1, "unclosed '('"},
		{"1 + 2)", 6, `unexpected ")"`},
		{"()", 2, `unexpected ")"`},
		{"2 3", 3, "unexpected number"},
		{"x", 1, `names are not supported ("x")`},
		{"2 * pi", 5, `names are not supported ("pi")`},
		{"sqrt(4)", 1, `function calls are not supported ("sqrt")`},
		{"1 + __import__ ('os')", 5, "function calls are not supported"},
		{"2x", 2, `names are not supported ("x")`},
		{"1.2.3", 4, "malformed number"},
		{"1e", 2, "malformed exponent"},
		{"1e+", 2, "malformed exponent"},
		{".", 1, "malformed number"},
		{"1 // 2", 4, `unexpected "/"`},
		{"1 ^ 2", 3, "unexpected character '^'"},
		{"1 == 1", 3, "unexpected character '='"},
		{"0x10", 2, `names are not supported ("x10")`},
		{"1_000", 2, `names are not supported ("_000")`},
		{"é", 1, `names are not supported ("é")`},
		{"1 / 0", 3, "division by zero"},
		{"1 / (2 - 2)", 3, "division by zero"},
		{"5 % 0", 3, "modulo by zero"},
		{"0 ** -1", 3, "zero cannot be raised to a negative power"},
		{"(-8) ** (1/3)", 6, "not a real number"},
		{"1e999", 1, "too large"},
		{"1e308 * 10", 7, "too large"},
		{"-1e308 - 1e308", 8, "too large"},
		{"10 ** 400", 4, "too large"},
		{"2 ** 10001", 3, "exponent 10001 is too large"},
		{"2 ** -10001", 3, "exponent -10001 is too large"},
		{"2 ** 2 ** 2 ** 2 ** 2", 3, "exponent 65536 is too large"},
	}
	for _, tt := range tests {
		_, err := Evaluate(tt.expr)
		var ee *ExprError
		if !errors.As(err, &ee) {
			t.Errorf("Evaluate(%q) error = %v, want an *ExprError", tt.expr, err)
			continue
		}
		if ee.Pos != tt.wantPos || !strings.Contains(ee.Msg, tt.wantMsg) {
			t.Errorf("Evaluate(%q) error = %q (pos %d), want pos %d and a message containing %q", tt.expr, ee.Error(), ee.Pos, tt.wantPos, tt.wantMsg)
		}
	}
}

func TestEvaluateLimits(t *testing.T) {
	tests := []struct {
		name    string
		expr    string
		wantErr string // "" means it must succeed
	}{
		{"max length", "1" + strings.Repeat("+1", (MaxExpressionLength-1)/2), ""},
		{"too long", strings.Repeat("1", MaxExpressionLength+1), "too long"},
		{"max depth parens", strings.Repeat("(", MaxDepth) + "1" + strings.Repeat(")", MaxDepth), ""},
		{"too deep parens", strings.Repeat("(", MaxDepth+1) + "1" + strings.Repeat(")", MaxDepth+1), "nested too deeply"},
		{"too deep unary", strings.Repeat("-", MaxDepth+1) + "1", "nested too deeply"},
		{"too deep power", strings.Repeat("1**", MaxDepth+1) + "1", "nested too deeply"},
		{"long flat sum is not deep", strings.Repeat("1+", 400) + "1", ""},
		{"invalid utf-8", "1 + \xff", "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Evaluate(tt.expr)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Evaluate error = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Evaluate error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{5, "5"},
		{-5, "-5"},
		{0, "0"},
		{math.Copysign(0, -1), "0"},
		{3.5, "3.5"},
		{1e6, "1000000"},
		{123456789012, "123456789012"},
		{1e20, "100000000000000000000"},
		{1e21, "1e+21"},
		{1e300, "1e+300"},
		{0.0001, "0.0001"},
		{1e-7, "1e-07"},
		{0.30000000000000004, "0.30000000000000004"},
		{0.3333333333333333, "0.3333333333333333"},
	}
	for _, tt := range tests {
		if got := Format(tt.in); got != tt.want {
			t.Errorf("Format(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzCalculate(f *testing.F) {
	for _, s := range []string{
		"1+2", "2**3**2", "-2**2", "(1+2)*3", "1/0", "7%-3", "1e308*10", "sqrt(4)",
		"((((", "))))", "1e", ".5e-3", "--+-1", "2 ** -1074", "9" + strings.Repeat("9", 400),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		v, err := Evaluate(expr)
		if err != nil {
			var ee *ExprError
			if !errors.As(err, &ee) {
				t.Fatalf("Evaluate(%q) error %v (%T), want an *ExprError", expr, err, err)
			}
			return
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("Evaluate(%q) = %v, want a finite number", expr, v)
		}
		_ = Format(v)
	})
}
