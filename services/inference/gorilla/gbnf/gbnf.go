// Package gbnf parses llama.cpp GBNF grammars and recognizes text with them, following
// llama.cpp's own grammar code (src/llama-grammar.cpp): the same parser (rule names
// [a-zA-Z0-9-], literals, character classes with ranges, negation and escapes, ".", groups,
// "*", "+", "?", "{m}", "{m,}", "{m,n}", comments, newlines only inside groups or after "|"),
// the same rewriting of repetitions into generated rules, the same checks (undefined rules,
// repetition limits, left recursion, a "root" rule) and the same pushdown-stack matcher that
// llama-server's sampler advances one code point at a time. Token elements (<...>) are not
// supported: they need a vocabulary.
//
// It is the oracle for the grammars package gorilla writes: gorilla's and inference's tests and
// bench/calls check them with it. Nothing outside tests and benchmarks imports it.
package gbnf

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

type kind uint8

const (
	kEnd kind = iota
	kAlt
	kRuleRef
	kChar
	kCharNot
	kCharRngUpper
	kCharAlt
	kCharAny
)

type elem struct {
	k kind
	v uint32
}

// maxRepetition is llama.cpp's MAX_REPETITION_THRESHOLD.
const maxRepetition = 2000

// Grammar is a parsed grammar.
type Grammar struct {
	rules [][]elem
	names map[string]uint32
	root  uint32
	// Rules is the number of rules after repetitions were rewritten, as llama.cpp counts them.
	Rules int
}

type parser struct {
	src   string
	names map[string]uint32
	rules [][]elem
}

// SyntaxError is a grammar llama.cpp would refuse.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("gbnf: byte %d: %s", e.Offset, e.Msg) }

type bail struct{ err *SyntaxError }

func (p *parser) fail(pos int, format string, args ...any) {
	panic(bail{&SyntaxError{Offset: pos, Msg: fmt.Sprintf(format, args...)}})
}

// Parse reads a grammar; root names the start rule (llama-server uses "root").
func Parse(src string) (g *Grammar, err error) {
	p := &parser{src: src, names: map[string]uint32{}}
	defer func() {
		if r := recover(); r != nil {
			b, ok := r.(bail)
			if !ok {
				panic(r)
			}
			g, err = nil, b.err
		}
	}()
	pos := p.space(0, true)
	for pos < len(src) {
		pos = p.rule(pos)
	}
	for id, r := range p.rules {
		if r == nil {
			p.fail(len(src), "undefined rule %q", p.nameOf(uint32(id)))
		}
		for _, e := range r {
			if e.k == kRuleRef && (int(e.v) >= len(p.rules) || p.rules[e.v] == nil) {
				p.fail(len(src), "undefined rule identifier %q", p.nameOf(e.v))
			}
		}
	}
	for len(p.rules) < len(p.names) {
		p.fail(len(src), "undefined rule %q", p.nameOf(uint32(len(p.rules))))
	}
	root, ok := p.names["root"]
	if !ok {
		return nil, &SyntaxError{Offset: len(src), Msg: `grammar does not contain a "root" symbol`}
	}
	g = &Grammar{rules: p.rules, names: p.names, root: root, Rules: len(p.rules)}
	if id, left := g.leftRecursion(); left {
		return nil, &SyntaxError{Offset: 0, Msg: fmt.Sprintf("left recursion detected for nonterminal %q", p.nameOf(id))}
	}
	return g, nil
}

func (p *parser) nameOf(id uint32) string {
	for n, i := range p.names {
		if i == id {
			return n
		}
	}
	return strconv.Itoa(int(id))
}

func (p *parser) at(pos int) byte {
	if pos < len(p.src) {
		return p.src[pos]
	}
	return 0
}

func (p *parser) space(pos int, newlineOK bool) int {
	for {
		c := p.at(pos)
		switch {
		case c == ' ' || c == '\t':
			pos++
		case c == '#':
			for pos < len(p.src) && p.src[pos] != '\r' && p.src[pos] != '\n' {
				pos++
			}
		case newlineOK && (c == '\r' || c == '\n'):
			pos++
		default:
			return pos
		}
	}
}

func isWordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c >= '0' && c <= '9'
}

func (p *parser) name(pos int) int {
	start := pos
	for isWordChar(p.at(pos)) {
		pos++
	}
	if pos == start {
		p.fail(pos, "expecting name")
	}
	return pos
}

func (p *parser) symbol(name string) uint32 {
	if id, ok := p.names[name]; ok {
		return id
	}
	id := uint32(len(p.names))
	p.names[name] = id
	return id
}

func (p *parser) generate(base string) uint32 {
	id := uint32(len(p.names))
	p.names[base+"_"+strconv.Itoa(int(id))] = id
	return id
}

func (p *parser) add(id uint32, r []elem) {
	for int(id) >= len(p.rules) {
		p.rules = append(p.rules, nil)
	}
	p.rules[id] = r
}

func (p *parser) rule(pos int) int {
	end := p.name(pos)
	name := p.src[pos:end]
	id := p.symbol(name)
	pos = p.space(end, false)
	if !strings.HasPrefix(p.src[pos:], "::=") {
		p.fail(pos, "expecting ::=")
	}
	pos = p.space(pos+3, true)
	pos = p.alternates(pos, name, id, false)
	switch p.at(pos) {
	case '\r':
		pos++
		if p.at(pos) == '\n' {
			pos++
		}
	case '\n':
		pos++
	case 0:
		if pos < len(p.src) {
			p.fail(pos, "expecting newline or end")
		}
	default:
		p.fail(pos, "expecting newline or end")
	}
	return p.space(pos, true)
}

func (p *parser) alternates(pos int, name string, id uint32, nested bool) int {
	var r []elem
	pos, r = p.sequence(pos, name, r, nested)
	for p.at(pos) == '|' {
		r = append(r, elem{kAlt, 0})
		pos = p.space(pos+1, true)
		pos, r = p.sequence(pos, name, r, nested)
	}
	r = append(r, elem{kEnd, 0})
	p.add(id, r)
	return pos
}

// char reads one (possibly escaped) character of a literal or class.
func (p *parser) char(pos int) (uint32, int) {
	if p.at(pos) == '\\' {
		switch p.at(pos + 1) {
		case 'x':
			return p.hex(pos+2, 2)
		case 'u':
			return p.hex(pos+2, 4)
		case 'U':
			return p.hex(pos+2, 8)
		case 't':
			return '\t', pos + 2
		case 'r':
			return '\r', pos + 2
		case 'n':
			return '\n', pos + 2
		case '\\', '"', '[', ']', '-':
			return uint32(p.at(pos + 1)), pos + 2
		}
		p.fail(pos, "unknown escape")
	}
	if pos >= len(p.src) || p.src[pos] == 0 {
		p.fail(pos, "unexpected end of input")
	}
	r, size := utf8.DecodeRuneInString(p.src[pos:])
	return uint32(r), pos + size
}

func (p *parser) hex(pos, n int) (uint32, int) {
	var v uint32
	for i := 0; i < n; i++ {
		c := p.at(pos + i)
		var d uint32
		switch {
		case c >= '0' && c <= '9':
			d = uint32(c - '0')
		case c >= 'a' && c <= 'f':
			d = uint32(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = uint32(c-'A') + 10
		default:
			p.fail(pos, "expecting %d hex chars", n)
		}
		v = v<<4 | d
	}
	return v, pos + n
}

func (p *parser) sequence(pos int, name string, r []elem, nested bool) (int, []elem) {
	lastSym := len(r)
	nPrev := uint64(1)
	repeat := func(minT, maxT uint64, noMax bool) {
		if lastSym == len(r) {
			p.fail(pos, "expecting preceding item to */+/?/{")
		}
		prev := append([]elem(nil), r[lastSym:]...)
		total := uint64(1)
		if !noMax && maxT > 0 {
			total = maxT
		} else if minT > 0 {
			total = minT
		}
		if nPrev*total >= maxRepetition {
			p.fail(pos, "number of rules that are going to be repeated multiplied by the new repetition exceeds sane defaults")
		}
		if minT == 0 {
			r = r[:lastSym]
		} else {
			for i := uint64(1); i < minT; i++ {
				r = append(r, prev...)
			}
		}
		var lastRec uint32
		nOpt := uint64(1)
		if !noMax {
			nOpt = maxT - minT
		}
		for i := uint64(0); i < nOpt; i++ {
			rec := append([]elem(nil), prev...)
			id := p.generate(name)
			if i > 0 || noMax {
				ref := lastRec
				if noMax {
					ref = id
				}
				rec = append(rec, elem{kRuleRef, ref})
			}
			rec = append(rec, elem{kAlt, 0}, elem{kEnd, 0})
			p.add(id, rec)
			lastRec = id
		}
		if nOpt > 0 {
			r = append(r, elem{kRuleRef, lastRec})
		}
		nPrev *= total
	}
	for pos < len(p.src) {
		c := p.src[pos]
		switch {
		case c == '"':
			pos++
			lastSym = len(r)
			nPrev = 1
			for p.at(pos) != '"' {
				if pos >= len(p.src) {
					p.fail(pos, "unexpected end of input")
				}
				var ch uint32
				ch, pos = p.char(pos)
				r = append(r, elem{kChar, ch})
			}
			pos = p.space(pos+1, nested)
		case c == '[':
			pos++
			start := kChar
			if p.at(pos) == '^' {
				pos++
				start = kCharNot
			}
			lastSym = len(r)
			nPrev = 1
			for p.at(pos) != ']' {
				if pos >= len(p.src) {
					p.fail(pos, "unexpected end of input")
				}
				var ch uint32
				ch, pos = p.char(pos)
				t := start
				if lastSym < len(r) {
					t = kCharAlt
				}
				r = append(r, elem{t, ch})
				if p.at(pos) == '-' && p.at(pos+1) != ']' {
					if pos+1 >= len(p.src) {
						p.fail(pos, "unexpected end of input")
					}
					var hi uint32
					hi, pos = p.char(pos + 1)
					r = append(r, elem{kCharRngUpper, hi})
				}
			}
			pos = p.space(pos+1, nested)
		case c == '<' || c == '!':
			p.fail(pos, "token elements are not supported here")
		case isWordChar(c):
			end := p.name(pos)
			id := p.symbol(p.src[pos:end])
			pos = p.space(end, nested)
			lastSym = len(r)
			nPrev = 1
			r = append(r, elem{kRuleRef, id})
		case c == '(':
			pos = p.space(pos+1, true)
			before := len(p.names)
			sub := p.generate(name)
			pos = p.alternates(pos, name, sub, true)
			nPrev = uint64(max(1, len(p.names)-before))
			lastSym = len(r)
			r = append(r, elem{kRuleRef, sub})
			if p.at(pos) != ')' {
				p.fail(pos, "expecting ')'")
			}
			pos = p.space(pos+1, nested)
		case c == '.':
			lastSym = len(r)
			nPrev = 1
			r = append(r, elem{kCharAny, 0})
			pos = p.space(pos+1, nested)
		case c == '*':
			pos = p.space(pos+1, nested)
			repeat(0, 0, true)
		case c == '+':
			pos = p.space(pos+1, nested)
			repeat(1, 0, true)
		case c == '?':
			pos = p.space(pos+1, nested)
			repeat(0, 1, false)
		case c == '{':
			pos = p.space(pos+1, nested)
			minT, end := p.int(pos)
			pos = p.space(end, nested)
			maxT, noMax := uint64(0), true
			switch p.at(pos) {
			case '}':
				maxT, noMax = minT, false
				pos = p.space(pos+1, nested)
			case ',':
				pos = p.space(pos+1, nested)
				if d := p.at(pos); d >= '0' && d <= '9' {
					maxT, end = p.int(pos)
					noMax = false
					pos = p.space(end, nested)
				}
				if p.at(pos) != '}' {
					p.fail(pos, "expecting '}'")
				}
				pos = p.space(pos+1, nested)
			default:
				p.fail(pos, "expecting ','")
			}
			if minT > maxRepetition {
				p.fail(pos, "number of repetitions exceeds sane defaults")
			}
			if !noMax && maxT > maxRepetition {
				noMax = true
			}
			if !noMax && maxT < minT {
				p.fail(pos, "repetition maximum below minimum")
			}
			repeat(minT, maxT, noMax)
		default:
			return pos, r
		}
	}
	return pos, r
}

func (p *parser) int(pos int) (uint64, int) {
	start := pos
	for c := p.at(pos); c >= '0' && c <= '9'; c = p.at(pos) {
		pos++
	}
	if pos == start {
		p.fail(pos, "expecting an int")
	}
	n, err := strconv.ParseUint(p.src[start:pos], 10, 64)
	if err != nil {
		p.fail(start, "bad int")
	}
	return n, pos
}

func isEndOfSeq(e elem) bool { return e.k == kEnd || e.k == kAlt }

// leftRecursion is llama_grammar_detect_left_recursion over every rule.
func (g *Grammar) leftRecursion() (uint32, bool) {
	n := len(g.rules)
	visited, inProgress, mayBeEmpty := make([]bool, n), make([]bool, n), make([]bool, n)
	var detect func(i int) bool
	detect = func(i int) bool {
		if inProgress[i] {
			return true
		}
		inProgress[i] = true
		r := g.rules[i]
		atStart := true
		for _, e := range r {
			if isEndOfSeq(e) {
				if atStart {
					mayBeEmpty[i] = true
					break
				}
				atStart = true
			} else {
				atStart = false
			}
		}
		recurse := true
		for _, e := range r {
			switch {
			case e.k == kRuleRef && recurse:
				if detect(int(e.v)) {
					return true
				}
				if !mayBeEmpty[e.v] {
					recurse = false
				}
			case isEndOfSeq(e):
				recurse = true
			default:
				recurse = false
			}
		}
		inProgress[i] = false
		visited[i] = true
		return false
	}
	for i := 0; i < n; i++ {
		if !visited[i] && detect(i) {
			return uint32(i), true
		}
	}
	return 0, false
}

// pos points at one element: rule index and offset.
type pos struct{ rule, off int32 }

type stack []pos

func (g *Grammar) el(p pos) elem { return g.rules[p.rule][p.off] }

// MaxStacks caps the live stacks, as a guard against grammars that blow up.
const MaxStacks = 100000

// advance is llama_grammar_advance_stack: expand rule refs on top of st until every stack has
// a character element on top (or is empty: accepting).
func (g *Grammar) advance(st stack, out *stackSet) {
	todo := []stack{st}
	seen := map[string]bool{}
	for len(todo) > 0 {
		cur := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		k := key(cur)
		if seen[k] {
			continue
		}
		seen[k] = true
		if len(cur) == 0 {
			out.add(cur)
			continue
		}
		top := cur[len(cur)-1]
		e := g.el(top)
		switch e.k {
		case kRuleRef:
			sub := pos{int32(e.v), 0}
			for {
				next := append(stack(nil), cur[:len(cur)-1]...)
				if after := (pos{top.rule, top.off + 1}); !isEndOfSeq(g.el(after)) {
					next = append(next, after)
				}
				if !isEndOfSeq(g.el(sub)) {
					next = append(next, sub)
				}
				todo = append(todo, next)
				for !isEndOfSeq(g.el(sub)) {
					sub.off++
				}
				if g.el(sub).k == kAlt {
					sub.off++
				} else {
					break
				}
			}
		case kChar, kCharNot, kCharAny:
			out.add(cur)
		default:
			panic("gbnf: stack left on a non-terminal element")
		}
	}
}

type stackSet struct {
	list []stack
	keys map[string]bool
}

func (s *stackSet) add(st stack) {
	k := key(st)
	if s.keys[k] {
		return
	}
	s.keys[k] = true
	s.list = append(s.list, st)
}

func key(st stack) string {
	b := make([]byte, 0, len(st)*8)
	for _, p := range st {
		b = strconv.AppendInt(b, int64(p.rule), 36)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(p.off), 36)
		b = append(b, ',')
	}
	return string(b)
}

// matchChar is llama_grammar_match_char.
func (g *Grammar) matchChar(p pos, c uint32) (bool, pos) {
	e := g.el(p)
	found := false
	positive := e.k == kChar || e.k == kCharAny
	for {
		e = g.el(p)
		next := g.rules[p.rule][p.off+1]
		switch {
		case next.k == kCharRngUpper:
			found = found || e.v <= c && c <= next.v
			p.off += 2
		case e.k == kCharAny:
			found = true
			p.off++
		default:
			found = found || e.v == c
			p.off++
		}
		if g.el(p).k != kCharAlt {
			break
		}
	}
	return found == positive, p
}

// Match runs s through the grammar from the root rule, one code point at a time, as
// llama-server's sampler does. It reports whether the whole of s is a sentence of the grammar
// and, when it is not, the byte offset of the first code point no stack could take (len(s)
// when s is a proper prefix of a sentence).
func (g *Grammar) Match(s string) (ok bool, failAt int, err error) {
	cur := &stackSet{keys: map[string]bool{}}
	// llama_grammar_init_impl: one stack per alternative of the root rule.
	for p := (pos{int32(g.root), 0}); ; {
		var st stack
		if !isEndOfSeq(g.el(p)) {
			st = stack{p}
		}
		g.advance(st, cur)
		for !isEndOfSeq(g.el(p)) {
			p.off++
		}
		if g.el(p).k != kAlt {
			break
		}
		p.off++
	}
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		next := &stackSet{keys: map[string]bool{}}
		for _, st := range cur.list {
			if len(st) == 0 {
				continue
			}
			top := st[len(st)-1]
			if m, after := g.matchChar(top, uint32(r)); m {
				ns := append(stack(nil), st[:len(st)-1]...)
				if !isEndOfSeq(g.el(after)) {
					ns = append(ns, after)
				}
				g.advance(ns, next)
			}
		}
		if len(next.list) == 0 {
			return false, i, nil
		}
		if len(next.list) > MaxStacks {
			return false, i, fmt.Errorf("gbnf: more than %d stacks at byte %d", MaxStacks, i)
		}
		cur = next
	}
	for _, st := range cur.list {
		if len(st) == 0 {
			return true, len(s), nil
		}
	}
	return false, len(s), nil
}

// MaxLen is the most bytes (UTF-8) of a sentence of the named rule ("root": of the grammar's
// language); finite is false when a rule can repeat without end (a "*", "+" or "{m,}"
// repetition, or recursion) or does not exist. It works on the rules as llama.cpp rewrites
// them, so it measures what llama-server's sampler can produce, independently of how the
// grammar was written. A character class counts the longest UTF-8 encoding it matches.
func (g *Grammar) MaxLen(rule string) (n int, finite bool) {
	id, ok := g.names[rule]
	if !ok || int(id) >= len(g.rules) {
		return 0, false
	}
	const (
		unknown  = -1
		visiting = -2
		infinite = -3
	)
	memo := make([]int, len(g.rules))
	for i := range memo {
		memo[i] = unknown
	}
	var ruleLen func(id uint32) int
	ruleLen = func(id uint32) int {
		switch memo[id] {
		case visiting:
			return infinite // recursion
		case unknown:
		default:
			return memo[id]
		}
		memo[id] = visiting
		best, cur, inf := 0, 0, false
		r := g.rules[id]
	elems:
		for i := 0; i < len(r); i++ {
			e := r[i]
			switch e.k {
			case kEnd, kAlt:
				best = max(best, cur)
				cur = 0
				if e.k == kEnd {
					break elems
				}
				continue
			case kRuleRef:
				if n := ruleLen(e.v); n == infinite {
					inf = true
				} else {
					cur += n
				}
				continue
			}
			// A character element, with the alternatives and ranges that follow it, matches
			// one code point.
			width := 1
			negated := e.k == kCharNot
			for {
				hi := e.v
				if i+1 < len(r) && r[i+1].k == kCharRngUpper {
					i++
					hi = r[i].v
				}
				w := utf8.RuneLen(rune(hi))
				if negated || e.k == kCharAny || w < 0 {
					w = utf8.UTFMax
				}
				width = max(width, w)
				if i+1 >= len(r) || r[i+1].k != kCharAlt {
					break
				}
				i++
				e = r[i]
			}
			cur += width
		}
		if inf {
			best = infinite
		}
		memo[id] = best
		return best
	}
	n = ruleLen(id)
	if n == infinite {
		return 0, false
	}
	return n, true
}
