// Package tooltext cleans and reads what an MCP server writes about its tools (names, titles,
// descriptions, the texts inside their schemas) before any model or client sees it.
//
// Two attacks live in that text. Hidden characters: zero-width and other invisible characters,
// bidirectional controls, Unicode tag characters and variation selectors render as nothing (or
// reorder what is shown) in every console, yet a model's tokenizer reads them, so a description
// can carry instructions no person reviewing it sees ("ASCII smuggling"). Clean removes them and
// says what they were, and what tag characters or variation selectors spelled. And tool
// poisoning: a description written to the model instead of about the tool, telling it to ignore
// its instructions, to hide what it does from the user, or to read files and secrets and pass
// them on. Scan flags text that matches the known patterns of those; it cannot prove a
// description honest, only make the known tricks visible to the person who approves the tool.
package tooltext

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// MaxExcerpt bounds a finding's excerpt, in bytes.
const MaxExcerpt = 240

// Hidden reports whether r is removed by Clean, out of any context: control characters but tab,
// newline and carriage return; the format characters (zero-width spaces and joiners, bidirectional
// controls, the byte order mark, soft hyphens, Unicode tags); variation selectors; and the
// fillers and joiners that render as nothing.
func Hidden(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return false
	case r < 0x20 || (r >= 0x7f && r <= 0x9f):
		return true
	case unicode.Is(unicode.Cf, r):
		return true
	case r >= 0xfe00 && r <= 0xfe0f, r >= 0xe0100 && r <= 0xe01ef:
		return true
	case r == 0x034f, r == 0x115f, r == 0x1160, r == 0x17b4, r == 0x17b5, r == 0x3164, r == 0xffa0,
		r >= 0x180b && r <= 0x180d:
		return true
	}
	return false
}

// keptInEmoji reports whether hidden rune r between prev and next is part of an emoji rather
// than hiding anything: a presentation selector (U+FE0E, U+FE0F) after a symbol, or a zero-width
// joiner between two symbols ("👨‍💻"). Removing those would flag every "⚠️" in a description.
func keptInEmoji(prev, r, next rune) bool {
	symbol := func(c rune) bool { return c > 0x7f && unicode.In(c, unicode.So, unicode.Sk, unicode.Sm) }
	switch r {
	case 0xfe0e, 0xfe0f:
		return symbol(prev)
	case 0x200d:
		return symbol(prev) && symbol(next)
	}
	return false
}

// cleaner removes hidden characters from one or more strings and remembers what it removed.
type cleaner struct {
	removed map[rune]int
	order   []rune
	total   int
	tags    strings.Builder // what tag characters spelled
	vs      []byte          // what variation selectors spelled, as bytes
	spelled []string        // texts spelled by hidden characters, for Scan
}

func (c *cleaner) clean(s string) string {
	if !strings.ContainsFunc(s, Hidden) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	prev := rune(0)
	for i, r := range s {
		if r == utf8.RuneError {
			// Invalid UTF-8 decodes as U+FFFD, a visible replacement character: keep it.
			b.WriteRune(r)
			prev = r
			continue
		}
		if !Hidden(r) {
			c.flush()
			b.WriteRune(r)
			prev = r
			continue
		}
		next, _ := utf8.DecodeRuneInString(s[i+utf8.RuneLen(r):])
		if keptInEmoji(prev, r, next) {
			b.WriteRune(r)
			continue
		}
		c.note(r)
	}
	c.flush()
	return b.String()
}

// note records one removed rune and decodes what smuggling schemes would read in it.
func (c *cleaner) note(r rune) {
	if c.removed == nil {
		c.removed = map[rune]int{}
	}
	if c.removed[r] == 0 {
		c.order = append(c.order, r)
	}
	c.removed[r]++
	c.total++
	switch {
	case r >= 0xe0020 && r <= 0xe007e:
		c.tags.WriteRune(r - 0xe0000)
	case r >= 0xfe00 && r <= 0xfe0f:
		c.vs = append(c.vs, byte(r-0xfe00))
	case r >= 0xe0100 && r <= 0xe01ef:
		c.vs = append(c.vs, byte(r-0xe0100+16))
	}
}

// flush ends a run of hidden characters: what it spelled is one text.
func (c *cleaner) flush() {
	if c.tags.Len() > 0 {
		c.spelled = append(c.spelled, "tag characters spell "+quote(c.tags.String()))
		c.tags.Reset()
	}
	if len(c.vs) > 0 {
		if s := string(c.vs); utf8.ValidString(s) && len(strings.TrimFunc(s, unicode.IsPrint)) == 0 && len(s) > 1 {
			c.spelled = append(c.spelled, "variation selectors spell "+quote(s))
		}
		c.vs = c.vs[:0]
	}
}

// texts are the texts hidden characters spelled, without the words around them, for Scan.
func (c *cleaner) texts() []string {
	out := make([]string, 0, len(c.spelled))
	for _, s := range c.spelled {
		_, q, _ := strings.Cut(s, " spell ")
		out = append(out, q)
	}
	return out
}

// finding is what c removed, or nil.
func (c *cleaner) finding(field string) *toolmeshv1.ToolFinding {
	if c.total == 0 {
		return nil
	}
	const show = 8
	var names []string
	for i, r := range c.order {
		if i == show {
			names = append(names, "…")
			break
		}
		n := fmt.Sprintf("U+%04X", r)
		if k := c.removed[r]; k > 1 {
			n += fmt.Sprintf(" ×%d", k)
		}
		names = append(names, n)
	}
	word := "characters"
	if c.total == 1 {
		word = "character"
	}
	excerpt := fmt.Sprintf("removed %d hidden %s (%s)", c.total, word, strings.Join(names, ", "))
	if len(c.spelled) > 0 {
		excerpt += "; " + strings.Join(c.spelled, "; ")
	}
	return &toolmeshv1.ToolFinding{
		Kind:    toolmeshv1.FindingKind_FINDING_KIND_HIDDEN_CHARACTERS,
		Field:   field,
		Rule:    hiddenRule(c.removed),
		Excerpt: cut(excerpt),
	}
}

// hiddenRule names the most telling kind of character removed.
func hiddenRule(removed map[rune]int) string {
	has := func(f func(rune) bool) bool {
		for r := range removed {
			if f(r) {
				return true
			}
		}
		return false
	}
	switch {
	case has(func(r rune) bool { return r >= 0xe0000 && r <= 0xe007f }):
		return "tag_characters"
	case has(func(r rune) bool { return (r >= 0xfe00 && r <= 0xfe0f) || (r >= 0xe0100 && r <= 0xe01ef) }):
		return "variation_selectors"
	case has(func(r rune) bool { return unicode.Is(unicode.Bidi_Control, r) }):
		return "bidi_controls"
	case has(func(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }):
		return "control_characters"
	}
	return "invisible_characters"
}

// Clean returns s without its hidden characters, and a finding saying what was removed from
// field (nil when nothing was).
func Clean(field, s string) (string, *toolmeshv1.ToolFinding) {
	var c cleaner
	out := c.clean(s)
	return out, c.finding(field)
}

// pattern is one known shape of tool poisoning.
type pattern struct {
	kind toolmeshv1.FindingKind
	rule string
	re   *regexp.Regexp
}

func re(s string) *regexp.Regexp { return regexp.MustCompile(`(?i)` + s) }

// patterns are the known shapes, each narrow enough that an honest description rarely matches
// (tooltext_test.go holds both kinds). A match is a flag for the person approving the tool.
var patterns = []pattern{
	// Text addressed to the model.
	{toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, "ignore_instructions",
		re(`\b(ignore|disregard|forget|override)\s+(all\s+|any\s+)?(of\s+)?(the\s+|your\s+|my\s+)?(previous|prior|above|earlier|preceding|other|system|original)\s+(instructions?|prompts?|rules|directions|guidelines|messages)`)},
	{toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, "instruction_tag",
		re(`<\s*/?\s*(important|system|instructions?|secret|hidden|admin|assistant)\s*>|\[\s*/?\s*(system|important|instructions?|inst)\s*\]`)},
	{toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, "new_instructions",
		re(`\b(new|updated|additional|real|true)\s+(system\s+)?instructions?\s*:`)},
	{toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, "system_prompt_leak",
		re(`\b(reveal|print|show|output|repeat|leak|disclose)\s+(your|the)\s+(system\s+prompt|instructions)`)},
	{toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, "other_tools",
		re(`\bbefore\s+(using|calling|invoking|running)\s+any\s+(other\s+)?tools?\b|\binstead\s+of\s+(using|calling)\s+(the\s+)?\S+\s+tool\b`)},
	{toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, "shadowing",
		re(`\bwhen\s+this\s+tool\s+is\s+(available|present|loaded|installed|enabled)\b`)},
	{toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, "or_else",
		re(`\botherwise\s+(the\s+|this\s+)?tool\s+(will\s+not|won't|cannot|can't|does\s+not|doesn't)\s+work`)},
	{toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, "address_the_model",
		re(`\b(dear|attention|note\s+to\s+the)\s+(ai|assistant|model|llm|agent)\b|\byou\s+are\s+now\s+(in\s+)?\w+\s+mode\b`)},

	// Hiding things from the user.
	{toolmeshv1.FindingKind_FINDING_KIND_CONCEAL_FROM_USER, "dont_tell_user",
		re(`\b(do\s+not|don't|dont|never|must\s+not|mustn't|without)\s+(tell|telling|inform|informing|mention|mentioning|notify|notifying|reveal|revealing|show|showing|alert|alerting|warn|warning|let)\s+(it\s+|this\s+|that\s+|anything\s+)?(to\s+)?(the\s+)?users?\b`)},
	{toolmeshv1.FindingKind_FINDING_KIND_CONCEAL_FROM_USER, "dont_mention",
		re(`\b(do\s+not|don't|dont|never)\s+(mention|reveal|disclose|say)\s+(that|this|it|anything)\b`)},
	{toolmeshv1.FindingKind_FINDING_KIND_CONCEAL_FROM_USER, "hide_from_user",
		re(`\b(hide|conceal|keep)\s+(this|it|that|these|them)\s+(secret\s+|hidden\s+)?(from|away\s+from)\s+(the\s+)?users?\b|\busers?\s+(must|should|need|may)\s+not\s+(know|see|be\s+told|notice|find\s+out)`)},
	{toolmeshv1.FindingKind_FINDING_KIND_CONCEAL_FROM_USER, "covertly",
		re(`\b(silently|secretly|covertly|quietly|discreetly)\s+(send|forward|upload|copy|read|call|include|add|exfiltrat|transmit|post|share|log|email)\w*`)},

	// Reading files or secrets.
	{toolmeshv1.FindingKind_FINDING_KIND_READ_SECRETS, "sensitive_path",
		re(`~?/?\.(ssh|aws|gnupg|kube|docker|cursor)/|\bid_(rsa|ed25519|ecdsa|dsa)\b|/etc/(passwd|shadow|sudoers)\b|(^|[\s'"` + "`" + `(/~])\.(env|netrc|pgpass|git-credentials|npmrc|pypirc)\b|\b(mcp|claude_desktop_config|credentials)\.json\b`)},
	{toolmeshv1.FindingKind_FINDING_KIND_READ_SECRETS, "read_secrets",
		re(`\b(read|cat|dump|exfiltrate|leak|steal|harvest|collect)\b[^.\n]{0,60}?\b(private\s+keys?|api[\s_-]?keys|secret\s+keys?|access\s+tokens|passwords|credentials|secrets|ssh\s+keys?|env(ironment)?\s+variables|cookies)\b`)},
	{toolmeshv1.FindingKind_FINDING_KIND_READ_SECRETS, "pass_contents",
		re(`\b(pass|send|include|put|add|append|paste)\s+(its|their|the|that|this|your)\s+(full\s+|entire\s+)?contents?\s+(as|in|into|to|with)\b`)},
}

// patternNeeds holds, for each of patterns, the folded literals one of which any match contains
// (prefilter.go).
var patternNeeds = func() [][][][]string {
	out := make([][][][]string, len(patterns))
	for i, p := range patterns {
		out[i] = needs(p.re.String())
	}
	return out
}()

// Scan returns the findings of the known injection patterns in text (already cleaned), one per
// rule, ordered by kind and then by where they matched.
func Scan(field, text string) []*toolmeshv1.ToolFinding {
	type hit struct {
		f   *toolmeshv1.ToolFinding
		pos int
	}
	var hits []hit
	ft := folded(text)
	for i, p := range patterns {
		if !mayMatch(ft, patternNeeds[i]) {
			continue
		}
		loc := p.re.FindStringIndex(text)
		if loc == nil {
			continue
		}
		hits = append(hits, hit{&toolmeshv1.ToolFinding{Kind: p.kind, Field: field, Rule: p.rule, Excerpt: cut(oneLine(text[loc[0]:loc[1]]))}, loc[0]})
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].f.GetKind() != hits[j].f.GetKind() {
			return hits[i].f.GetKind() < hits[j].f.GetKind()
		}
		return hits[i].pos < hits[j].pos
	})
	if len(hits) == 0 {
		return nil
	}
	out := make([]*toolmeshv1.ToolFinding, len(hits))
	for i, h := range hits {
		out[i] = h.f
	}
	return out
}

// Inspect cleans s and scans it: the hidden characters removed come first, then the patterns
// found in the clean text and in what hidden characters spelled (excerpts marked "(hidden)").
func Inspect(field, s string) (string, []*toolmeshv1.ToolFinding) {
	var c cleaner
	out := c.clean(s)
	return out, c.findings(field, []string{out})
}

// findings are c's removal and the patterns found in texts and in what c's hidden characters
// spelled, one per rule (a visible match and a hidden one are two).
func (c *cleaner) findings(field string, texts []string) []*toolmeshv1.ToolFinding {
	var out []*toolmeshv1.ToolFinding
	if f := c.finding(field); f != nil {
		out = append(out, f)
	}
	seen := map[string]bool{}
	var found []*toolmeshv1.ToolFinding
	for _, t := range texts {
		for _, f := range Scan(field, t) {
			if !seen[f.GetRule()] {
				seen[f.GetRule()] = true
				found = append(found, f)
			}
		}
	}
	for _, t := range c.texts() {
		for _, f := range Scan(field, t) {
			if !seen[f.GetRule()+" hidden"] {
				seen[f.GetRule()+" hidden"] = true
				f.Excerpt = cut(f.GetExcerpt() + " (hidden)")
				found = append(found, f)
			}
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].GetKind() < found[j].GetKind() })
	return append(out, found...)
}

// Schema returns a copy of a JSON Schema whose "title" and "description" texts, at any depth, are
// cleaned, and their findings under field, one per rule. Other strings (enum values, patterns,
// defaults) are data the server validates against and are left as they are. m is not changed;
// when nothing is cleaned, m itself is returned.
func Schema(field string, m map[string]any) (map[string]any, []*toolmeshv1.ToolFinding) {
	if m == nil {
		return nil, nil
	}
	var c cleaner
	var texts []string
	out, _ := walkSchema(m, &c, &texts)
	return out.(map[string]any), c.findings(field, texts)
}

// walkSchema cleans the texts under v, copying only what changes.
func walkSchema(v any, c *cleaner, texts *[]string) (any, bool) {
	switch v := v.(type) {
	case map[string]any:
		var out map[string]any
		for k, e := range v {
			var n any
			var changed bool
			if s, ok := e.(string); ok && (k == "title" || k == "description") {
				n = c.clean(s)
				changed = n != s
				*texts = append(*texts, n.(string))
			} else {
				n, changed = walkSchema(e, c, texts)
			}
			if changed {
				if out == nil {
					out = make(map[string]any, len(v))
					for k2, e2 := range v {
						out[k2] = e2
					}
				}
				out[k] = n
			}
		}
		if out == nil {
			return v, false
		}
		return out, true
	case []any:
		var out []any
		for i, e := range v {
			n, changed := walkSchema(e, c, texts)
			if changed {
				if out == nil {
					out = append([]any(nil), v...)
				}
				out[i] = n
			}
		}
		if out == nil {
			return v, false
		}
		return out, true
	}
	return v, false
}

// quote quotes s for an excerpt, cut short.
func quote(s string) string {
	const max = 160
	if len(s) > max {
		i := max
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		return fmt.Sprintf("%q…", s[:i])
	}
	return fmt.Sprintf("%q", s)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cut bounds an excerpt to MaxExcerpt bytes, on a rune boundary.
func cut(s string) string {
	if len(s) <= MaxExcerpt {
		return s
	}
	i := MaxExcerpt - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
