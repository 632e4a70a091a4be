package gorilla

import (
	"errors"
	"fmt"
	"sort"
)

// Sizing the grammar to a byte budget (Options.MaxBytes).
//
// llama-server stops generating at n_predict tokens. If the grammar admits a response longer
// than that, a model can be cut off in the middle of a call — the tiny random-weight test model
// fills strings and lists to their limits — and the output no longer parses. Under a grammar
// every sampled token has text (llama.cpp rejects empty pieces), so a token is at least one
// byte: a grammar whose longest sentence has MaxBytes bytes ends every response, with the
// end-of-text token, within MaxBytes+1 tokens. The bound is loose for a real model (a token of
// code is 3 to 4 bytes on average) but it is the one that always holds.
//
// A plain answer is bounded directly. Calls take more thought: the longest call adds up the
// longest value of every argument, optional ones included, and limits that let one call carry
// a 100-byte string let sixteen calls carry sixteen of them. So the budget is shared out in
// MaxCalls units, and calls come in classes by size: a call of class u spends u units and is at
// most u/MaxCalls of the budget long (classes of 1, 2, 3, 4, 6, 8, 12 and 16 units). A response
// is any sequence of calls whose units add up to at most MaxCalls: one long call, sixteen short
// ones, or a long one and a few short ones. Every tool gets limits of its own in every class
// (a tool with one small argument keeps generous limits next to one with ten), and a class
// that admits no call a smaller class does not is left out.
//
// The limits of a tool in a class are those under which its longest call fits and that refuse
// the fewest real calls, by the ladders below: each rung of a limit says what share of the
// ground-truth calls of the 1000 BFCL dev cases (testdata/bfcl/calls) need more than it.
// The shares are a prior for "what real calls need", taken from the data the bench then
// measures on, so the bench's grammar figure is an upper bound of what to expect elsewhere.

// rung is one level of a limit and the share (per mille) of BFCL calls that need more.
type rung struct{ level, refused int }

// The ladders, in the order of limits' fields (str, items, depth, digits, long), levels
// descending, each with the share (per mille) of BFCL ground-truth calls that need more than
// the level, among the calls to functions that have such values: 1,311 calls with strings, 289
// with lists or dicts, 19 whose schema nests two deep or has free-form values, 1,141 with
// numbers. Counted among the calls that can need a limit rather than among all calls: a tool
// whose schema nests is likely to be called with nested values, however rare such tools are.
// For strings, long is what the longest text argument of a call needs, str what every other
// string of the call needs (none of which is longer than 24 bytes in BFCL).
var ladders = [5][]rung{
	{{1024, 0}, {512, 0}, {256, 0}, {192, 0}, {160, 0}, {128, 0}, {112, 0}, {96, 0}, {80, 0}, {64, 0}, {56, 0},
		{48, 0}, {40, 0}, {32, 0}, {28, 0}, {24, 0}, {20, 5}, {16, 22}, {14, 37}, {12, 79}, {10, 137},
		{8, 264}, {6, 395}, {4, 569}, {2, 674}, {1, 693}, {0, 709}},
	{{64, 0}, {32, 0}, {24, 0}, {20, 0}, {16, 7}, {12, 7}, {10, 7}, {8, 17}, {7, 17}, {6, 28}, {5, 45}, {4, 131},
		{3, 204}, {2, 374}, {1, 792}, {0, 955}},
	{{4, 0}, {3, 0}, {2, 0}, {1, 263}, {0, 684}},
	{{17, 0}, {15, 0}, {12, 0}, {10, 1}, {9, 4}, {8, 12}, {7, 16}, {6, 22}, {5, 38}, {4, 69}, {3, 259},
		{2, 396}, {1, 711}},
	{{1024, 0}, {512, 0}, {256, 0}, {192, 0}, {160, 0}, {128, 0}, {112, 0}, {96, 1}, {80, 2}, {64, 2}, {56, 2},
		{48, 5}, {40, 6}, {32, 11}, {28, 14}, {24, 34}, {20, 66}, {16, 146}, {14, 203}, {12, 305}, {10, 461},
		{8, 584}, {6, 710}, {4, 861}, {2, 931}, {1, 943}, {0, 950}},
}

// Indexes of the limits in the ladders.
const (
	limStr = iota
	limItems
	limDepth
	limDigits
	limLong
	nLimits
)

func (l limits) get(d int) int {
	switch d {
	case limStr:
		return l.str
	case limItems:
		return l.items
	case limDepth:
		return l.depth
	case limDigits:
		return l.digits
	}
	return l.long
}

func (l limits) with(d, v int) limits {
	switch d {
	case limStr:
		l.str = v
	case limItems:
		l.items = v
	case limDepth:
		l.depth = v
	case limDigits:
		l.digits = v
	default:
		l.long = v
	}
	return l
}

// covers reports whether l admits everything o does.
func (l limits) covers(o limits) bool {
	return l.str >= o.str && l.items >= o.items && l.depth >= o.depth && l.digits >= o.digits &&
		max(l.long, l.str) >= max(o.long, o.str)
}

// refused is the share of ladder d at level v (that of the rung at or below v).
func refused(d, v int) int {
	lad := ladders[d]
	for _, r := range lad {
		if r.level <= v {
			return r.refused
		}
	}
	return lad[len(lad)-1].refused
}

// fit chooses the limits, at most top, under which a call to f takes at most budget bytes and
// that refuse the fewest BFCL calls (the sum of the ladders' shares); false when even the least
// limits do not fit.
//
// The search tries every combination of the levels of the limits that matter to f, with two
// savings: among the rungs that refuse the same share only the lowest is tried (it costs
// nothing more and leaves the most room to the others), and a combination is given up as soon
// as it refuses more than the best one found; the string length, tried last, is bisected (the
// call's length grows with every limit). The limits found are then raised back, rung by rung,
// while the call still fits: what refuses no more is better given than left unused.
func fit(f *function, top limits, budget int) (limits, bool) {
	if functionLen(f, top) <= budget {
		return top, true
	}
	var levels [nLimits][]rung
	var least limits
	for d := range nLimits {
		levels[d] = plateaus(ladderBelow(d, top.get(d)))
		least = least.with(d, levels[d][len(levels[d])-1].level)
	}
	if functionLen(f, least) > budget {
		return least, false
	}
	// The limits besides str that change the call's length somewhere between their top and
	// their least, the others being at the top, the least, or the middle of their ladders (a
	// number's digits do not show next to 1000-byte strings, nor inside empty lists).
	var mid limits
	for d := range nLimits {
		mid = mid.with(d, levels[d][len(levels[d])/2].level)
	}
	var dims []int
	for d := limItems; d < nLimits; d++ {
		for _, at := range []limits{top, mid, least} {
			if functionLen(f, at.with(d, least.get(d))) < functionLen(f, at.with(d, top.get(d))) {
				dims = append(dims, d)
				break
			}
		}
	}
	strLevels := levels[limStr]
	found := false
	var best limits
	bestPain := 0
	// A schema whose every limit matters (free-form values nested in lists of dicts...) has
	// tens of thousands of combinations: past maxFitEvals lengths, the best found so far is
	// kept (or the least limits).
	evals := 0
	length := func(l limits) int {
		evals++
		return functionLen(f, l)
	}
	var search func(i int, lim limits, pain int)
	search = func(i int, lim limits, pain int) {
		if evals > maxFitEvals {
			return
		}
		if i < len(dims) {
			d := dims[i]
			for _, r := range levels[d] {
				if found && pain+r.refused >= bestPain {
					return // lower rungs refuse no fewer
				}
				// Give up a rung when even the least of what follows does not fit.
				l := lim.with(d, r.level)
				rest := l
				for _, e := range dims[i+1:] {
					rest = rest.with(e, least.get(e))
				}
				if length(rest.with(limStr, least.str)) > budget {
					continue
				}
				search(i+1, l, pain+r.refused)
			}
			return
		}
		// The longest string length that fits and is not over the long one: the first level,
		// descending, whose call fits.
		j := sort.Search(len(strLevels), func(j int) bool {
			l := strLevels[j].level
			return l <= lim.long && length(lim.with(limStr, l)) <= budget
		})
		if j < len(strLevels) && (!found || pain+strLevels[j].refused < bestPain) {
			found, best, bestPain = true, lim.with(limStr, strLevels[j].level), pain+strLevels[j].refused
		}
	}
	search(0, top, 0)
	if !found {
		best = least // it fits: checked above
	}
	return relax(f, best, top, budget), true
}

// maxFitEvals bounds the lengths one fit computes (about a millisecond's worth).
const maxFitEvals = 4000

// plateaus keeps, of rungs that refuse the same share, the lowest.
func plateaus(rungs []rung) []rung {
	var out []rung
	for i, r := range rungs {
		if i+1 < len(rungs) && rungs[i+1].refused == r.refused {
			continue
		}
		out = append(out, r)
	}
	return out
}

// relaxOrder is the order in which relax hands out what is left of the budget: first to the
// one long text (where a large budget is most likely needed), then to list sizes, digits,
// other strings and depth.
var relaxOrder = [nLimits]int{limLong, limItems, limDigits, limStr, limDepth}

// relax raises lim (up to top) while a call still fits budget: first rung by rung, each time
// the rung that refuses the most fewer BFCL calls, then each limit in relaxOrder as far as it
// goes (any value in between rungs will do).
func relax(f *function, lim, top limits, budget int) limits {
	for {
		best, bestGain := lim, 0
		for _, d := range relaxOrder {
			v := lim.get(d)
			up := top.get(d)
			for _, r := range ladders[d] { // the lowest rung above v
				if r.level > v && r.level < up {
					up = r.level
				}
			}
			next := lim.with(d, up)
			if up <= v || next.str > next.long || functionLen(f, next) > budget {
				continue
			}
			if g := refused(d, v) - refused(d, up); g > bestGain {
				best, bestGain = next, g
			}
		}
		if bestGain == 0 {
			break
		}
		lim = best
	}
	for _, d := range relaxOrder {
		v, hi := lim.get(d), top.get(d)
		if d == limStr {
			hi = min(hi, lim.long)
		}
		// The largest value in (v, hi] that fits.
		n := sort.Search(hi-v, func(i int) bool { return functionLen(f, lim.with(d, hi-i)) <= budget })
		if n < hi-v {
			lim = lim.with(d, hi-n)
		}
	}
	return lim
}

// ladderBelow is ladder d from level top down: top first (with the share of the rung at or
// below it), then the rungs below it.
func ladderBelow(d, top int) []rung {
	out := []rung{{top, refused(d, top)}}
	for _, r := range ladders[d] {
		if r.level < top {
			out = append(out, r)
		}
	}
	return out
}

// unitCounts are the sizes of the call classes in units (MaxCalls units share the budget):
// 1, 2, 3, 4, 6, 8, 12, 16... (each half or a third more than the one before) below units,
// then units. Sizes in between would let more mixes of long and short calls fit, for a larger
// grammar: with all sizes from 1 to 16, 7 more of the 1000 BFCL cases pass at n_predict 512,
// none at 1024 or 2048, for a grammar half as large again.
func unitCounts(units int) []int {
	var out []int
	for n := 1; n < units; {
		out = append(out, n)
		switch {
		case n == 1:
			n = 2
		case n&(n-1) == 0:
			n = n * 3 / 2 // 2 -> 3, 4 -> 6, 8 -> 12
		default:
			n = n * 4 / 3 // 3 -> 4, 6 -> 8, 12 -> 16
		}
	}
	return append(out, units)
}

// ErrNoCallFits is BuildWith's error with Options.CallsOnly when no call to any tool fits
// Options.MaxBytes: a grammar without its answer branch would admit nothing.
var ErrNoCallFits = errors.New("gorilla: no call to any tool fits the byte budget")

// planGrammar chooses the call classes and limits and writes the grammar.
func (c *Catalog) planGrammar() error {
	o := c.opts
	top := limits{str: o.MaxStringLen, items: o.MaxItems, depth: o.MaxDepth, digits: o.MaxDigits, long: o.MaxStringLen}
	c.uncalled = nil
	c.units = o.MaxCalls
	if o.MaxBytes <= 0 {
		c.classes = nil
		if len(c.funcs) > 0 {
			k := class{units: 1, funcs: c.funcs}
			for range c.funcs {
				k.lim = append(k.lim, top)
			}
			c.classes = []class{k}
		}
		c.maxBytes = -1
		if o.CallsOnly {
			c.maxBytes = c.callsLen()
		}
		c.grammar = buildGrammar(c.classes, c.units, 0, o.CallsOnly && len(c.classes) > 0)
		return nil
	}

	budget := o.MaxBytes
	called := make([]bool, len(c.funcs))
	var classes []class
	for _, u := range unitCounts(c.units) {
		per := budget*u/c.units - len(fnDelim)
		k := class{units: u}
		for i, f := range c.funcs {
			if l, ok := fit(f, top, per); ok {
				called[i] = true
				k.funcs = append(k.funcs, f)
				k.lim = append(k.lim, l)
			}
		}
		if len(k.funcs) > 0 {
			classes = append(classes, k)
		}
	}
	for i, f := range c.funcs {
		if !called[i] {
			c.uncalled = append(c.uncalled, f.id)
		}
	}
	c.classes = dropDominated(classes)
	if o.CallsOnly && len(c.classes) == 0 {
		return fmt.Errorf("%w: %d bytes", ErrNoCallFits, budget)
	}
	c.maxBytes = c.callsLen()
	if !o.CallsOnly || len(c.classes) == 0 {
		c.maxBytes = max(c.maxBytes, answerLen(budget))
	}
	c.grammar = buildGrammar(c.classes, c.units, budget, o.CallsOnly)
	return nil
}

// callsLen is the most bytes of a call sequence the classes admit: the best way to spend the
// units on calls, each as long as its class allows.
func (c *Catalog) callsLen() int {
	if len(c.classes) == 0 {
		return 0
	}
	longest := make([]int, len(c.classes))
	for i, k := range c.classes {
		for j, f := range k.funcs {
			longest[i] = max(longest[i], len(fnDelim)+functionLen(f, k.lim[j]))
		}
	}
	best := make([]int, c.units+1) // best[n]: the longest sequence in n units
	for n := 1; n <= c.units; n++ {
		best[n] = best[n-1]
		for i, k := range c.classes {
			if k.units <= n {
				best[n] = max(best[n], best[n-k.units]+longest[i])
			}
		}
	}
	return best[c.units]
}

// dropDominated leaves out a class when a smaller class admits every call it does: the call is
// then made in fewer units.
func dropDominated(classes []class) []class {
	var out []class
	for i, k := range classes {
		dominated := false
		for _, s := range classes[:i] {
			if admitsAll(s, k) {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, k)
		}
	}
	return out
}

// admitsAll reports whether every call of class k is a call of class s.
func admitsAll(s, k class) bool {
	lim := make(map[*function]limits, len(s.funcs))
	for i, f := range s.funcs {
		lim[f] = s.lim[i]
	}
	for i, f := range k.funcs {
		l, ok := lim[f]
		if !ok || !l.covers(k.lim[i]) {
			return false
		}
	}
	return true
}
