package memory

import (
	"context"
	"math"
	"slices"

	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// maxGroup is the most queries scored in one walk of the postings (one bit each in a uint16).
const maxGroup = 16

// Search returns the best q.Limit hits.
func (s *Store) Search(ctx context.Context, q store.Query) ([]store.Hit, error) {
	out, err := s.SearchMulti(ctx, []store.Query{q})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out[0], nil
}

// SearchMulti runs several searches under one read lock, walking each posting list once for all
// the queries that contain its term (the index searches a request and its parts this way).
// Results are the same as from Search, one list per query.
//
// Queries with the same server filter are scored together: their accumulators are laid out
// slot-major (acc[slot·g + query]), so that one posting updates every query that shares its
// term within one cache line, and all the working memory comes from a pool, so that a search
// allocates little more than its results.
func (s *Store) SearchMulti(ctx context.Context, qs []store.Query) ([][]store.Hit, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	out := make([][]store.Hit, len(qs))
	sc := s.getScratch()
	defer s.scratch.Put(sc)

	// Group the active queries by server filter.
	sc.groups = sc.groups[:0]
	sc.groupOf = grow(sc.groupOf, len(qs))
	sc.local = grow(sc.local, len(qs))
	for i := range qs {
		sc.groupOf[i] = -1
		if qs[i].Limit <= 0 {
			continue
		}
		gi := -1
		for j := range sc.groups {
			g := &sc.groups[j]
			if len(g.qs) < maxGroup && slices.Equal(qs[g.qs[0]].Servers, qs[i].Servers) {
				gi = j
				break
			}
		}
		if gi < 0 {
			ok, any := s.filter(qs[i].Servers)
			if !any {
				continue
			}
			if len(sc.groups) < cap(sc.groups) {
				sc.groups = sc.groups[:len(sc.groups)+1]
			} else {
				sc.groups = append(sc.groups, group{})
			}
			gi = len(sc.groups) - 1
			sc.groups[gi].ok = ok
			sc.groups[gi].qs = sc.groups[gi].qs[:0]
		}
		g := &sc.groups[gi]
		sc.groupOf[i] = int32(gi)
		sc.local[i] = int32(len(g.qs))
		g.qs = append(g.qs, i)
	}
	if len(sc.groups) == 0 {
		return out, nil
	}

	s.termTables(qs, sc)
	for gi := range sc.groups {
		g := &sc.groups[gi]
		s.scoreGroup(qs, sc, int32(gi), g)
		for li, i := range g.qs {
			q := &qs[i]
			if len(q.Dense) == 0 {
				out[i] = s.hits(s.topLexical(sc, len(g.qs), li, q.Limit))
				continue
			}
			depth := max(q.Limit, rrfDepth)
			lex := slices.Clone(s.topLexical(sc, len(g.qs), li, depth))
			if err := ctx.Err(); err != nil {
				sc.clearFused(len(g.qs))
				return nil, err
			}
			dense := s.denseScores(q.Dense, g.ok)
			dw := weight(q.Weights, "dense")
			fused := map[int32]float64{}
			for r, c := range s.topKOf(dense, depth) {
				fused[c.slot] += dw / float64(RRFK+r+1)
			}
			for r, c := range lex {
				fused[c.slot] += 1 / float64(RRFK+r+1)
			}
			all := make([]scored, 0, len(fused))
			for sl, v := range fused {
				all = append(all, scored{slot: sl, score: v})
			}
			out[i] = s.hits(s.topKOf(all, q.Limit))
		}
		sc.clearFused(len(g.qs))
	}
	return out, nil
}

// group is a set of queries with the same server filter, scored in one walk.
type group struct {
	ok func(int32) bool
	qs []int // query indices
}

// termQuery is one query's weight for a term.
type termQuery struct {
	q  int32   // query index (in qs while building; in its group while walking)
	qw float32 // idf · query weight
}

// termRun is one term of a named vector: its postings and the queries that contain it
// (tqs[lo:hi], in query order).
type termRun struct {
	pl     []posting
	lo, hi int32
}

// table is one named vector's terms, in the order of their first appearance over the queries.
type table struct {
	name  string
	runs  []termRun
	tqs   []termQuery
	entry []termEntry // building space
}

type termEntry struct {
	run int32
	tq  termQuery
}

// scratch is one search's working memory, pooled.
type scratch struct {
	acc      []float32   // rows of one named vector's raw scores (see walkDense, walkSparse)
	fused    []float64   // [slot·g + q]: lexical fused score
	cand     []uint16    // per slot: bit q set when query q has a fused score
	gruns    []termRun   // the current group's terms of one named vector
	gtqs     []termQuery // their queries, by index in the group
	touched  []int32     // slots the current walk touched (filter passed)
	rejected []int32     // slots the current walk found filtered out
	cands    []int32     // slots with cand ≠ 0
	mx       []float32
	w        []float64
	top      []scored

	groups  []group
	groupOf []int32
	local   []int32
	tables  []table
	termPos map[uint32]int32
}

func grow[T any](xs []T, n int) []T {
	if cap(xs) < n {
		return make([]T, n, n+n/4)
	}
	return xs[:n]
}

func (s *Store) getScratch() *scratch {
	sc, _ := s.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{termPos: map[uint32]int32{}}
	}
	// cand and the slot-major arrays are all zero between searches; grown ones too.
	if n := len(s.slots); len(sc.cand) < n {
		sc.cand = make([]uint16, n+n/4)
	}
	return sc
}

// termTables builds, per named vector used by any active query, the terms in order of first
// appearance (the queries in order, each query's indices in order) with their queries and
// weights idf·q. Walking the terms in this order fixes each score's float summation order.
func (s *Store) termTables(qs []store.Query, sc *scratch) {
	n := float64(s.live)
	names := make([]string, 0, 4)
	for i := range qs {
		if sc.groupOf[i] < 0 {
			continue
		}
		for name := range qs[i].Sparse {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names) // deterministic float summation order over the named vectors
	sc.tables = sc.tables[:0]
	for _, name := range names {
		post := s.vecs[name]
		if post == nil {
			continue
		}
		if len(sc.tables) < cap(sc.tables) {
			sc.tables = sc.tables[:len(sc.tables)+1]
		} else {
			sc.tables = append(sc.tables, table{})
		}
		tb := &sc.tables[len(sc.tables)-1]
		tb.name = name
		tb.runs = tb.runs[:0]
		tb.entry = tb.entry[:0]
		clear(sc.termPos)
		for i := range qs {
			q := &qs[i]
			if sc.groupOf[i] < 0 || weight(q.Weights, name) == 0 {
				continue
			}
			qv := q.Sparse[name]
			for j, t := range qv.Indices {
				if j >= len(qv.Values) {
					continue
				}
				pos, seen := sc.termPos[t]
				var pl []posting
				if seen {
					pl = tb.runs[pos].pl
				} else if pl = post[t]; len(pl) == 0 {
					continue
				}
				df := float64(len(pl))
				tq := termQuery{q: int32(i), qw: float32(math.Log(1+(n-df+0.5)/(df+0.5)) * float64(qv.Values[j]))}
				if !seen {
					pos = int32(len(tb.runs))
					sc.termPos[t] = pos
					tb.runs = append(tb.runs, termRun{pl: pl})
				}
				tb.runs[pos].hi++ // count, turned into ranges below
				tb.entry = append(tb.entry, termEntry{run: pos, tq: tq})
			}
		}
		// Counting sort of the entries by run, stable: each run's queries stay in query order.
		lo := int32(0)
		for r := range tb.runs {
			c := tb.runs[r].hi
			tb.runs[r].lo, tb.runs[r].hi = lo, lo
			lo += c
		}
		tb.tqs = grow(tb.tqs, len(tb.entry))
		for _, e := range tb.entry {
			r := &tb.runs[e.run]
			tb.tqs[r.hi] = e.tq
			r.hi++
		}
	}
}

// scoreGroup computes the fused lexical scores of a group's queries into sc.fused and sc.cand:
// per named vector, Σ idf·q·d accumulated over the postings (each posting list walked once for
// all the group's queries that contain its term), divided by its maximum over the slots,
// weighted and summed. A named vector whose postings are many for the store's size is
// normalized by a sequential pass over all the slots instead of through the list of touched
// slots.
func (s *Store) scoreGroup(qs []store.Query, sc *scratch, gi int32, g *group) {
	G, n := len(g.qs), len(s.slots)
	if need := n * (G + 1); len(sc.acc) < need {
		sc.acc = make([]float32, need+need/4)
	}
	if need := n * G; len(sc.fused) < need {
		sc.fused = make([]float64, need+need/4)
	}
	sc.mx = grow(sc.mx, G)
	sc.w = grow(sc.w, G)
	for ti := range sc.tables {
		tb := &sc.tables[ti]
		// The group's share of the terms.
		runs, tqs, volume := sc.gruns[:0], sc.gtqs[:0], 0
		for _, r := range tb.runs {
			lo := int32(len(tqs))
			for _, tq := range tb.tqs[r.lo:r.hi] {
				if sc.groupOf[tq.q] == gi {
					tqs = append(tqs, termQuery{q: sc.local[tq.q], qw: tq.qw})
				}
			}
			if hi := int32(len(tqs)); hi > lo {
				runs = append(runs, termRun{pl: r.pl, lo: lo, hi: hi})
				volume += len(r.pl)
			}
		}
		sc.gruns, sc.gtqs = runs, tqs
		if len(runs) == 0 {
			continue
		}
		for li, i := range g.qs {
			sc.mx[li] = 0
			sc.w[li] = weight(qs[i].Weights, tb.name)
		}
		if volume >= n/4 {
			s.walkDense(sc, G, runs, tqs, g.ok)
		} else {
			s.walkSparse(sc, G, runs, tqs, g.ok)
		}
	}
}

// walkDense accumulates with rows of G scores and normalizes in sequential passes over all the
// slots; filtered-out slots are dropped in the first pass.
func (s *Store) walkDense(sc *scratch, G int, runs []termRun, tqs []termQuery, ok func(int32) bool) {
	n := len(s.slots)
	acc := sc.acc[:n*G]
	for _, r := range runs {
		if r.hi-r.lo == 1 {
			q, qw := int(tqs[r.lo].q), tqs[r.lo].qw
			if G == 1 {
				for _, p := range r.pl {
					acc[p.slot] += qw * p.w
				}
				continue
			}
			for _, p := range r.pl {
				acc[int(p.slot)*G+q] += qw * p.w
			}
			continue
		}
		buf := tqs[r.lo:r.hi]
		for _, p := range r.pl {
			a := acc[int(p.slot)*G : int(p.slot)*G+G]
			for _, tq := range buf {
				a[tq.q] += tq.qw * p.w
			}
		}
	}
	mx, w, fused, cand := sc.mx, sc.w, sc.fused[:n*G], sc.cand[:n]
	if G == 1 {
		m := float32(0)
		for sl, v := range acc {
			if v != 0 {
				if ok != nil && !ok(int32(sl)) {
					acc[sl] = 0
					continue
				}
				m = max(m, v)
			}
		}
		if m > 0 {
			w0 := w[0]
			for sl, v := range acc {
				if v > 0 {
					if cand[sl] == 0 {
						sc.cands = append(sc.cands, int32(sl))
						cand[sl] = 1
					}
					fused[sl] += w0 * float64(v/m)
				}
			}
		}
		clear(acc)
		return
	}
	for sl := 0; sl < n; sl++ {
		a := acc[sl*G : sl*G+G]
		if ok != nil && !ok(int32(sl)) {
			clear(a)
			continue
		}
		for li, v := range a {
			mx[li] = max(mx[li], v)
		}
	}
	for sl := 0; sl < n; sl++ {
		a := acc[sl*G : sl*G+G]
		f := fused[sl*G : sl*G+G]
		var bits uint16
		for li, v := range a {
			if v > 0 && mx[li] > 0 {
				bits |= 1 << li
				f[li] += w[li] * float64(v/mx[li])
			}
		}
		if bits != 0 {
			if cand[sl] == 0 {
				sc.cands = append(sc.cands, int32(sl))
			}
			cand[sl] |= bits
		}
	}
	clear(acc)
}

// walkSparse accumulates with rows of G scores and, for more than one query, the slot's state
// (0 new, 1 touched, -1 filtered out; for one query a zero score marks a new slot), and
// normalizes through the list of touched slots.
func (s *Store) walkSparse(sc *scratch, G int, runs []termRun, tqs []termQuery, ok func(int32) bool) {
	acc := sc.acc
	touched, rejected := sc.touched[:0], sc.rejected[:0]
	S := G + 1
	if G == 1 {
		S = 1
	}
	for _, r := range runs {
		if S == 1 {
			qw := tqs[r.lo].qw
			for _, p := range r.pl {
				if acc[p.slot] == 0 {
					if ok != nil && !ok(p.slot) {
						continue
					}
					touched = append(touched, p.slot)
				}
				acc[p.slot] += qw * p.w
			}
			continue
		}
		buf := tqs[r.lo:r.hi]
		for _, p := range r.pl {
			a := acc[int(p.slot)*S : int(p.slot)*S+S]
			if st := a[G]; st != 1 {
				if st < 0 {
					continue
				}
				if ok != nil && !ok(p.slot) {
					a[G] = -1
					rejected = append(rejected, p.slot)
					continue
				}
				a[G] = 1
				touched = append(touched, p.slot)
			}
			for _, tq := range buf {
				a[tq.q] += tq.qw * p.w
			}
		}
	}
	for _, sl := range rejected {
		acc[int(sl)*S+G] = 0
	}
	sc.touched, sc.rejected = touched, rejected

	mx, w, fused, cand := sc.mx, sc.w, sc.fused, sc.cand
	for _, sl := range touched {
		a := acc[int(sl)*S : int(sl)*S+G]
		for li, v := range a {
			mx[li] = max(mx[li], v)
		}
	}
	for _, sl := range touched {
		a := acc[int(sl)*S : int(sl)*S+S]
		f := fused[int(sl)*G : int(sl)*G+G]
		for li, v := range a[:G] {
			if mx[li] > 0 && v > 0 {
				if cand[sl] == 0 {
					sc.cands = append(sc.cands, sl)
				}
				cand[sl] |= 1 << li
				f[li] += w[li] * float64(v/mx[li])
			}
		}
		clear(a)
	}
}

// topLexical returns the k best slots of query li of the scored group, best first. The slice is
// the scratch's and valid until the next call.
func (s *Store) topLexical(sc *scratch, G, li, k int) []scored {
	h := topK{s: s, k: k, xs: sc.top[:0]}
	bit := uint16(1) << li
	for _, sl := range sc.cands {
		if sc.cand[sl]&bit == 0 {
			continue
		}
		x := sc.fused[int(sl)*G+li]
		if k > 0 && len(h.xs) == k && x < h.xs[0].score {
			continue // worse than the worst kept: no need to compare ids
		}
		h.push(scored{slot: sl, score: x})
	}
	sc.top = h.xs
	return h.sorted()
}

// clearFused zeroes the fused scores and candidate bits of the scored group.
func (sc *scratch) clearFused(G int) {
	for _, sl := range sc.cands {
		clear(sc.fused[int(sl)*G : int(sl)*G+G])
		sc.cand[sl] = 0
	}
	sc.cands = sc.cands[:0]
}

// better orders by score, then id for determinism.
func (s *Store) better(a, b scored) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return s.slots[a.slot].id < s.slots[b.slot].id
}

// topK keeps the k best seen so far in a binary heap, worst on top.
type topK struct {
	s  *Store
	k  int
	xs []scored
}

func (h *topK) push(c scored) {
	if h.k <= 0 {
		return
	}
	if len(h.xs) < h.k {
		h.xs = append(h.xs, c)
		// sift up
		i := len(h.xs) - 1
		for i > 0 {
			p := (i - 1) / 2
			if !h.s.better(h.xs[p], h.xs[i]) {
				break
			}
			h.xs[p], h.xs[i] = h.xs[i], h.xs[p]
			i = p
		}
		return
	}
	if !h.s.better(c, h.xs[0]) {
		return
	}
	h.xs[0] = c
	// sift down
	i, n := 0, len(h.xs)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.s.better(h.xs[l], h.xs[r]) {
			m = r
		}
		if !h.s.better(h.xs[i], h.xs[m]) {
			break
		}
		h.xs[i], h.xs[m] = h.xs[m], h.xs[i]
		i = m
	}
}

// sorted returns the kept entries best first.
func (h *topK) sorted() []scored {
	slices.SortFunc(h.xs, func(a, b scored) int {
		switch {
		case h.s.better(a, b):
			return -1
		case h.s.better(b, a):
			return 1
		}
		return 0
	})
	return h.xs
}

// topKOf returns the k best of all, best first.
func (s *Store) topKOf(all []scored, k int) []scored {
	if k <= 0 {
		return nil
	}
	h := topK{s: s, k: k, xs: make([]scored, 0, min(k, len(all)))}
	for _, c := range all {
		h.push(c)
	}
	return h.sorted()
}
