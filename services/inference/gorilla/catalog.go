package gorilla

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// Options bound what the grammar lets the model write and how history is shown.
type Options struct {
	// MaxCalls is the most calls one response may hold; with MaxBytes, the budget is shared
	// out in MaxCalls units among calls of different sizes.
	MaxCalls int
	// MaxStringLen is the most bytes between the quotes of one string literal, as written (an
	// escape counts its bytes: \n two, \x0b four); at most 1999.
	MaxStringLen int
	// MaxItems is the most items in one list and entries in one free-form dict.
	MaxItems int
	// MaxDepth is how deeply lists and dicts may nest.
	MaxDepth int
	// MaxDigits is the most digits of an integer, and of a number's integer part and of its
	// fraction (a float64, which every JSON number becomes, holds 17 significant digits).
	MaxDigits int
	// MaxBytes, when positive, is the most bytes the whole response may take: the plain answer
	// is bounded by it, and the limits above are lowered until every call sequence the grammar
	// admits fits too (see Build's documentation). Under a grammar llama.cpp samples no token
	// without text, so a token is at least one byte: MaxBytes = n_predict - 1 makes every
	// response end, with the end-of-text token, before n_predict cuts it off. Zero leaves the
	// limits as they are and the answer unbounded.
	MaxBytes int
	// MaxOutputBytes cuts each history output to this many bytes; zero keeps it whole.
	MaxOutputBytes int
	// CallsOnly leaves the plain-answer branch out of the grammar.
	CallsOnly bool
}

// DefaultOptions are the limits Build uses.
var DefaultOptions = Options{
	MaxCalls:       16,
	MaxStringLen:   1000,
	MaxItems:       64,
	MaxDepth:       4,
	MaxDigits:      17,
	MaxOutputBytes: 4096,
}

// maxSchemaDepth caps how far the grammar follows nested schemas; deeper values are free-form.
const maxSchemaDepth = 8

// Catalog is the model's view of one set of candidate tools. It is immutable and safe for
// concurrent use.
type Catalog struct {
	opts      Options
	funcs     []*function // in the order the tools were given
	byName    map[string]*function
	byID      map[string]*function
	functions string // the JSON function list of the prompt
	grammar   string
	classes   []class
	units     int      // the calls' share of the budget: MaxCalls units
	maxBytes  int      // the longest response the grammar admits (-1: unbounded)
	uncalled  []string // ids of tools no call of which fits MaxBytes
}

// function is one tool as the model sees it.
type function struct {
	index  int // in Catalog.funcs
	id     string
	name   string
	params []param
	schema map[string]any // the input schema
	// byName maps an argument name as the model writes it to its param.
	byName map[string]*param
	// freeArgs is true when the schema declares no properties but allows extra ones.
	freeArgs bool
	json     object
}

// param is one top-level argument.
type param struct {
	name     string // as the model writes it
	orig     string // as the tool's schema names it
	schema   any
	required bool
	// text: a string argument (no enum or const, not a union of schemas), which may take the
	// long string limit.
	text  bool
	shape *shape // for the length of its values
}

// Call is one parsed tool call.
type Call struct {
	// ToolID is "SERVER.TOOL", exactly as the tool was given to Build.
	ToolID string
	// Arguments hold JSON-typed values: string, bool, nil, int64, float64, []any, map[string]any.
	Arguments map[string]any
}

// Build makes the catalog for tools, best first, with DefaultOptions.
func Build(tools []*toolmeshv1.Tool) (*Catalog, error) {
	return BuildWith(tools, DefaultOptions)
}

// BuildWith makes the catalog for tools with the given limits (zero fields take the defaults).
// Any input schema is accepted; what cannot be understood becomes a free-form value. It fails
// only on a nil tool, an empty id or an id given twice.
func BuildWith(tools []*toolmeshv1.Tool, opts Options) (*Catalog, error) {
	opts = opts.withDefaults()
	c := &Catalog{
		opts:   opts,
		byName: make(map[string]*function, len(tools)),
		byID:   make(map[string]*function, len(tools)),
	}
	for i, t := range tools {
		if t == nil {
			return nil, fmt.Errorf("gorilla: tool %d is nil", i)
		}
		if t.GetId() == "" {
			return nil, fmt.Errorf("gorilla: tool %d has no id", i)
		}
		if _, dup := c.byID[t.GetId()]; dup {
			return nil, fmt.Errorf("gorilla: tool %q given twice", t.GetId())
		}
		f := &function{index: i, id: t.GetId()}
		c.byID[f.id] = f
		c.funcs = append(c.funcs, f)
	}
	// Names: sanitized ids, collisions resolved in sorted id order.
	ids := make([]string, 0, len(c.funcs))
	for _, f := range c.funcs {
		ids = append(ids, f.id)
	}
	sort.Strings(ids)
	// Ids that are already names keep them; the others follow in sorted order.
	for _, id := range ids {
		if dottedName(id) == id {
			c.byName[id] = c.byID[id]
			c.byID[id].name = id
		}
	}
	for _, id := range ids {
		f := c.byID[id]
		if f.name != "" {
			continue
		}
		f.name = unique(dottedName(id), func(n string) bool { _, taken := c.byName[n]; return taken })
		c.byName[f.name] = f
	}
	var list []any
	for i, t := range tools {
		f := c.funcs[i]
		var schema map[string]any
		if s := t.GetInputSchema(); s != nil {
			schema = s.AsMap()
		}
		f.setSchema(schema)
		desc := t.GetDescription()
		if desc == "" {
			desc = t.GetTitle()
		}
		f.json = object{{"name", f.name}, {"description", desc}, {"parameters", f.parametersJSON(schema)}}
		list = append(list, f.json)
	}
	if len(list) > 0 {
		c.functions = string(appendPyJSON(nil, list))
	}
	if err := c.planGrammar(); err != nil {
		return nil, err
	}
	return c, nil
}

func (o Options) withDefaults() Options {
	d := DefaultOptions
	if o.MaxCalls <= 0 {
		o.MaxCalls = d.MaxCalls
	}
	if o.MaxStringLen <= 0 {
		o.MaxStringLen = d.MaxStringLen
	}
	o.MaxStringLen = min(o.MaxStringLen, maxRepeat) // a longer repetition is refused by llama.cpp
	if o.MaxItems <= 0 {
		o.MaxItems = d.MaxItems
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = d.MaxDepth
	}
	if o.MaxDigits <= 0 {
		o.MaxDigits = d.MaxDigits
	}
	if o.MaxBytes < 0 {
		o.MaxBytes = 0
	}
	if o.MaxOutputBytes < 0 {
		o.MaxOutputBytes = 0
	}
	return o
}

// Name is the name the model uses for a tool id.
func (c *Catalog) Name(toolID string) (string, bool) {
	f, ok := c.byID[toolID]
	if !ok {
		return "", false
	}
	return f.name, true
}

// ToolID is the tool id behind a name the model used.
func (c *Catalog) ToolID(name string) (string, bool) {
	f, ok := c.byName[name]
	if !ok {
		return "", false
	}
	return f.id, true
}

// ToolIDs lists the catalog's tools in the order they were given.
func (c *Catalog) ToolIDs() []string {
	ids := make([]string, len(c.funcs))
	for i, f := range c.funcs {
		ids[i] = f.id
	}
	return ids
}

// Params lists a tool's top-level argument names (as its schema names them) in schema order.
func (c *Catalog) Params(toolID string) []string {
	f, ok := c.byID[toolID]
	if !ok {
		return nil
	}
	out := make([]string, len(f.params))
	for i, p := range f.params {
		out[i] = p.orig
	}
	return out
}

// FunctionsJSON is the function list exactly as it appears in the prompt ("" with no tools).
func (c *Catalog) FunctionsJSON() string { return c.functions }

// Grammar is the GBNF grammar to send with the prompt.
func (c *Catalog) Grammar() string { return c.grammar }

// MaxResponseBytes is the most bytes a response the grammar admits can take; -1 when it is
// unbounded (no MaxBytes: the plain answer may run on).
func (c *Catalog) MaxResponseBytes() int { return c.maxBytes }

// Uncallable lists the tools (in the order given) that no call fits MaxBytes, even with every
// limit at its least: the grammar leaves them out, so the model cannot call them.
func (c *Catalog) Uncallable() []string { return c.uncalled }

// Limits describes the grammar's classes of calls, one line each, e.g. "calls of 4/16 of
// the budget: str<=24B (one text<=96B) items<=20 depth<=2 digits<=12 (3 tools)"; the limits
// shown are the most generous any tool got, as each tool is fitted on its own.
func (c *Catalog) Limits() []string {
	var out []string
	for _, k := range c.classes {
		var top limits
		for _, l := range k.lim {
			top = limits{max(top.str, l.str), max(top.items, l.items), max(top.depth, l.depth), max(top.digits, l.digits), max(top.long, l.long)}
		}
		out = append(out, fmt.Sprintf("calls of %d/%d of the budget: str<=%dB (one text<=%dB) items<=%d depth<=%d digits<=%d (%d tools)",
			k.units, c.units, top.str, top.long, top.items, top.depth, top.digits, len(k.funcs)))
	}
	return out
}

// setSchema reads the top-level arguments from a tool's input schema.
func (f *function) setSchema(schema map[string]any) {
	f.schema = schema
	props, _ := schema["properties"].(map[string]any)
	var names []string
	seen := map[string]bool{}
	for _, r := range asSlice(schema["required"]) {
		if s, ok := r.(string); ok && !seen[s] {
			seen[s] = true
			names = append(names, s)
		}
	}
	nreq := len(names)
	var opt []string
	for k := range props {
		if !seen[k] {
			opt = append(opt, k)
		}
	}
	sort.Strings(opt)
	names = append(names, opt...)
	f.byName = make(map[string]*param, len(names))
	f.params = make([]param, len(names))
	// Valid identifiers keep their names; the others are mapped, avoiding every valid one.
	valid := map[string]bool{}
	for _, n := range names {
		if isIdentifier(n) {
			valid[n] = true
		}
	}
	for i, n := range names {
		p := &f.params[i]
		*p = param{orig: n, schema: props[n], required: i < nreq}
		if _, ok := props[n]; !ok {
			p.schema = true
		}
		p.text = isText(p.schema)
		p.shape = compileShape(schema, p.schema, 0)
		if valid[n] {
			p.name = n
		} else {
			p.name = unique(identifier(n), func(s string) bool { return valid[s] || f.byName[s] != nil })
		}
		f.byName[p.name] = p
	}
	if len(props) == 0 && len(names) == 0 {
		switch ap := schema["additionalProperties"].(type) {
		case bool:
			f.freeArgs = ap
		case map[string]any:
			f.freeArgs = true
		}
	}
}

// parametersJSON is the "parameters" object of the function JSON.
func (f *function) parametersJSON(schema map[string]any) object {
	props := object{}
	var required []any
	declaredProps, _ := schema["properties"].(map[string]any)
	for _, p := range f.params {
		if _, declared := declaredProps[p.orig]; declared {
			props = append(props, member{p.name, promptSchema(p.schema, 0)})
		}
		if p.required {
			required = append(required, p.name)
		}
	}
	out := object{{"type", "object"}, {"properties", props}}
	if required != nil {
		out = append(out, member{"required", required})
	}
	rest := promptSchema(schema, 0)
	if o, ok := rest.(object); ok {
		for _, m := range o {
			switch m.key {
			case "type", "properties", "required":
			default:
				out = append(out, m)
			}
		}
	}
	return out
}

// promptKeyOrder ranks the schema keys that come first; the rest follow sorted.
var promptKeyOrder = map[string]int{
	"type": 1, "description": 2, "enum": 3, "const": 4, "items": 5, "properties": 6, "required": 7, "default": 8,
}

// promptSchema is a schema as the prompt shows it: ordered keys, without "$schema", "$id",
// "$comment" and "additionalProperties", which tell the model nothing it can use.
func promptSchema(v any, depth int) any {
	if depth > 64 {
		return v
	}
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			switch k {
			case "$schema", "$id", "$comment", "additionalProperties":
				continue
			}
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			ri, rj := promptKeyOrder[keys[i]], promptKeyOrder[keys[j]]
			if ri == 0 {
				ri = 100
			}
			if rj == 0 {
				rj = 100
			}
			if ri != rj {
				return ri < rj
			}
			return keys[i] < keys[j]
		})
		out := make(object, 0, len(keys))
		for _, k := range keys {
			val := v[k]
			switch k {
			case "properties":
				if props, ok := val.(map[string]any); ok {
					po := object{}
					for _, name := range propertyOrder(v) {
						po = append(po, member{name, promptSchema(props[name], depth+1)})
					}
					out = append(out, member{k, po})
					continue
				}
			case "items", "not", "additionalItems", "contains", "if", "then", "else":
				val = promptSchema(val, depth+1)
			case "anyOf", "oneOf", "allOf", "prefixItems":
				if list, ok := val.([]any); ok {
					nl := make([]any, len(list))
					for i, e := range list {
						nl[i] = promptSchema(e, depth+1)
					}
					val = nl
				}
			case "$defs", "definitions", "patternProperties":
				if m, ok := val.(map[string]any); ok {
					nm := make(map[string]any, len(m))
					for name, e := range m {
						nm[name] = promptSchema(e, depth+1)
					}
					val = nm
				}
			}
			out = append(out, member{k, val})
		}
		return out
	default:
		return v
	}
}

// propertyOrder is schema order for an object schema: required properties in the order of
// "required", then the others sorted. Required names without a property are left out.
func propertyOrder(schema map[string]any) []string {
	props, _ := schema["properties"].(map[string]any)
	var names []string
	seen := map[string]bool{}
	for _, r := range asSlice(schema["required"]) {
		if s, ok := r.(string); ok && !seen[s] {
			if _, ok := props[s]; ok {
				seen[s] = true
				names = append(names, s)
			}
		}
	}
	var opt []string
	for k := range props {
		if !seen[k] {
			opt = append(opt, k)
		}
	}
	sort.Strings(opt)
	return append(names, opt...)
}

// objectKeys are the keys a dict of object schema m is written with, in schema order: the
// required names in the order of "required" (one the schema has no property for takes any
// value: BFCL writes dicts whose keys are only listed as required), then the other
// properties sorted. schemas maps each key to its schema (true for any value).
func objectKeys(m map[string]any) (names []string, schemas map[string]any, required map[string]bool) {
	props, _ := m["properties"].(map[string]any)
	schemas, required = map[string]any{}, map[string]bool{}
	for _, r := range asSlice(m["required"]) {
		if s, ok := r.(string); ok && !required[s] {
			required[s] = true
			names = append(names, s)
			schemas[s] = true
			if p, ok := props[s]; ok {
				schemas[s] = p
			}
		}
	}
	var opt []string
	for k := range props {
		if !required[k] {
			opt = append(opt, k)
		}
	}
	sort.Strings(opt)
	for _, k := range opt {
		names = append(names, k)
		schemas[k] = props[k]
	}
	return names, schemas, required
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// pythonKeywords are the names Python reserves; a segment equal to one gets a "_" suffix.
var pythonKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true,
	"else": true, "except": true, "finally": true, "for": true, "from": true, "global": true, "if": true,
	"import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true, "or": true,
	"pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
}

// identifier makes s a Python identifier (ASCII only).
func identifier(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" || out[0] >= '0' && out[0] <= '9' {
		out = "_" + out
	}
	if pythonKeywords[out] {
		out += "_"
	}
	return out
}

// dottedName makes a tool id a dotted Python name, segment by segment.
func dottedName(id string) string {
	segs := strings.Split(id, ".")
	for i, s := range segs {
		segs[i] = identifier(s)
	}
	return strings.Join(segs, ".")
}

// isIdentifier reports whether s is an ASCII Python identifier that is not a keyword.
func isIdentifier(s string) bool {
	return s != "" && identifier(s) == s
}

// unique returns base, or base_2, base_3, ... whichever is not taken first.
func unique(base string, taken func(string) bool) string {
	if !taken(base) {
		return base
	}
	for i := 2; ; i++ {
		n := base + "_" + strconv.Itoa(i)
		if !taken(n) {
			return n
		}
	}
}

// errNoTool is wrapped by lookups of unknown tools.
var errNoTool = errors.New("unknown tool")

// isText reports whether a schema is a plain string (possibly nullable, possibly also another
// type): no enum, const, $ref or union of schemas.
func isText(schema any) bool {
	m, ok := schema.(map[string]any)
	if !ok {
		return false
	}
	for _, k := range []string{"enum", "const", "$ref", "anyOf", "oneOf", "allOf"} {
		if _, ok := m[k]; ok {
			return false
		}
	}
	for _, t := range typesOf(m) {
		if typeKind(t) == kindString {
			return true
		}
	}
	return false
}
