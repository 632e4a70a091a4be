package memory

import (
	"context"
	"math"
	mbits "math/bits"
	"runtime"
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
			if len(g.qs) < maxGroup && slices.Equal(qs[g.qs[0]].Servers, qs[i].Servers) && sameVectors(&qs[g.qs[0]], &qs[i]) {
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
	if len(sc.groups) > 1 && len(s.slots) >= parallelSlots && runtime.GOMAXPROCS(0) > 1 {
		// The first group (the whole request, with its char 4-grams) on another goroutine with
		// scratch of its own, the other groups (its sentences) here: the groups share nothing
		// but the read-only term tables, and each fills its own queries' results.
		sc2 := s.getScratch()
		own := sc2.shared()
		sc2.tables, sc2.groupOf, sc2.local = sc.tables, sc.groupOf, sc.local
		done := make(chan error, 1)
		go func() { done <- s.finishGroup(ctx, qs, sc2, 0, &sc.groups[0], out) }()
		var err error
		for gi := 1; gi < len(sc.groups) && err == nil; gi++ {
			err = s.finishGroup(ctx, qs, sc, int32(gi), &sc.groups[gi], out)
		}
		err2 := <-done
		sc2.tables, sc2.groupOf, sc2.local = own.tables, own.groupOf, own.local
		s.scratch.Put(sc2)
		if err == nil {
			err = err2
		}
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	for gi := range sc.groups {
		if err := s.finishGroup(ctx, qs, sc, int32(gi), &sc.groups[gi], out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parallelSlots is the smallest store whose groups SearchMulti scores on two goroutines (below
// it the walks are too short to pay for the hand-over).
const parallelSlots = 4096

// sharedScratch is the part of a scratch that SearchMulti lends to a second scratch.
type sharedScratch struct {
	tables         []table
	groupOf, local []int32
}

func (sc *scratch) shared() sharedScratch {
	return sharedScratch{tables: sc.tables, groupOf: sc.groupOf, local: sc.local}
}

// finishGroup scores group gi and sets the results of its queries in out.
func (s *Store) finishGroup(ctx context.Context, qs []store.Query, sc *scratch, gi int32, g *group, out [][]store.Hit) error {
	s.scoreGroup(qs, sc, gi, g)
	sc.ks = grow(sc.ks, len(g.qs))
	for li, i := range g.qs {
		sc.ks[li] = qs[i].Limit
		if len(qs[i].Dense) > 0 {
			sc.ks[li] = max(qs[i].Limit, rrfDepth)
		}
	}
	s.topLexicalAll(sc, len(g.qs))
	for li, i := range g.qs {
		q := &qs[i]
		if len(q.Dense) == 0 {
			out[i] = s.hits(sc.tops[li])
			continue
		}
		lex := slices.Clone(sc.tops[li])
		depth := sc.ks[li]
		if err := ctx.Err(); err != nil {
			sc.clearFused(len(g.qs))
			return err
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
	return nil
}

// sameVectors reports whether a and b use the same named vectors (with a term and a nonzero
// weight). Queries that do not are scored in separate groups: a request whose sentences search
// words only then walks its char 4-grams, which touch most slots, with rows of one instead of
// strided through the rows of all its sentences. Grouping does not change any score.
func sameVectors(a, b *store.Query) bool {
	return usesAll(a, b) && usesAll(b, a)
}

// usesAll reports whether every named vector a uses is used by b.
func usesAll(a, b *store.Query) bool {
	for name, v := range a.Sparse {
		if len(v.Indices) == 0 || weight(a.Weights, name) == 0 {
			continue
		}
		if len(b.Sparse[name].Indices) == 0 || weight(b.Weights, name) == 0 {
			return false
		}
	}
	return true
}

// group is a set of queries with the same server filter and named vectors, scored in one walk.
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
	acc        []float32   // rows of one named vector's raw scores (see walkDense, walkSparse)
	fused      []float64   // [slot·g + q]: lexical fused score
	cand       []uint16    // per slot: bit q set when query q has a fused score
	gruns      []termRun   // the current group's terms of one named vector
	gtqs       []termQuery // their queries, by index in the group
	touched    []int32     // slots the current walk touched (filter passed)
	rejected   []int32     // slots the current walk found filtered out
	cands      []int32     // slots with cand ≠ 0
	ks         []int       // per group query: how many hits topLexicalAll keeps
	heaps      [][]scored  // per group query: topLexicalAll's heap memory
	tops       [][]scored  // per group query: topLexicalAll's result
	rowTouched [][]int32   // per row of walkRows: the slots it touched
	sub        []int32     // the current named vector's rows: group query of each
	subOf      []int32     // per group query: its row in the current walk, or -1
	mx         []float32
	w          []float64
	top        []scored

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
// weighted and summed. Each named vector is walked with rows of only the queries that use it
// (a request whose sentences search words only walks its char 4-grams with rows of one). A
// named vector whose postings are many for the store's size is normalized by a sequential pass
// over all the slots instead of through the list of touched slots.
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
	sc.subOf = grow(sc.subOf, G)
	for ti := range sc.tables {
		tb := &sc.tables[ti]
		// The group's share of the terms; its queries numbered by first use (sub rows).
		for li := range sc.subOf {
			sc.subOf[li] = -1
		}
		sub := sc.sub[:0]
		runs, tqs, volume := sc.gruns[:0], sc.gtqs[:0], 0
		for _, r := range tb.runs {
			lo := int32(len(tqs))
			for _, tq := range tb.tqs[r.lo:r.hi] {
				if sc.groupOf[tq.q] == gi {
					li := sc.local[tq.q]
					if sc.subOf[li] < 0 {
						sc.subOf[li] = int32(len(sub))
						sub = append(sub, li)
					}
					tqs = append(tqs, termQuery{q: sc.subOf[li], qw: tq.qw})
				}
			}
			if hi := int32(len(tqs)); hi > lo {
				runs = append(runs, termRun{pl: r.pl, lo: lo, hi: hi})
				volume += len(r.pl)
			}
		}
		sc.gruns, sc.gtqs, sc.sub = runs, tqs, sub
		if len(runs) == 0 {
			continue
		}
		for j, li := range sub {
			sc.mx[j] = 0
			sc.w[j] = weight(qs[g.qs[li]].Weights, tb.name)
		}
		R := len(sub)
		switch {
		case R > 1 && rowVolume(runs) < n*R/2:
			s.walkRows(sc, G, R, runs, tqs, g.ok)
		case volume >= n/4:
			s.walkDense(sc, G, R, runs, tqs, g.ok)
		default:
			s.walkSparse(sc, G, R, runs, tqs, g.ok)
		}
	}
}

// rowVolume is the number of (posting, query) updates of a walk.
func rowVolume(runs []termRun) int {
	v := 0
	for _, r := range runs {
		v += len(r.pl) * int(r.hi-r.lo)
	}
	return v
}

// walkRows accumulates R rows of n scores, query-major (acc[j·n + slot]; row j is group query
// sc.sub[j]), each row with its own list of touched slots (a zero score marks a new slot), and
// normalizes each row through its list: the work is the number of (posting, query) updates
// rather than n·R. Used for several queries whose terms touch few slots each (the sentences
// of a request, searched with words only), even when together they touch most slots.
func (s *Store) walkRows(sc *scratch, G, R int, runs []termRun, tqs []termQuery, ok func(int32) bool) {
	n := len(s.slots)
	acc := sc.acc[:n*R]
	for len(sc.rowTouched) < R {
		sc.rowTouched = append(sc.rowTouched, nil)
	}
	rt := sc.rowTouched[:R]
	for j := range rt {
		rt[j] = rt[j][:0]
	}
	for _, r := range runs {
		for _, tq := range tqs[r.lo:r.hi] {
			j, qw := int(tq.q), tq.qw
			row := acc[j*n : j*n+n]
			t := rt[j]
			for _, p := range r.pl {
				if row[p.slot] == 0 {
					if ok != nil && !ok(p.slot) {
						continue
					}
					t = append(t, p.slot)
				}
				row[p.slot] += qw * p.w
			}
			rt[j] = t
		}
	}
	// Per slot, the runs' queries are walked in the same order as by walkDense, so each
	// score is the same float sum.
	mx, w, fused, cand, sub := sc.mx, sc.w, sc.fused, sc.cand, sc.sub
	for j := 0; j < R; j++ {
		row := acc[j*n : j*n+n]
		m := float32(0)
		for _, sl := range rt[j] {
			if v := row[sl]; v > m {
				m = v
			}
		}
		mx[j] = m
		li := sub[j]
		bit := uint16(1) << li
		for _, sl := range rt[j] {
			v := row[sl]
			if v > 0 && m > 0 {
				if cand[sl] == 0 {
					sc.cands = append(sc.cands, sl)
				}
				cand[sl] |= bit
				fused[int(sl)*G+int(li)] += w[j] * float64(v/m)
			}
			row[sl] = 0
		}
	}
}

// walkDense accumulates with rows of R scores (R = len(sc.sub) ≤ G queries: row entry j is
// group query sc.sub[j]) and normalizes in sequential passes over all the slots; filtered-out
// slots are dropped in the first pass.
func (s *Store) walkDense(sc *scratch, G, R int, runs []termRun, tqs []termQuery, ok func(int32) bool) {
	n := len(s.slots)
	acc := sc.acc[:n*R]
	for _, r := range runs {
		if r.hi-r.lo == 1 {
			q, qw := int(tqs[r.lo].q), tqs[r.lo].qw
			if R == 1 {
				for _, p := range r.pl {
					acc[p.slot] += qw * p.w
				}
				continue
			}
			for _, p := range r.pl {
				acc[int(p.slot)*R+q] += qw * p.w
			}
			continue
		}
		buf := tqs[r.lo:r.hi]
		for _, p := range r.pl {
			a := acc[int(p.slot)*R : int(p.slot)*R+R]
			for _, tq := range buf {
				a[tq.q] += tq.qw * p.w
			}
		}
	}
	mx, w, fused, cand, sub := sc.mx, sc.w, sc.fused[:n*G], sc.cand[:n], sc.sub
	if R == 1 {
		m := float32(0)
		if ok == nil {
			m = maxOf(acc)
		} else {
			for sl, v := range acc {
				if v != 0 {
					if !ok(int32(sl)) {
						acc[sl] = 0
						continue
					}
					if v > m {
						m = v
					}
				}
			}
		}
		if m > 0 {
			w0, q0 := w[0], int(sub[0])
			bit := uint16(1) << q0
			cands := sc.cands
			cand := cand[:len(acc)]
			if G == 1 {
				// The whole request's own group: one fused score per slot.
				fused := fused[:len(acc)]
				for sl, v := range acc {
					if v > 0 {
						if cand[sl] == 0 {
							cands = append(cands, int32(sl))
						}
						cand[sl] |= bit
						fused[sl] += w0 * float64(v/m)
					}
				}
			} else {
				for sl, v := range acc {
					if v > 0 {
						if cand[sl] == 0 {
							cands = append(cands, int32(sl))
						}
						cand[sl] |= bit
						fused[sl*G+q0] += w0 * float64(v/m)
					}
				}
			}
			sc.cands = cands
		}
		clear(acc)
		return
	}
	for sl := 0; sl < n; sl++ {
		a := acc[sl*R : sl*R+R]
		if ok != nil && !ok(int32(sl)) {
			clear(a)
			continue
		}
		for j, v := range a {
			if v > mx[j] {
				mx[j] = v
			}
		}
	}
	for sl := 0; sl < n; sl++ {
		a := acc[sl*R : sl*R+R]
		f := fused[sl*G : sl*G+G]
		var bits uint16
		for j, v := range a {
			if v > 0 && mx[j] > 0 {
				li := sub[j]
				bits |= 1 << li
				f[li] += w[j] * float64(v/mx[j])
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

// maxOf returns the largest of xs and 0, in four independent lanes (no dependency chain from
// one element to the next; the maximum does not depend on the order).
func maxOf(xs []float32) float32 {
	var m0, m1, m2, m3 float32
	i := 0
	for ; i+4 <= len(xs); i += 4 {
		x := xs[i : i+4 : i+4]
		if x[0] > m0 {
			m0 = x[0]
		}
		if x[1] > m1 {
			m1 = x[1]
		}
		if x[2] > m2 {
			m2 = x[2]
		}
		if x[3] > m3 {
			m3 = x[3]
		}
	}
	for ; i < len(xs); i++ {
		if xs[i] > m0 {
			m0 = xs[i]
		}
	}
	if m1 > m0 {
		m0 = m1
	}
	if m2 > m0 {
		m0 = m2
	}
	if m3 > m0 {
		m0 = m3
	}
	return m0
}

// walkSparse accumulates with rows of R scores (as walkDense) and, for more than one row, the
// slot's state (0 new, 1 touched, -1 filtered out; for one row a zero score marks a new slot),
// and normalizes through the list of touched slots.
func (s *Store) walkSparse(sc *scratch, G, R int, runs []termRun, tqs []termQuery, ok func(int32) bool) {
	acc := sc.acc
	touched, rejected := sc.touched[:0], sc.rejected[:0]
	S := R + 1
	if R == 1 {
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
			if st := a[R]; st != 1 {
				if st < 0 {
					continue
				}
				if ok != nil && !ok(p.slot) {
					a[R] = -1
					rejected = append(rejected, p.slot)
					continue
				}
				a[R] = 1
				touched = append(touched, p.slot)
			}
			for _, tq := range buf {
				a[tq.q] += tq.qw * p.w
			}
		}
	}
	for _, sl := range rejected {
		acc[int(sl)*S+R] = 0
	}
	sc.touched, sc.rejected = touched, rejected

	mx, w, fused, cand, sub := sc.mx, sc.w, sc.fused, sc.cand, sc.sub
	for _, sl := range touched {
		a := acc[int(sl)*S : int(sl)*S+R]
		for j, v := range a {
			if v > mx[j] {
				mx[j] = v
			}
		}
	}
	for _, sl := range touched {
		a := acc[int(sl)*S : int(sl)*S+S]
		f := fused[int(sl)*G : int(sl)*G+G]
		for j, v := range a[:R] {
			if mx[j] > 0 && v > 0 {
				if cand[sl] == 0 {
					sc.cands = append(sc.cands, sl)
				}
				li := sub[j]
				cand[sl] |= 1 << li
				f[li] += w[j] * float64(v/mx[j])
			}
		}
		clear(a)
	}
}

// topLexicalAll sets sc.tops[li] to the sc.ks[li] best slots of each query li of the scored
// group, best first, in one pass over the candidates (each query's heap sees its candidates in
// the same order as topLexical would). The slices are the scratch's, valid until the next call.
func (s *Store) topLexicalAll(sc *scratch, G int) {
	for len(sc.heaps) < G {
		sc.heaps = append(sc.heaps, nil)
	}
	sc.tops = grow(sc.tops, G)
	var hs [maxGroup]topK
	for li := 0; li < G; li++ {
		hs[li] = topK{s: s, k: sc.ks[li], xs: sc.heaps[li][:0]}
	}
	if G == 1 {
		// One query: every candidate is its own (no bits to walk).
		h := &hs[0]
		fused := sc.fused
		for _, sl := range sc.cands {
			x := fused[sl]
			if h.k > 0 && len(h.xs) == h.k && x < h.xs[0].score {
				continue
			}
			h.push(scored{slot: sl, score: x})
		}
		sc.heaps[0] = h.xs
		sc.tops[0] = h.sorted()
		return
	}
	for _, sl := range sc.cands {
		bits := sc.cand[sl]
		row := sc.fused[int(sl)*G : int(sl)*G+G]
		for bits != 0 {
			li := mbits.TrailingZeros16(bits)
			bits &= bits - 1
			h := &hs[li]
			x := row[li]
			if h.k > 0 && len(h.xs) == h.k && x < h.xs[0].score {
				continue // worse than the worst kept: no need to compare ids
			}
			h.push(scored{slot: sl, score: x})
		}
	}
	for li := 0; li < G; li++ {
		sc.heaps[li] = hs[li].xs
		sc.tops[li] = hs[li].sorted()
	}
}

// clearFused zeroes the fused scores and candidate bits of the scored group.
func (sc *scratch) clearFused(G int) {
	if G == 1 {
		fused, cand := sc.fused, sc.cand
		for _, sl := range sc.cands {
			fused[sl] = 0
			cand[sl] = 0
		}
		sc.cands = sc.cands[:0]
		return
	}
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
