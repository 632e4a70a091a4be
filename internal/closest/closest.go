// Package closest finds, among known names, those nearest to one a user typed: for "did you
// mean" hints and for lists of known names ordered closest first.
package closest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// maxLen bounds the names Distance compares in full: its cost is quadratic, and a name a user
// types is short.
const maxLen = 64

// Distance is the Levenshtein distance between a and b, ignoring case; names longer than 64
// bytes are 64 apart from everything.
func Distance(a, b string) int {
	if len(a) > maxLen || len(b) > maxLen {
		return maxLen
	}
	a, b = strings.ToLower(a), strings.ToLower(b)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Sorted returns known ordered by their distance to name, closest first (ties by name), without
// duplicates. known is not changed.
func Sorted(name string, known []string) []string {
	type scored struct {
		name string
		d    int
	}
	names := slices.Compact(slices.Sorted(slices.Values(known)))
	s := make([]scored, len(names))
	for i, k := range names {
		s[i] = scored{k, Distance(name, k)}
	}
	slices.SortStableFunc(s, func(x, y scored) int { return cmp.Compare(x.d, y.d) })
	out := make([]string, len(s))
	for i, k := range s {
		out[i] = k.name
	}
	return out
}

// Name is the known name nearest to name: the same but for case, or else the nearest at most
// maxEdits edits away (ties by name); "" when none is that near.
func Name(name string, known []string, maxEdits int) string {
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return k
		}
	}
	if s := Sorted(name, known); len(s) > 0 && Distance(name, s[0]) <= maxEdits {
		return s[0]
	}
	return ""
}

// Near is a hint for a name that is not known: ` (did you mean "X"?)` naming the nearest known
// name within maxEdits edits, or "" when none is that near.
func Near(name string, known []string, maxEdits int) string {
	if k := Name(name, known, maxEdits); k != "" {
		return ` (did you mean "` + k + `"?)`
	}
	return ""
}

// List is known ordered closest to name first, joined with ", ", at most max of them and then
// "and N more": for a message that says which names there are.
func List(name string, known []string, max int) string {
	s := Sorted(name, known)
	if len(s) > max {
		return strings.Join(s[:max], ", ") + fmt.Sprintf(" and %d more", len(s)-max)
	}
	return strings.Join(s, ", ")
}
