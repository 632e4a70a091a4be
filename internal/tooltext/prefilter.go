package tooltext

import (
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
)

// A pattern's regular expression costs 10-45 µs on a 300-byte description (Go's regexp with
// case folding and word boundaries), so scanning a server of 5,000 tools took seconds at each
// listing. Nearly every honest description lacks the words a pattern needs, and that is cheap to
// see: each pattern carries the literals one of which any match must contain, derived from the
// expression itself (so it cannot drift from it), and the expression runs only when one is in
// the text. The test is a necessary condition, never a sufficient one: it can skip work, never a
// match.

// folded returns s with every rune replaced by the smallest rune it case-folds with, the
// comparison (?i) makes: "K", "k" and the Kelvin sign are one, as are "s", "S" and "ſ".
func folded(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

func foldRune(r rune) rune {
	if r < 0x80 { // the ASCII letters' lowest fold is the capital, even for k and s
		if 'a' <= r && r <= 'z' {
			return r - 'a' + 'A'
		}
		return r
	}
	lowest := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		lowest = min(lowest, f)
	}
	return lowest
}

// needs returns what every match of expr contains, as alternatives (a top-level a|b has one
// for each branch): a match satisfies one of them, that is contains a literal (folded) of each
// of its sets. Nil means it cannot say.
func needs(expr string) [][][]string {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	re = re.Simplify()
	branches := []*syntax.Regexp{re}
	if re.Op == syntax.OpAlternate {
		branches = re.Sub
	}
	var alts [][][]string
	for _, b := range branches {
		sets := required(b)
		if len(sets) == 0 {
			return nil
		}
		alts = append(alts, sets)
	}
	return alts
}

// required returns sets of literals such that any match of re contains one literal of each.
func required(re *syntax.Regexp) [][]string {
	switch re.Op {
	case syntax.OpLiteral:
		return [][]string{{folded(string(re.Rune))}}
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		var all [][]string
		for _, sub := range re.Sub {
			all = append(all, required(sub)...)
		}
		return all
	case syntax.OpAlternate:
		// A match is one branch's match: it contains one literal of each branch's most
		// selective set (its shortest literal longest), so of their union.
		var union []string
		for _, sub := range re.Sub {
			sets := required(sub)
			if len(sets) == 0 {
				return nil
			}
			best := sets[0]
			for _, set := range sets[1:] {
				if shortest(set) > shortest(best) {
					best = set
				}
			}
			union = append(union, best...)
		}
		slices.Sort(union)
		return [][]string{slices.Compact(union)}
	}
	return nil
}

func shortest(set []string) int {
	n := -1
	for _, s := range set {
		if n < 0 || len(s) < n {
			n = len(s)
		}
	}
	return n
}

// mayMatch reports whether text (folded) satisfies one of the alternatives, or there are none.
func mayMatch(foldedText string, alts [][][]string) bool {
	if alts == nil {
		return true
	}
	has := func(l string) bool { return strings.Contains(foldedText, l) }
	for _, sets := range alts {
		all := true
		for _, set := range sets {
			if !slices.ContainsFunc(set, has) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
