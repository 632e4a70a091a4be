package index

import (
	"cmp"
	"regexp"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/services/retriever/lexical"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// Parts cuts a request into its parts: sentences (Unicode UAX #29 sentence boundaries) and
// semicolon-separated clauses, keeping only parts with at least one searchable term. A request
// of one part returns one element. It is lexical.Parts, the split Encoder.QueryParts encodes.
func Parts(text string) []string { return lexical.Parts(text) }

var clauseBreak = regexp.MustCompile(`(?i),|\b(?:and|then|also)\b`)

func splitQuery(text string, how Split) []string {
	parts := Parts(text)
	if how != SplitClauses {
		return parts
	}
	var out []string
	for _, p := range parts {
		for _, c := range clauseBreak.Split(p, -1) {
			if c = strings.TrimSpace(c); c != "" && len(lexical.Terms(c, true)) > 0 {
				out = append(out, c)
			}
		}
	}
	return out
}

func sortHits(hs []store.Hit) {
	slices.SortFunc(hs, func(a, b store.Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func sortedKeys32[V any](m map[uint32]V) []uint32 {
	ks := make([]uint32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
