package gorilla

import (
	"strconv"
	"strings"
)

// The grammar is written bottom-up and has no recursive rules: nesting is unrolled to a fixed
// depth and every repetition has a maximum, so the grammar's language is finite, and the length
// of its longest sentence is computed without building it (budget.go sizes the limits with it).
// Identical rule bodies are shared.
//
// Every value rule has a twin that gives the most bytes a sentence of the rule can take
// (str/strLen, list/listLen, value/compileShape+shapeLen in length.go...); the two must change
// together. The tests check them against the longest sentence of the built grammar, as a
// recognizer that follows llama.cpp reads it.

// limits bound the values of one function's calls in the grammar.
type limits struct {
	str    int // bytes between the quotes of a string literal, escapes counted as written
	items  int // items of a list, entries of a free-form dict, free-form keyword arguments
	depth  int // how deeply lists and dicts nest
	digits int // digits of an integer, and of a number's integer part and of its fraction
	// long is str for one text argument of a call (at least str): real calls often carry one
	// long text (an e-mail's body, a query) next to short ones (addresses, ids), and a limit
	// that let every string be as long would cost the budget many times over.
	long int
}

// class is a size of call: a call of class k spends k.units of the response's units (the
// budget is shared out in MaxCalls units) and is a call to one of k.funcs, whose values are
// bounded by k.lim (parallel to funcs).
type class struct {
	units int
	funcs []*function
	lim   []limits
}

// gbuilder collects the rules of one grammar.
type gbuilder struct {
	lim    limits         // of the function being written
	root   map[string]any // the schema $refs are resolved against
	order  []string
	bodies map[string]string // name -> body
	byBody map[string]string // body -> name
}

func newBuilder() *gbuilder {
	return &gbuilder{bodies: map[string]string{}, byBody: map[string]string{}}
}

// buildGrammar writes the grammar: a plain answer of at most answerMax bytes (no bound when
// answerMax is 0), unless callsOnly, or calls. With one class of one unit the calls are one to
// units calls; with several classes, a sequence of calls whose units add up to at most units,
// counted down by the rules left-K ("K units left").
func buildGrammar(classes []class, units, answerMax int, callsOnly bool) string {
	g := newBuilder()
	callRule := make([]string, len(classes))
	for ci, k := range classes {
		var alts []string
		for i, f := range k.funcs {
			g.lim = k.lim[i]
			hint := "f" + strconv.Itoa(f.index)
			if len(classes) > 1 {
				hint = "c" + strconv.Itoa(k.units) + "-" + hint
			}
			alts = append(alts, g.function(hint, f))
		}
		hint := "call"
		if len(classes) > 1 {
			hint = "call-" + strconv.Itoa(k.units)
		}
		callRule[ci] = g.def(hint, `"<<function>>" (`+strings.Join(alts, " | ")+")")
	}
	var calls string
	switch {
	case len(classes) == 0:
	case len(classes) == 1:
		n := units / classes[0].units
		calls = callRule[0]
		if n > 1 {
			calls += "{1," + strconv.Itoa(n) + "}"
		}
	default:
		// left[n] is at most n more units of calls, possibly none ("" when no call fits).
		left := make([]string, units)
		seq := func(n int) []string {
			var alts []string
			for ci, k := range classes {
				if k.units <= n {
					alts = append(alts, join(callRule[ci], left[n-k.units]))
				}
			}
			return alts
		}
		for n := 1; n < units; n++ {
			if alts := seq(n); len(alts) > 0 {
				left[n] = g.def("left-"+strconv.Itoa(n), "("+strings.Join(alts, " | ")+")?")
			}
		}
		calls = strings.Join(seq(units), " | ")
	}
	var root string
	switch {
	case calls == "":
		root = g.answer(answerMax)
	case callsOnly:
		root = g.def("calls", calls)
	default:
		root = g.answer(answerMax) + " | " + g.def("calls", calls)
	}
	var b strings.Builder
	b.WriteString("root ::= ")
	b.WriteString(root)
	b.WriteByte('\n')
	for _, name := range g.order {
		b.WriteString(name)
		b.WriteString(" ::= ")
		b.WriteString(g.bodies[name])
		b.WriteByte('\n')
	}
	return b.String()
}

// answerBody is plain text that never holds "<<", so it can never hold a call.
const answerBody = `([^<] | "<" [^<])+`

// maxRepeat is the most repetitions llama.cpp takes in x{m,n} (MAX_REPETITION_THRESHOLD is
// 2000, for the repeated rules times the count).
const maxRepeat = 1999

// Classes of characters by the bytes they take in UTF-8.
const (
	utf8Two   = `[\u0080-\u07FF]`
	utf8Three = `[\u0800-\uFFFF]`
	utf8Four  = `[\U00010000-\U0010FFFF]`
	notLT     = `[\x01-\x3B\x3D-\x7F]` // one byte, not "<" (NUL is never sampled)
)

// answer is the plain-answer rule: text without "<<", at most max bytes (max 0: no bound). A
// GBNF repetition counts characters, not bytes, so the bounded answer is one of three
// branches, each a count of characters no wider than its share: ASCII without "<" (up to max
// characters), text whose characters take at most two bytes ("<" followed by ASCII counting as
// one such character; up to max/2), and any text (up to max/5, a "<" and a 4-byte character
// being the widest). Exact byte counting needs a rule per byte, too large a grammar for a
// plain answer.
func (g *gbuilder) answer(max int) string {
	if max <= 0 {
		return g.def("answer", answerBody)
	}
	max = min(max, maxRepeat)
	alts := []string{notLT + "{1," + strconv.Itoa(max) + "}"}
	if max >= 2 {
		alts = append(alts, g.def("ans2", notLT+" | "+utf8Two+` | "<" `+notLT)+"{1,"+strconv.Itoa(max/2)+"}")
	}
	if max >= 5 {
		alts = append(alts, g.def("ans5", `[^<] | "<" [^<]`)+"{1,"+strconv.Itoa(max/5)+"}")
	}
	return g.def("answer", strings.Join(alts, " | "))
}

func answerLen(max int) int {
	if max <= 0 {
		return -1
	}
	return min(max, maxRepeat)
}

// def names body, reusing the rule of an identical body. hint becomes the name (made unique).
func (g *gbuilder) def(hint, body string) string {
	if name, ok := g.byBody[body]; ok {
		return name
	}
	name := ruleName(hint)
	if _, taken := g.bodies[name]; taken || name == "root" {
		for i := 2; ; i++ {
			n := name + "-" + strconv.Itoa(i)
			if _, taken := g.bodies[n]; !taken {
				name = n
				break
			}
		}
	}
	g.bodies[name] = body
	g.byBody[body] = name
	g.order = append(g.order, name)
	return name
}

// ruleName makes a GBNF rule name ([a-z0-9-]+) from a hint.
func ruleName(hint string) string {
	var b strings.Builder
	dash := false
	for i := 0; i < len(hint) && b.Len() < 40; i++ {
		c := hint[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			b.WriteByte(c)
			dash = false
		case c >= 'A' && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
			dash = false
		default:
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
				dash = true
			}
		}
	}
	s := strings.TrimRight(b.String(), "-")
	if s == "" {
		s = "r"
	}
	return s
}

// function is the rule for one tool's call after "<<function>>", within g.lim.
func (g *gbuilder) function(hint string, f *function) string {
	g.root = f.schema // $refs resolve against this tool's schema
	var items []seqItem
	for _, p := range f.params {
		it := seqItem{expr: gbnfLiteral(p.name+"=") + " " + g.value(p.schema, hint+"-"+p.name, 0, 0), required: p.required}
		if p.text && g.lim.long > g.lim.str {
			short := g.lim
			g.lim.str = g.lim.long
			it.long = gbnfLiteral(p.name+"=") + " " + g.value(p.schema, hint+"-"+p.name+"-long", 0, 0)
			g.lim = short
		}
		items = append(items, it)
	}
	var args string
	if f.freeArgs && len(items) == 0 {
		if g.lim.items > 0 {
			kv := g.def("kwarg", `[a-zA-Z_] [a-zA-Z0-9_]{0,63} "=" `+g.any(0))
			args = "(" + g.repeat(kv, g.lim.items) + ")?"
		}
	} else {
		args = g.seq(hint, items)
	}
	body := gbnfLiteral(f.name + "(")
	if args != "" {
		body += " " + args
	}
	body += ` ")"`
	return g.def(hint, body)
}

// functionLen is the most bytes of a call to f after "<<function>>", within lim.
func functionLen(f *function, lim limits) int {
	n := len(f.name) + 2 // name( )
	if f.freeArgs && len(f.params) == 0 {
		if lim.items > 0 {
			n += lim.items*(maxKwargName+1+anyLen(lim, 0)) + (lim.items-1)*sepLen
		}
		return n
	}
	extra := 0 // the one text argument that takes the long limit
	long := lim
	long.str = max(lim.long, lim.str)
	for i, p := range f.params {
		if i > 0 {
			n += sepLen
		}
		short := shapeLen(p.shape, lim, 0)
		n += len(p.name) + 1 + short
		if p.text {
			extra = max(extra, shapeLen(p.shape, long, 0)-short)
		}
	}
	return n + extra
}

// maxKwargName is the longest free-form keyword argument name the grammar takes.
const maxKwargName = 64

// sep separates arguments, list items and dict entries; it takes at most sepLen bytes.
const (
	sep    = `"," " "?`
	sepLen = 2
)

// repeat is one to n items separated by sep (n >= 1).
func (g *gbuilder) repeat(item string, n int) string {
	if n == 1 {
		return item
	}
	return item + " (" + sep + " " + item + "){0," + strconv.Itoa(n-1) + "}"
}

type seqItem struct {
	expr     string
	long     string // expr with the long string limit ("" when the item is not a text argument)
	required bool
}

// seq is items in order, separated by sep, optional ones optional, required ones present, and
// at most one in its long form. It returns "" when there are no items. Its longest sentence has
// every item, the one that gains most in its long form.
func (g *gbuilder) seq(hint string, items []seqItem) string {
	n := len(items)
	if n == 0 {
		return ""
	}
	texts := 0
	for i := range items {
		if items[i].long != "" {
			texts++
		}
	}
	if texts == 1 {
		// The only text argument may always be long.
		items = append([]seqItem(nil), items...)
		for i := range items {
			if items[i].long != "" {
				items[i].expr, items[i].long = items[i].long, ""
			}
		}
	}
	// short[i] is items[i:], each preceded by sep, none long (the long one has been used).
	short := make([]string, n+1)
	for i := n - 1; i >= 0; i-- {
		part := sep + " " + items[i].expr
		if !items[i].required {
			part = "(" + part + ")?"
		}
		short[i] = g.def(hint+"-tail", join(part, short[i+1]))
	}
	rest := short
	if texts > 1 {
		// free[i] is items[i:], each preceded by sep, one of them possibly long; "" is empty.
		free := make([]string, n+1)
		for i := n - 1; i >= 0; i-- {
			it := items[i]
			alts := []string{join(sep+" "+it.expr, free[i+1])}
			if it.long != "" {
				alts = append(alts, join(sep+" "+it.long, short[i+1]))
			}
			body := strings.Join(alts, " | ")
			switch {
			case it.required:
			case free[i+1] != "":
				body += " | " + free[i+1] // itself possibly empty
			default:
				body = "(" + body + ")?"
			}
			free[i] = g.def(hint+"-free", body)
		}
		rest = free
	}
	// The first item present comes without sep; items before a required one may be left out.
	var heads []string
	anyRequired := false
	for j := 0; j < n; j++ {
		heads = append(heads, "("+join(items[j].expr, rest[j+1])+")")
		if items[j].long != "" {
			heads = append(heads, "("+join(items[j].long, short[j+1])+")")
		}
		if items[j].required {
			anyRequired = true
			break
		}
	}
	expr := strings.Join(heads, " | ")
	if !anyRequired {
		return "(" + expr + ")?"
	}
	if len(heads) == 1 {
		return heads[0]
	}
	return "(" + expr + ")"
}

// join is a and b in sequence, either possibly "" (empty).
func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + " " + b
}

// Primitive rules.

// str is a string literal in either quote kind with at most g.lim.str bytes between the
// quotes. As for the answer, the content is one of three branches by character width: ASCII
// without escapes (up to str characters), characters of at most two bytes including the
// two-byte escapes \n, \' ... (up to str/2), and any character including \xhh (up to str/4).
// \uhhhh and \Uhhhhhhhh escapes are not offered (a character can be written as itself); the
// parser still reads them.
func (g *gbuilder) str() string {
	n := g.lim.str
	hex := g.def("hex", "[0-9a-fA-F]")
	two := utf8Two + ` | "\\" ["'\\nrtbf]`
	four := utf8Three + " | " + utf8Four + ` | "\\x" ` + hex + " " + hex
	quoted := func(prefix, quote, one string) string {
		var alts []string
		if n >= 1 {
			alts = append(alts, g.def(prefix+"1", one)+"{0,"+strconv.Itoa(n)+"}")
		}
		if n >= 2 {
			alts = append(alts, g.def(prefix+"2", one+" | "+two)+"{0,"+strconv.Itoa(n/2)+"}")
		}
		if n >= 4 {
			alts = append(alts, g.def(prefix+"4", one+" | "+two+" | "+four)+"{0,"+strconv.Itoa(n/4)+"}")
		}
		if len(alts) == 0 {
			return quote + " " + quote
		}
		return quote + " " + g.def(prefix+"-"+strconv.Itoa(n), strings.Join(alts, " | ")) + " " + quote
	}
	// One byte: printable ASCII and DEL, without the quote and the backslash.
	sq := quoted("sq", `"'"`, `[\x20-\x26\x28-\x5B\x5D-\x7F]`)
	dq := quoted("dq", `"\""`, `[\x20\x21\x23-\x5B\x5D-\x7F]`)
	return g.def("str-"+strconv.Itoa(n), sq+" | "+dq)
}

func strLen(lim limits) int { return lim.str + 2 }

// digits is one to g.lim.digits digits without a leading zero, or "0".
func (g *gbuilder) digits() string {
	if g.lim.digits <= 1 {
		return "[0-9]"
	}
	return `("0" | [1-9] [0-9]{0,` + strconv.Itoa(g.lim.digits-1) + `})`
}

func (g *gbuilder) integer() string {
	return g.def("int", `"-"? `+g.digits())
}

func intLen(lim limits) int { return 1 + lim.digits }

func (g *gbuilder) number() string {
	return g.def("num", `"-"? `+g.digits()+` ("." [0-9]{1,`+strconv.Itoa(lim1(g.lim.digits))+`})? ([eE] [-+]? [0-9]{1,2})?`)
}

// numLen: sign, digits, point, digits, e, sign, two digits.
func numLen(lim limits) int { return 1 + lim1(lim.digits) + 1 + lim1(lim.digits) + 4 }

func lim1(n int) int { return max(n, 1) }

func (g *gbuilder) boolean() string { return g.def("bool", `"True" | "False"`) }

func (g *gbuilder) none() string { return g.def("none", `"None"`) }

const (
	boolLen = len("False")
	noneLen = len("None")
)

// any is a free-form value at container depth d: scalars, and lists and dicts while d is
// below the depth limit.
func (g *gbuilder) any(d int) string {
	scalars := g.str() + " | " + g.number() + " | " + g.boolean() + " | " + g.none()
	if d >= g.lim.depth {
		return g.def("scalar", scalars)
	}
	inner := g.any(d + 1)
	return g.def("any-"+strconv.Itoa(d), scalars+" | "+g.list(inner)+" | "+g.dict(g.str(), inner))
}

func anyLen(lim limits, d int) int {
	n := max(strLen(lim), numLen(lim), boolLen, noneLen)
	if d >= lim.depth {
		return n
	}
	inner := anyLen(lim, d+1)
	return max(n, listLen(lim, inner), dictLen(lim, strLen(lim), inner))
}

func (g *gbuilder) list(item string) string {
	if g.lim.items == 0 {
		return `"[" "]"`
	}
	return `"[" (` + g.repeat(item, g.lim.items) + `)? "]"`
}

func listLen(lim limits, item int) int {
	if lim.items == 0 {
		return 2
	}
	return 2 + lim.items*item + (lim.items-1)*sepLen
}

func (g *gbuilder) dict(key, value string) string {
	if g.lim.items == 0 {
		return `"{" "}"`
	}
	return `"{" (` + g.repeat(key+` ":" " "? `+value, g.lim.items) + `)? "}"`
}

func dictLen(lim limits, key, value int) int {
	return listLen(lim, key+2+value)
}

// value is the rule for a value of schema s. sd counts schemas followed, cd containers entered.
func (g *gbuilder) value(s any, hint string, sd, cd int) string {
	m, ok := s.(map[string]any)
	if !ok || sd > maxSchemaDepth {
		return g.any(cd)
	}
	if ref, ok := m["$ref"].(string); ok {
		if target, ok := resolve(g.root, ref); ok {
			return g.value(target, hint, sd+1, cd)
		}
		return g.any(cd)
	}
	var alts []string
	if enum, ok := m["enum"].([]any); ok && len(enum) > 0 {
		for _, v := range enum {
			alts = append(alts, literalAlts(v)...)
		}
		if len(alts) > 0 {
			return g.def(hint, strings.Join(dedupe(alts), " | "))
		}
	}
	if v, ok := m["const"]; ok {
		if alts = literalAlts(v); len(alts) > 0 {
			return g.def(hint, strings.Join(dedupe(alts), " | "))
		}
	}
	types := typesOf(m)
	for _, key := range []string{"anyOf", "oneOf"} {
		for i, sub := range asSlice(m[key]) {
			alts = append(alts, g.value(sub, hint+"-"+strconv.Itoa(i), sd+1, cd))
		}
	}
	if all := asSlice(m["allOf"]); len(all) == 1 && len(types) == 0 {
		alts = append(alts, g.value(all[0], hint, sd+1, cd))
	}
	if len(alts) > 0 && len(types) == 0 {
		if b, _ := m["nullable"].(bool); b {
			alts = append(alts, g.none())
		}
		return g.def(hint, strings.Join(dedupe(alts), " | "))
	}
	alts = alts[:0]
	types = implicitTypes(m, types)
	if len(types) == 0 {
		return g.any(cd)
	}
	for _, t := range types {
		switch typeKind(t) {
		case kindString:
			alts = append(alts, g.str())
		case kindInteger:
			alts = append(alts, g.integer())
		case kindNumber:
			alts = append(alts, g.number())
		case kindBool:
			alts = append(alts, g.boolean())
		case kindNull:
			alts = append(alts, g.none())
		case kindArray:
			if cd >= g.lim.depth || g.lim.items == 0 {
				alts = append(alts, g.def("empty-list", `"[" "]"`))
				continue
			}
			var item string
			if it, ok := m["items"].(map[string]any); ok {
				item = g.value(it, hint+"-item", sd+1, cd+1)
			} else {
				item = g.any(cd + 1)
			}
			alts = append(alts, g.def(hint+"-list", g.list(item)))
		case kindObject:
			alts = append(alts, g.object(m, hint, sd, cd))
		default:
			alts = append(alts, g.any(cd))
		}
	}
	if alts = dedupe(alts); len(alts) == 1 {
		return alts[0]
	}
	return g.def(hint, strings.Join(alts, " | "))
}

// Kinds of JSON-schema type names (BFCL's Python and Java names included).
const (
	kindOther = iota
	kindString
	kindInteger
	kindNumber
	kindBool
	kindNull
	kindArray
	kindObject
)

func typeKind(t string) int {
	switch t {
	case "string", "str":
		return kindString
	case "integer", "int", "long", "short", "byte":
		return kindInteger
	case "number", "float", "double":
		return kindNumber
	case "boolean", "bool":
		return kindBool
	case "null":
		return kindNull
	case "array", "tuple", "list":
		return kindArray
	case "object", "dict":
		return kindObject
	}
	return kindOther
}

// implicitTypes are the schema's types, an object or array one when only "properties" or
// "items" says so, and "null" added when "nullable" is set.
func implicitTypes(m map[string]any, types []string) []string {
	if len(types) == 0 {
		switch {
		case m["properties"] != nil:
			types = []string{"object"}
		case m["items"] != nil:
			types = []string{"array"}
		default:
			return nil
		}
	}
	if b, _ := m["nullable"].(bool); b {
		types = append(types[:len(types):len(types)], "null")
	}
	return types
}

// object is a dict with the schema's properties as keys in schema order (required ones
// present), or a free-form dict when it declares none. Past the depth limit a free-form dict is
// empty and a declared one has its required keys only: the depth limit bounds what the schema
// leaves open, never what it requires (lists past it are empty, which a schema allows).
func (g *gbuilder) object(m map[string]any, hint string, sd, cd int) string {
	names, schemas, required := objectKeys(m)
	deep := cd >= g.lim.depth
	if len(names) == 0 {
		if deep {
			return g.def("empty-dict", `"{" "}"`)
		}
		if ap, ok := m["additionalProperties"].(map[string]any); ok {
			return g.def(hint+"-dict", g.dict(g.str(), g.value(ap, hint+"-value", sd+1, cd+1)))
		}
		return g.def(hint+"-dict", g.dict(g.str(), g.any(cd+1)))
	}
	var items []seqItem
	for _, name := range names {
		if deep && !required[name] {
			continue
		}
		key := gbnfLiteral(string(appendQuoted(nil, name, '\'')))
		if dq := gbnfLiteral(string(appendQuoted(nil, name, '"'))); dq != key {
			key = "(" + key + " | " + dq + ")"
		}
		items = append(items, seqItem{
			expr:     key + ` ":" " "? ` + g.value(schemas[name], hint+"-"+name, sd+1, cd+1),
			required: required[name],
		})
	}
	if len(items) == 0 {
		return g.def("empty-dict", `"{" "}"`)
	}
	body := `"{" ` + g.seq(hint+"-obj", items) + ` "}"`
	return g.def(hint+"-obj", body)
}

// resolve finds a local "#/..." reference in a tool's schema.
func resolve(root map[string]any, ref string) (any, bool) {
	if root == nil || !strings.HasPrefix(ref, "#/") {
		return nil, false
	}
	var cur any = root
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// typesOf reads "type" (a string or a list of strings).
func typesOf(m map[string]any) []string {
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// literalAlts are the GBNF literals for a value: a string in both quote kinds.
func literalAlts(v any) []string {
	if s, ok := v.(string); ok {
		return []string{gbnfLiteral(string(appendQuoted(nil, s, '\''))), gbnfLiteral(string(appendQuoted(nil, s, '"')))}
	}
	lit, err := AppendLiteral(nil, v)
	if err != nil {
		return nil
	}
	return []string{gbnfLiteral(string(lit))}
}

// literalLen is the most bytes of the literals of literalAlts (false when there are none).
func literalLen(v any) (int, bool) {
	if s, ok := v.(string); ok {
		return max(len(appendQuoted(nil, s, '\'')), len(appendQuoted(nil, s, '"'))), true
	}
	lit, err := AppendLiteral(nil, v)
	if err != nil {
		return 0, false
	}
	return len(lit), true
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, e := range s {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

// gbnfLiteral quotes s as a GBNF string literal.
func gbnfLiteral(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xF])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
