package gorilla

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// SyntaxError is output Parse cannot read; Offset is the byte offset in the output.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("gorilla: byte %d: %s", e.Offset, e.Msg)
}

// maxNesting bounds how deeply literals and calls may nest in parsed output.
const maxNesting = 64

// Parse reads the model's generated text. Text without "<<function>>" is a plain answer and
// comes back as answer (trimmed). Otherwise the text before the first "<<function>>" is
// dropped and the rest must be calls to the catalog's tools, each introduced by
// "<<function>>"; whitespace, "," and ";" between calls are allowed, and one "<<function>>"
// may introduce several calls separated by them. On error, calls is nil and err is a
// *SyntaxError.
func (c *Catalog) Parse(output string) (calls []Call, answer string, err error) {
	start := strings.Index(output, fnDelim)
	if start < 0 {
		return nil, strings.TrimSpace(output), nil
	}
	p := &parser{src: output, pos: start + len(fnDelim), cat: c}
	for {
		p.skipBetweenCalls()
		if p.pos >= len(p.src) {
			break
		}
		if strings.HasPrefix(p.src[p.pos:], fnDelim) {
			p.pos += len(fnDelim)
			continue
		}
		call, err := p.call()
		if err != nil {
			return nil, "", err
		}
		calls = append(calls, call)
		if p.pos < len(p.src) && !strings.HasPrefix(p.src[p.pos:], fnDelim) {
			save := p.pos
			p.skipBetweenCalls()
			if p.pos == save && p.pos < len(p.src) {
				return nil, "", p.errorf("expected <<function>> or the end of the output, found %s", p.found())
			}
		}
	}
	if len(calls) == 0 {
		return nil, "", &SyntaxError{Offset: start, Msg: "<<function>> is followed by no call"}
	}
	return calls, "", nil
}

type parser struct {
	src   string
	pos   int
	cat   *Catalog
	depth int
}

func (p *parser) errorf(format string, args ...any) *SyntaxError {
	return &SyntaxError{Offset: p.pos, Msg: fmt.Sprintf(format, args...)}
}

// found describes what is at the current position.
func (p *parser) found() string {
	if p.pos >= len(p.src) {
		return "the end of the output"
	}
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return strconv.QuoteRune(r)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r', '\f', '\v':
			p.pos++
		case '\\':
			// an explicit line continuation
			if strings.HasPrefix(p.src[p.pos:], "\\\n") {
				p.pos += 2
				continue
			}
			return
		default:
			return
		}
	}
}

func (p *parser) skipBetweenCalls() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r', ',', ';':
			p.pos++
		default:
			return
		}
	}
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// ident reads an identifier, or returns "".
func (p *parser) ident() string {
	start := p.pos
	if p.pos < len(p.src) && isIdentStart(p.src[p.pos]) {
		p.pos++
		for p.pos < len(p.src) && isIdentChar(p.src[p.pos]) {
			p.pos++
		}
	}
	return p.src[start:p.pos]
}

// dotted reads a dotted name (a.b.c), or returns "".
func (p *parser) dotted() string {
	start := p.pos
	if p.ident() == "" {
		return ""
	}
	for p.pos+1 < len(p.src) && p.src[p.pos] == '.' && isIdentStart(p.src[p.pos+1]) {
		p.pos++
		p.ident()
	}
	return p.src[start:p.pos]
}

// call reads name(args) for a catalog tool.
func (p *parser) call() (Call, error) {
	start := p.pos
	name := p.dotted()
	if name == "" {
		return Call{}, p.errorf("expected a function name, found %s", p.found())
	}
	f := p.cat.byName[name]
	if f == nil {
		f = p.cat.byID[name]
	}
	if f == nil {
		return Call{}, &SyntaxError{Offset: start, Msg: fmt.Sprintf("unknown function %q", name)}
	}
	p.skipSpace()
	if p.pos >= len(p.src) || p.src[p.pos] != '(' {
		return Call{}, p.errorf("expected '(' after %s, found %s", name, p.found())
	}
	p.pos++
	args := map[string]any{}
	positional, keywords := 0, false
	for {
		p.skipSpace()
		if p.pos >= len(p.src) {
			return Call{}, p.errorf("unexpected end of the output in the arguments of %s", name)
		}
		if p.src[p.pos] == ')' {
			p.pos++
			break
		}
		argStart := p.pos
		if p.src[p.pos] == '*' {
			return Call{}, p.errorf("*args and **kwargs are not supported")
		}
		// keyword argument?
		kw := ""
		if save := p.pos; isIdentStart(p.src[p.pos]) {
			id := p.ident()
			p.skipSpace()
			if p.pos < len(p.src) && p.src[p.pos] == '=' && !strings.HasPrefix(p.src[p.pos:], "==") {
				p.pos++
				kw = id
			} else {
				p.pos = save
			}
		}
		v, err := p.value()
		if err != nil {
			return Call{}, err
		}
		var key string
		if kw != "" {
			keywords = true
			key = kw
			if prm := f.byName[kw]; prm != nil {
				key = prm.orig
			}
		} else {
			if keywords {
				return Call{}, &SyntaxError{Offset: argStart, Msg: "positional argument follows keyword argument"}
			}
			if positional >= len(f.params) {
				return Call{}, &SyntaxError{Offset: argStart, Msg: fmt.Sprintf("%s takes %d positional arguments", name, len(f.params))}
			}
			key = f.params[positional].orig
			positional++
		}
		if _, dup := args[key]; dup {
			return Call{}, &SyntaxError{Offset: argStart, Msg: fmt.Sprintf("argument %q given twice", key)}
		}
		args[key] = v
		p.skipSpace()
		if p.pos < len(p.src) && p.src[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.src) && p.src[p.pos] == ')' {
			continue
		}
		return Call{}, p.errorf("expected ',' or ')' in the arguments of %s, found %s", name, p.found())
	}
	return Call{ToolID: f.id, Arguments: args}, nil
}

// value reads one Python literal.
func (p *parser) value() (any, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxNesting {
		return nil, p.errorf("values nested more than %d deep", maxNesting)
	}
	p.skipSpace()
	if p.pos >= len(p.src) {
		return nil, p.errorf("expected a value, found the end of the output")
	}
	c := p.src[p.pos]
	switch {
	case c == '[':
		p.pos++
		return p.sequence(']')
	case c == '(':
		return p.parenthesized()
	case c == '{':
		return p.braces()
	case c == '\'' || c == '"':
		return p.strings()
	case c >= '0' && c <= '9' || c == '.' && p.pos+1 < len(p.src) && p.src[p.pos+1] >= '0' && p.src[p.pos+1] <= '9':
		return p.number()
	case c == '-' || c == '+':
		start := p.pos
		p.pos++
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		switch n := v.(type) {
		case int64:
			if c == '-' {
				if n == math.MinInt64 {
					return -float64(n), nil
				}
				return -n, nil
			}
			return n, nil
		case float64:
			if c == '-' {
				return -n, nil
			}
			return n, nil
		case bool:
			// Python: -True == -1
			i := int64(0)
			if n {
				i = 1
			}
			if c == '-' {
				i = -i
			}
			return i, nil
		}
		return nil, &SyntaxError{Offset: start, Msg: fmt.Sprintf("unary %c applied to a non-number", c)}
	case isIdentStart(c):
		return p.name()
	}
	return nil, p.errorf("expected a value, found %s", p.found())
}

// name reads True, False, None, a string with a prefix (r'..'), a bare (dotted) name, which
// becomes its text, or a nested call, which becomes its source text.
func (p *parser) name() (any, error) {
	start := p.pos
	id := p.ident()
	if p.pos < len(p.src) && (p.src[p.pos] == '\'' || p.src[p.pos] == '"') && len(id) <= 2 {
		switch strings.ToLower(id) {
		case "r", "u", "b", "br", "rb":
			p.pos = start
			return p.strings()
		case "f", "fr", "rf":
			return nil, &SyntaxError{Offset: start, Msg: "f-strings are not supported"}
		}
	}
	switch id {
	case "True":
		return true, nil
	case "False":
		return false, nil
	case "None":
		return nil, nil
	}
	p.pos = start
	p.dotted()
	save := p.pos
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == '(' {
		// A nested call: check it is well formed, keep its source.
		p.pos++
		if _, err := p.sequence(')'); err != nil {
			return nil, err
		}
		return p.src[start:p.pos], nil
	}
	p.pos = save
	return p.src[start:p.pos], nil
}

// sequence reads items up to close (the opener is consumed), allowing a trailing comma. In a
// nested call's arguments (close == ')') keyword arguments are allowed too.
func (p *parser) sequence(close byte) ([]any, error) {
	items := []any{}
	for {
		p.skipSpace()
		if p.pos >= len(p.src) {
			return nil, p.errorf("expected %q, found the end of the output", close)
		}
		if p.src[p.pos] == close {
			p.pos++
			return items, nil
		}
		if close == ')' && isIdentStart(p.src[p.pos]) {
			save := p.pos
			p.ident()
			p.skipSpace()
			if p.pos < len(p.src) && p.src[p.pos] == '=' && !strings.HasPrefix(p.src[p.pos:], "==") {
				p.pos++
			} else {
				p.pos = save
			}
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		items = append(items, v)
		p.skipSpace()
		if p.pos < len(p.src) && p.src[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.src) && p.src[p.pos] == close {
			continue
		}
		return nil, p.errorf("expected ',' or %q, found %s", close, p.found())
	}
}

// parenthesized reads a tuple (as a list) or a parenthesized value.
func (p *parser) parenthesized() (any, error) {
	p.pos++ // (
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == ')' {
		p.pos++
		return []any{}, nil
	}
	first, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == ')' {
		p.pos++
		return first, nil
	}
	if p.pos >= len(p.src) || p.src[p.pos] != ',' {
		return nil, p.errorf("expected ',' or ')', found %s", p.found())
	}
	p.pos++
	rest, err := p.sequence(')')
	if err != nil {
		return nil, err
	}
	return append([]any{first}, rest...), nil
}

// braces reads a dict, or a set (as a list).
func (p *parser) braces() (any, error) {
	p.pos++ // {
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
		return map[string]any{}, nil
	}
	keyStart := p.pos
	first, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos >= len(p.src) || p.src[p.pos] != ':' {
		// a set
		if p.pos < len(p.src) && p.src[p.pos] == '}' {
			p.pos++
			return []any{first}, nil
		}
		if p.pos >= len(p.src) || p.src[p.pos] != ',' {
			return nil, p.errorf("expected ':', ',' or '}', found %s", p.found())
		}
		p.pos++
		rest, err := p.sequence('}')
		if err != nil {
			return nil, err
		}
		return append([]any{first}, rest...), nil
	}
	out := map[string]any{}
	key := first
	for {
		k, err := dictKey(key)
		if err != nil {
			return nil, &SyntaxError{Offset: keyStart, Msg: err.Error()}
		}
		p.pos++ // :
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		out[k] = v
		p.skipSpace()
		if p.pos < len(p.src) && p.src[p.pos] == '}' {
			p.pos++
			return out, nil
		}
		if p.pos >= len(p.src) || p.src[p.pos] != ',' {
			return nil, p.errorf("expected ',' or '}', found %s", p.found())
		}
		p.pos++
		p.skipSpace()
		if p.pos < len(p.src) && p.src[p.pos] == '}' {
			p.pos++
			return out, nil
		}
		keyStart = p.pos
		if key, err = p.value(); err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return nil, p.errorf("expected ':', found %s", p.found())
		}
	}
}

// dictKey is the JSON object key for a Python dict key, as json.dumps converts it.
func dictKey(k any) (string, error) {
	switch k := k.(type) {
	case string:
		return k, nil
	case int64:
		return strconv.FormatInt(k, 10), nil
	case float64:
		return string(appendPyFloat(nil, k)), nil
	case bool:
		if k {
			return "true", nil
		}
		return "false", nil
	case nil:
		return "null", nil
	}
	return "", fmt.Errorf("a %s cannot be a dict key", typeName(k))
}

func typeName(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// number reads an int (decimal, 0x, 0o, 0b; underscores between digits) or a float.
func (p *parser) number() (any, error) {
	start := p.pos
	s := p.src
	i := p.pos
	digits := func(ok func(byte) bool) {
		for i < len(s) && (ok(s[i]) || s[i] == '_' && i+1 < len(s) && ok(s[i+1]) && i > start && ok(s[i-1])) {
			i++
		}
	}
	isDec := func(c byte) bool { return c >= '0' && c <= '9' }
	if s[i] == '0' && i+1 < len(s) && strings.IndexByte("xXoObB", s[i+1]) >= 0 {
		var ok func(byte) bool
		switch s[i+1] | 0x20 {
		case 'x':
			ok = func(c byte) bool { return isDec(c) || c|0x20 >= 'a' && c|0x20 <= 'f' }
		case 'o':
			ok = func(c byte) bool { return c >= '0' && c <= '7' }
		default:
			ok = func(c byte) bool { return c == '0' || c == '1' }
		}
		i += 2
		if i < len(s) && s[i] == '_' {
			i++
		}
		d := i
		for i < len(s) && (ok(s[i]) || s[i] == '_' && i+1 < len(s) && ok(s[i+1]) && i > d) {
			i++
		}
		if i == d {
			p.pos = i
			return nil, p.errorf("expected digits after %q", s[start:d])
		}
		if i < len(s) && (isIdentChar(s[i])) {
			p.pos = i
			return nil, p.errorf("invalid digit %s in a number", p.found())
		}
		p.pos = i
		text := s[start:i]
		n, err := strconv.ParseInt(text, 0, 64)
		if err != nil {
			u, uerr := strconv.ParseUint(text, 0, 64)
			if uerr != nil {
				f, ferr := parseBigInt(text)
				if ferr != nil {
					return nil, &SyntaxError{Offset: start, Msg: fmt.Sprintf("bad number %q", text)}
				}
				return f, nil
			}
			return float64(u), nil
		}
		return n, nil
	}
	digits(isDec)
	isFloat := false
	if i < len(s) && s[i] == '.' {
		isFloat = true
		i++
		if i < len(s) && isDec(s[i]) {
			d := i
			for i < len(s) && (isDec(s[i]) || s[i] == '_' && i+1 < len(s) && isDec(s[i+1]) && i > d) {
				i++
			}
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && isDec(s[j]) {
			isFloat = true
			i = j
			for i < len(s) && (isDec(s[i]) || s[i] == '_' && i+1 < len(s) && isDec(s[i+1])) {
				i++
			}
		}
	}
	p.pos = i
	if i < len(s) && (isIdentChar(s[i]) || s[i] == '.') {
		if s[i] == 'j' || s[i] == 'J' {
			return nil, p.errorf("complex numbers are not supported")
		}
		return nil, p.errorf("invalid character %s in a number", p.found())
	}
	text := strings.ReplaceAll(s[start:i], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !strings.Contains(err.Error(), "range") {
			return nil, &SyntaxError{Offset: start, Msg: fmt.Sprintf("bad number %q", s[start:i])}
		}
		if math.IsInf(f, 0) {
			return nil, &SyntaxError{Offset: start, Msg: fmt.Sprintf("number %q is out of range", s[start:i])}
		}
		return f, nil
	}
	if len(text) > 1 && text[0] == '0' && strings.Trim(text, "0") != "" {
		return nil, &SyntaxError{Offset: start, Msg: "leading zeros in a decimal integer are not allowed"}
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(text, 64)
		if ferr != nil || math.IsInf(f, 0) {
			return nil, &SyntaxError{Offset: start, Msg: fmt.Sprintf("number %q is out of range", s[start:i])}
		}
		return f, nil
	}
	return n, nil
}

// parseBigInt turns a based integer too large for uint64 into a float64.
func parseBigInt(text string) (float64, error) {
	t := strings.ReplaceAll(text, "_", "")
	base := 10.0
	switch {
	case len(t) > 2 && (t[1] == 'x' || t[1] == 'X'):
		base = 16
	case len(t) > 2 && (t[1] == 'o' || t[1] == 'O'):
		base = 8
	case len(t) > 2 && (t[1] == 'b' || t[1] == 'B'):
		base = 2
	}
	f := 0.0
	for _, c := range strings.ToLower(t[2:]) {
		d := float64(strings.IndexRune("0123456789abcdef", c))
		if d < 0 || d >= base {
			return 0, fmt.Errorf("bad digit")
		}
		f = f*base + d
	}
	if math.IsInf(f, 0) {
		return 0, fmt.Errorf("out of range")
	}
	return f, nil
}

// strings reads one or more adjacent string literals and joins them, as Python does.
func (p *parser) strings() (any, error) {
	var b strings.Builder
	for n := 0; ; n++ {
		save := p.pos
		if n > 0 {
			p.skipSpace()
		}
		if p.pos >= len(p.src) {
			p.pos = save
			break
		}
		start := p.pos
		raw := false
		for p.pos < len(p.src) && p.pos-start < 2 && isIdentStart(p.src[p.pos]) {
			p.pos++
		}
		prefix := strings.ToLower(p.src[start:p.pos])
		if p.pos >= len(p.src) || p.src[p.pos] != '\'' && p.src[p.pos] != '"' {
			p.pos = save
			break
		}
		switch prefix {
		case "", "u", "b":
		case "r", "br", "rb":
			raw = true
		case "f", "fr", "rf":
			return nil, &SyntaxError{Offset: start, Msg: "f-strings are not supported"}
		default:
			p.pos = save
			if n == 0 {
				return nil, &SyntaxError{Offset: start, Msg: fmt.Sprintf("unknown string prefix %q", prefix)}
			}
			return b.String(), nil
		}
		if err := p.stringLiteral(&b, raw); err != nil {
			return nil, err
		}
	}
	return b.String(), nil
}

// stringLiteral reads one quoted literal (the prefix consumed) into b.
func (p *parser) stringLiteral(b *strings.Builder, raw bool) error {
	start := p.pos
	q := p.src[p.pos]
	triple := strings.HasPrefix(p.src[p.pos:], strings.Repeat(string(q), 3))
	if triple {
		p.pos += 3
	} else {
		p.pos++
	}
	for {
		if p.pos >= len(p.src) {
			return &SyntaxError{Offset: start, Msg: "unterminated string"}
		}
		c := p.src[p.pos]
		switch {
		case c == q:
			if !triple {
				p.pos++
				return nil
			}
			if strings.HasPrefix(p.src[p.pos:], strings.Repeat(string(q), 3)) {
				p.pos += 3
				return nil
			}
			b.WriteByte(c)
			p.pos++
		case c == '\n' && !triple:
			return &SyntaxError{Offset: start, Msg: "unterminated string (a newline before the closing quote)"}
		case c == '\\':
			if raw {
				// A raw string keeps the backslash; it still cannot end the string.
				b.WriteByte(c)
				p.pos++
				if p.pos < len(p.src) {
					b.WriteByte(p.src[p.pos])
					p.pos++
				}
				continue
			}
			if err := p.escape(b); err != nil {
				return err
			}
		default:
			b.WriteByte(c)
			p.pos++
		}
	}
}

// escape reads one backslash escape of a (non-raw) string literal.
func (p *parser) escape(b *strings.Builder) error {
	start := p.pos
	p.pos++ // backslash
	if p.pos >= len(p.src) {
		return &SyntaxError{Offset: start, Msg: "unterminated string"}
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case '\n':
	case '\\', '\'', '"':
		b.WriteByte(c)
	case 'a':
		b.WriteByte('\a')
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'v':
		b.WriteByte('\v')
	case '0', '1', '2', '3', '4', '5', '6', '7':
		v := int(c - '0')
		for n := 1; n < 3 && p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '7'; n++ {
			v = v*8 + int(p.src[p.pos]-'0')
			p.pos++
		}
		b.WriteRune(rune(v))
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		r, ok := p.hex(n)
		if !ok {
			return &SyntaxError{Offset: start, Msg: fmt.Sprintf("\\%c needs %d hex digits", c, n)}
		}
		if r >= 0xD800 && r < 0xDC00 && strings.HasPrefix(p.src[p.pos:], "\\u") {
			save := p.pos
			p.pos += 2
			if lo, ok := p.hex(4); ok && lo >= 0xDC00 && lo < 0xE000 {
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			} else {
				p.pos = save
			}
		}
		if r < 0 || r > utf8.MaxRune || r >= 0xD800 && r < 0xE000 {
			return &SyntaxError{Offset: start, Msg: fmt.Sprintf("escape \\%c gives no character (%#x)", c, r)}
		}
		b.WriteRune(r)
	case 'N':
		return &SyntaxError{Offset: start, Msg: "\\N{...} escapes are not supported"}
	default:
		// Python keeps unknown escapes as they are.
		b.WriteByte('\\')
		b.WriteByte(c)
	}
	return nil
}

func (p *parser) hex(n int) (rune, bool) {
	if p.pos+n > len(p.src) {
		return 0, false
	}
	var r rune
	for i := 0; i < n; i++ {
		c := p.src[p.pos+i]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c|0x20 >= 'a' && c|0x20 <= 'f':
			d = c | 0x20 - 'a' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	p.pos += n
	return r, true
}
