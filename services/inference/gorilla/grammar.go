package gorilla

import (
	"strconv"
	"strings"
)

// The grammar is written bottom-up and has no recursive rules: nesting is unrolled to a fixed
// depth, so every value it admits is bounded. Identical rule bodies are shared.

// gbuilder collects the rules of one grammar.
type gbuilder struct {
	opts   Options
	root   map[string]any // the schema $refs are resolved against
	order  []string
	bodies map[string]string // name -> body
	byBody map[string]string // body -> name
}

func (c *Catalog) buildGrammar() string {
	g := &gbuilder{opts: c.opts, bodies: map[string]string{}, byBody: map[string]string{}}
	var alts []string
	for i, f := range c.funcs {
		alts = append(alts, g.function(i, f))
	}
	var root string
	switch {
	case len(alts) == 0:
		root = g.def("answer", answerBody)
	case c.opts.CallsOnly:
		root = g.def("calls", g.calls(alts))
	default:
		root = g.def("answer", answerBody) + " | " + g.def("calls", g.calls(alts))
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

func (g *gbuilder) calls(alts []string) string {
	call := g.def("call", `"<<function>>" (`+strings.Join(alts, " | ")+")")
	if g.opts.MaxCalls == 1 {
		return call
	}
	return call + "{1," + strconv.Itoa(g.opts.MaxCalls) + "}"
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

// function is the rule for one tool's call after "<<function>>".
func (g *gbuilder) function(i int, f *function) string {
	hint := "f" + strconv.Itoa(i)
	g.root = f.schema // $refs resolve against this tool's schema
	var items []seqItem
	for _, p := range f.params {
		items = append(items, seqItem{
			expr:     gbnfLiteral(p.name+"=") + " " + g.value(p.schema, hint+"-"+p.name, 0, 0),
			required: p.required,
		})
	}
	var args string
	if f.freeArgs && len(items) == 0 {
		kv := g.def("kwarg", `[a-zA-Z_] [a-zA-Z0-9_]{0,63} "=" `+g.any(0))
		args = "(" + kv + " (" + sep + " " + kv + "){0," + strconv.Itoa(g.opts.MaxItems-1) + "})?"
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

// sep separates arguments, list items and dict entries.
const sep = `"," " "?`

type seqItem struct {
	expr     string
	required bool
}

// seq is items in order, separated by sep, optional ones optional, required ones present.
// It returns "" when there are no items.
func (g *gbuilder) seq(hint string, items []seqItem) string {
	n := len(items)
	if n == 0 {
		return ""
	}
	// tails[i] is items[i:], each preceded by sep.
	tails := make([]string, n+1)
	for i := n - 1; i >= 0; i-- {
		part := sep + " " + items[i].expr
		if !items[i].required {
			part = "(" + part + ")?"
		}
		body := part
		if tails[i+1] != "" {
			body += " " + tails[i+1]
		}
		tails[i] = g.def(hint+"-tail", body)
	}
	var heads []string
	anyRequired := false
	for j := 0; j < n; j++ {
		h := items[j].expr
		if tails[j+1] != "" {
			h += " " + tails[j+1]
		}
		heads = append(heads, "("+h+")")
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

// Primitive rules.

func (g *gbuilder) str() string {
	hex := g.def("hex", "[0-9a-fA-F]")
	esc := g.def("esc", `["'\\nrtbf] | "x" `+hex+`{2} | "u" ([0-9a-cA-Ce-fE-F] `+hex+`{3} | [dD] [0-7] `+hex+`{2}) | "U000" `+hex+`{5} | "U0010" `+hex+`{4}`)
	sq := g.def("sq-char", `[^'\\\x00-\x1f] | "\\" `+esc)
	dq := g.def("dq-char", `[^"\\\x00-\x1f] | "\\" `+esc)
	n := strconv.Itoa(g.opts.MaxStringLen)
	return g.def("str", `"'" `+sq+`{0,`+n+`} "'" | "\"" `+dq+`{0,`+n+`} "\""`)
}

func (g *gbuilder) integer() string {
	return g.def("int", `"-"? ("0" | [1-9] [0-9]{0,17})`)
}

func (g *gbuilder) number() string {
	return g.def("num", `"-"? ("0" | [1-9] [0-9]{0,17}) ("." [0-9]{1,17})? ([eE] [-+]? [0-9]{1,2})?`)
}

func (g *gbuilder) boolean() string { return g.def("bool", `"True" | "False"`) }

func (g *gbuilder) none() string { return g.def("none", `"None"`) }

// any is a free-form value at container depth d: scalars, and lists and dicts while d is
// below MaxDepth.
func (g *gbuilder) any(d int) string {
	scalars := g.str() + " | " + g.number() + " | " + g.boolean() + " | " + g.none()
	if d >= g.opts.MaxDepth {
		return g.def("scalar", scalars)
	}
	inner := g.any(d + 1)
	return g.def("any-"+strconv.Itoa(d), scalars+" | "+g.list(inner)+" | "+g.dict(g.str(), inner))
}

func (g *gbuilder) list(item string) string {
	return `"[" (` + item + ` (` + sep + ` ` + item + `){0,` + strconv.Itoa(g.opts.MaxItems-1) + `})? "]"`
}

func (g *gbuilder) dict(key, value string) string {
	kv := key + ` ":" " "? ` + value
	return `"{" (` + kv + ` (` + sep + ` ` + kv + `){0,` + strconv.Itoa(g.opts.MaxItems-1) + `})? "}"`
}

// value is the rule for a value of schema s. sd counts schemas followed, cd containers entered.
func (g *gbuilder) value(s any, hint string, sd, cd int) string {
	m, ok := s.(map[string]any)
	if !ok || sd > maxSchemaDepth || cd > g.opts.MaxDepth {
		return g.any(min(cd, g.opts.MaxDepth))
	}
	if ref, ok := m["$ref"].(string); ok {
		if target, ok := g.resolve(ref); ok {
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
	if len(types) == 0 {
		switch {
		case m["properties"] != nil:
			types = []string{"object"}
		case m["items"] != nil:
			types = []string{"array"}
		default:
			return g.any(cd)
		}
	}
	if b, _ := m["nullable"].(bool); b {
		types = append(types, "null")
	}
	for _, t := range types {
		switch t {
		case "string", "str":
			alts = append(alts, g.str())
		case "integer", "int", "long", "short", "byte":
			alts = append(alts, g.integer())
		case "number", "float", "double":
			alts = append(alts, g.number())
		case "boolean", "bool":
			alts = append(alts, g.boolean())
		case "null":
			alts = append(alts, g.none())
		case "array", "tuple", "list":
			var item string
			if it, ok := m["items"].(map[string]any); ok {
				item = g.value(it, hint+"-item", sd+1, cd+1)
			} else {
				item = g.any(min(cd+1, g.opts.MaxDepth))
			}
			if cd >= g.opts.MaxDepth {
				alts = append(alts, g.def("empty-list", `"[" "]"`))
				continue
			}
			alts = append(alts, g.def(hint+"-list", g.list(item)))
		case "object", "dict":
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

// object is a dict with the schema's properties as keys in schema order (required ones
// present), or a free-form dict when it declares none.
func (g *gbuilder) object(m map[string]any, hint string, sd, cd int) string {
	if cd >= g.opts.MaxDepth {
		return g.def("empty-dict", `"{" "}"`)
	}
	props, _ := m["properties"].(map[string]any)
	if len(props) == 0 {
		value := g.any(cd + 1)
		if ap, ok := m["additionalProperties"].(map[string]any); ok {
			value = g.value(ap, hint+"-value", sd+1, cd+1)
		}
		return g.def(hint+"-dict", g.dict(g.str(), value))
	}
	required := map[string]bool{}
	for _, r := range asSlice(m["required"]) {
		if s, ok := r.(string); ok {
			required[s] = true
		}
	}
	var items []seqItem
	for _, name := range propertyOrder(m) {
		key := gbnfLiteral(string(appendQuoted(nil, name, '\'')))
		if dq := gbnfLiteral(string(appendQuoted(nil, name, '"'))); dq != key {
			key = "(" + key + " | " + dq + ")"
		}
		items = append(items, seqItem{
			expr:     key + ` ":" " "? ` + g.value(props[name], hint+"-"+name, sd+1, cd+1),
			required: required[name],
		})
	}
	body := `"{"`
	if s := g.seq(hint+"-obj", items); s != "" {
		body += " " + s
	}
	return g.def(hint+"-obj", body+` "}"`)
}

// resolve finds a local "#/..." reference in the tool's schema.
func (g *gbuilder) resolve(ref string) (any, bool) {
	if g.root == nil || !strings.HasPrefix(ref, "#/") {
		return nil, false
	}
	var cur any = g.root
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
