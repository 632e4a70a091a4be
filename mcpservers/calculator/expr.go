package calculator

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Limits applied by Evaluate. They keep a single tool call cheap no matter
// what a model or a user sends.
const (
	// MaxExpressionLength is the longest expression accepted, in bytes.
	MaxExpressionLength = 1000
	// MaxDepth bounds the nesting of parentheses and unary signs.
	MaxDepth = 64
	// MaxExponent bounds the absolute value of the right operand of **.
	MaxExponent = 10000
)

// ExprError is an error in an expression. Pos is the 1-based character
// position it refers to (0 when it concerns the whole expression).
type ExprError struct {
	Pos int
	Msg string
}

func (e *ExprError) Error() string {
	if e.Pos <= 0 {
		return e.Msg
	}
	return fmt.Sprintf("position %d: %s", e.Pos, e.Msg)
}

// Evaluate computes an arithmetic expression. It accepts number literals
// (123, 1.5, .5, 2e10, 1.5E-3), unary + and -, the binary operators
// + - * / % and **, and parentheses. ** binds tighter than unary minus and is
// right-associative, as in Python: -2**2 is -4 and 2**3**2 is 512. % is the
// floored modulo (the result has the sign of the divisor), as in Python.
// Anything else is rejected with an *ExprError naming the position. Results
// that are not finite real numbers are errors too.
func Evaluate(expr string) (float64, error) {
	if len(expr) > MaxExpressionLength {
		return 0, &ExprError{Msg: fmt.Sprintf("expression is too long (%d bytes, at most %d)", len(expr), MaxExpressionLength)}
	}
	if !utf8.ValidString(expr) {
		return 0, &ExprError{Msg: "expression is not valid UTF-8"}
	}
	p := &parser{src: []rune(expr)}
	p.skipSpace()
	if p.eof() {
		return 0, &ExprError{Msg: "expression is empty"}
	}
	v, err := p.parseExpr()
	if err != nil {
		return 0, err
	}
	if !p.eof() {
		return 0, p.unexpected()
	}
	return v, nil
}

type parser struct {
	src   []rune
	pos   int // index into src of the next unread rune
	depth int
}

func (p *parser) eof() bool { return p.pos >= len(p.src) }

func (p *parser) skipSpace() {
	for !p.eof() && unicode.IsSpace(p.src[p.pos]) {
		p.pos++
	}
}

// errAt builds an error at rune index i.
func errAt(i int, format string, args ...any) *ExprError {
	return &ExprError{Pos: i + 1, Msg: fmt.Sprintf(format, args...)}
}

// peekOp reports the operator at the current position: one of "+", "-",
// "*", "/", "%", "**", "(", ")" or "" when none.
func (p *parser) peekOp() string {
	if p.eof() {
		return ""
	}
	switch c := p.src[p.pos]; c {
	case '*':
		if p.pos+1 < len(p.src) && p.src[p.pos+1] == '*' {
			return "**"
		}
		return "*"
	case '+', '-', '/', '%', '(', ')':
		return string(c)
	}
	return ""
}

func (p *parser) advance(op string) {
	p.pos += len(op)
	p.skipSpace()
}

// enter and leave bound the recursion depth of nested groups and signs.
func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return errAt(p.pos, "expression is nested too deeply (more than %d levels)", MaxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// expr := term (("+" | "-") term)*
func (p *parser) parseExpr() (float64, error) {
	v, err := p.parseTerm()
	if err != nil {
		return 0, err
	}
	for {
		op := p.peekOp()
		if op != "+" && op != "-" {
			return v, nil
		}
		at := p.pos
		p.advance(op)
		r, err := p.parseTerm()
		if err != nil {
			return 0, err
		}
		if op == "+" {
			v += r
		} else {
			v -= r
		}
		if err := checkFinite(v, at); err != nil {
			return 0, err
		}
	}
}

// term := unary (("*" | "/" | "%") unary)*
func (p *parser) parseTerm() (float64, error) {
	v, err := p.parseUnary()
	if err != nil {
		return 0, err
	}
	for {
		op := p.peekOp()
		if op != "*" && op != "/" && op != "%" {
			return v, nil
		}
		at := p.pos
		p.advance(op)
		r, err := p.parseUnary()
		if err != nil {
			return 0, err
		}
		switch op {
		case "*":
			v *= r
		case "/":
			if r == 0 {
				return 0, errAt(at, "division by zero")
			}
			v /= r
		case "%":
			if r == 0 {
				return 0, errAt(at, "modulo by zero")
			}
			v = floorMod(v, r)
		}
		if err := checkFinite(v, at); err != nil {
			return 0, err
		}
	}
}

// unary := ("+" | "-") unary | power
func (p *parser) parseUnary() (float64, error) {
	op := p.peekOp()
	if op != "+" && op != "-" {
		return p.parsePower()
	}
	if err := p.enter(); err != nil {
		return 0, err
	}
	defer p.leave()
	p.advance(op)
	v, err := p.parseUnary()
	if err != nil {
		return 0, err
	}
	if op == "-" {
		v = -v
	}
	return v, nil
}

// power := primary ("**" unary)?
//
// The exponent is a unary expression, so 2**-1 is allowed and 2**3**2 groups
// to the right.
func (p *parser) parsePower() (float64, error) {
	base, err := p.parsePrimary()
	if err != nil {
		return 0, err
	}
	if p.peekOp() != "**" {
		return base, nil
	}
	at := p.pos
	if err := p.enter(); err != nil {
		return 0, err
	}
	defer p.leave()
	p.advance("**")
	exp, err := p.parseUnary()
	if err != nil {
		return 0, err
	}
	if math.Abs(exp) > MaxExponent {
		return 0, errAt(at, "exponent %s is too large (at most %d in absolute value)", Format(exp), MaxExponent)
	}
	if base == 0 && exp < 0 {
		return 0, errAt(at, "zero cannot be raised to a negative power")
	}
	v := math.Pow(base, exp)
	if math.IsNaN(v) {
		return 0, errAt(at, "result is not a real number (negative base with a fractional exponent)")
	}
	if err := checkFinite(v, at); err != nil {
		return 0, err
	}
	return v, nil
}

// primary := number | "(" expr ")"
func (p *parser) parsePrimary() (float64, error) {
	if p.eof() {
		return 0, errAt(p.pos, "unexpected end of expression, expected a number or '('")
	}
	c := p.src[p.pos]
	switch {
	case c == '(':
		if err := p.enter(); err != nil {
			return 0, err
		}
		defer p.leave()
		open := p.pos
		p.advance("(")
		v, err := p.parseExpr()
		if err != nil {
			return 0, err
		}
		if p.peekOp() != ")" {
			if p.eof() {
				return 0, errAt(open, "unclosed '('")
			}
			return 0, p.unexpected()
		}
		p.advance(")")
		return v, nil
	case isDigit(c) || c == '.':
		return p.parseNumber()
	}
	return 0, p.unexpected()
}

// parseNumber reads digits [ "." digits ] [ ("e"|"E") ["+"|"-"] digits ],
// where either the integer or the fraction part may be empty but not both.
func (p *parser) parseNumber() (float64, error) {
	start := p.pos
	i := p.pos
	digits := 0
	for i < len(p.src) && isDigit(p.src[i]) {
		i++
		digits++
	}
	if i < len(p.src) && p.src[i] == '.' {
		i++
		for i < len(p.src) && isDigit(p.src[i]) {
			i++
			digits++
		}
	}
	if digits == 0 {
		return 0, errAt(start, "malformed number")
	}
	if i < len(p.src) && (p.src[i] == 'e' || p.src[i] == 'E') {
		j := i + 1
		if j < len(p.src) && (p.src[j] == '+' || p.src[j] == '-') {
			j++
		}
		if j >= len(p.src) || !isDigit(p.src[j]) {
			return 0, errAt(i, "malformed exponent in number")
		}
		for j < len(p.src) && isDigit(p.src[j]) {
			j++
		}
		i = j
	}
	if i < len(p.src) && isIdentRune(p.src[i]) {
		p.pos = i
		return 0, p.unexpected()
	}
	if i < len(p.src) && p.src[i] == '.' {
		return 0, errAt(i, "malformed number")
	}
	text := string(p.src[start:i])
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && (math.IsInf(v, 0)) {
			return 0, errAt(start, "number %s is too large", text)
		}
		if !errors.Is(err, strconv.ErrRange) {
			return 0, errAt(start, "malformed number %q", text)
		}
		// Underflow to zero (or a denormal) is accepted.
	}
	p.pos = i
	p.skipSpace()
	return v, nil
}

// unexpected describes the token at the current position.
func (p *parser) unexpected() error {
	if p.eof() {
		return errAt(p.pos, "unexpected end of expression")
	}
	c := p.src[p.pos]
	if isIdentRune(c) {
		end := p.pos
		for end < len(p.src) && (isIdentRune(p.src[end]) || isDigit(p.src[end])) {
			end++
		}
		name := string(p.src[p.pos:end])
		rest := end
		for rest < len(p.src) && unicode.IsSpace(p.src[rest]) {
			rest++
		}
		if rest < len(p.src) && p.src[rest] == '(' {
			return errAt(p.pos, "function calls are not supported (%q); only numbers, + - * / %% ** and parentheses are allowed", name)
		}
		return errAt(p.pos, "names are not supported (%q); only numbers, + - * / %% ** and parentheses are allowed", name)
	}
	if op := p.peekOp(); op != "" {
		return errAt(p.pos, "unexpected %q", op)
	}
	if isDigit(c) || c == '.' {
		return errAt(p.pos, "unexpected number (missing operator?)")
	}
	return errAt(p.pos, "unexpected character %q; only numbers, + - * / %% ** and parentheses are allowed", c)
}

func checkFinite(v float64, at int) error {
	if math.IsNaN(v) {
		return errAt(at, "result is not a number")
	}
	if math.IsInf(v, 0) {
		return errAt(at, "result is too large (overflows a 64-bit float)")
	}
	return nil
}

// floorMod is Python's %: the result has the sign of the divisor.
func floorMod(a, b float64) float64 {
	m := math.Mod(a, b)
	if m != 0 && (m < 0) != (b < 0) {
		m += b
	}
	return m
}

func isDigit(c rune) bool { return c >= '0' && c <= '9' }

func isIdentRune(c rune) bool { return c == '_' || unicode.IsLetter(c) }

// Format prints a number the way a person expects: integers without a
// fraction or exponent (up to 1e21), everything else in the shortest form
// that round-trips.
func Format(v float64) string {
	if v == 0 {
		return "0" // also turns -0 into 0
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e21 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
