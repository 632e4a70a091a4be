// Package index is the tool index the retriever service uses: it encodes tools with the lexical
// encoder (and a dense embedder when one is configured), keeps them in a store.Store, and
// answers searches, splitting a multi-part request into its parts so that every part gets its
// tools into the result list.
package index

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protojson"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/embed"
	"github.com/toolmesh/toolmesh/services/retriever/lexical"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// EmbedBatch is how many tool texts go to the dense embedder in one call.
const EmbedBatch = 32

// Split says how a request is cut into parts.
type Split int

const (
	// SplitNone searches the whole request only.
	SplitNone Split = iota
	// SplitSentences cuts at sentence boundaries (Unicode UAX #29) and semicolons.
	SplitSentences
	// SplitClauses also cuts sentences at commas and at the coordinating words "and", "then",
	// "also" (English clause boundaries).
	SplitClauses
)

// Merge says how the per-part lists join the whole request's list.
type Merge int

const (
	// MergeScore ranks by full + PartWeight·max over parts (each list divided by its best).
	MergeScore Merge = iota
	// MergeInterleave keeps the whole request's best tool first, then takes the parts' lists in
	// turns (rank 1 of every part, then rank 2…), then the rest of the whole request's list.
	MergeInterleave
)

// Options tunes search. The zero value searches the whole request only.
type Options struct {
	Split Split
	Merge Merge
	// PartWeight is the share of the best part score in a tool's merged score: a tool scores
	// full + PartWeight·max over parts, each list's scores divided by its best.
	PartWeight float64
	// Depth is how many hits each list contributes to the merge (at least k).
	Depth int
	// DepthPerK, when positive, caps each list's depth at DepthPerK·k (and never below k): the
	// merge needs a list's tools only down to where they can still reach the top k. Default 2:
	// at k = 10 the lists are 20 deep instead of 50, which on the BFCL dev split changes R@5 /
	// MRR@10 by −.0004 / ±0 and shortens the store's top-k, its results and the merge
	// (bench/NOTES.md, Retrieval).
	DepthPerK int
	// PartsWordsOnly searches the parts with the "words" vector only (the whole request uses
	// every vector). On by default: the char 4-gram postings touch most tools, and scoring them
	// for every sentence was most of a long request's cost (quality on the BFCL dev split is
	// R@5 .9175 → .9187, MRR@10 .8414 → .8427; bench/NOTES.md, Retrieval).
	PartsWordsOnly bool
	// PartsNoChars searches the parts without the "chars" vector (words and pairs only); the
	// whole request still uses every vector. The char 4-gram postings touch most tools, so
	// scoring them for every sentence is most of a long request's cost.
	PartsNoChars bool
	// MaxParts, when positive, caps the number of parts searched: while there are more, the
	// two adjacent parts with the fewest "words" terms together are merged (their vectors
	// summed). Only with SplitSentences. Default 4: long stories (up to 16 sentences) cost
	// their sentence count in store work, and on the BFCL dev split the cap changes R@5 / MRR@10
	// by +.0005 / +.0005 (bench/NOTES.md, Retrieval).
	MaxParts int
	// PRF, when positive, is the weight of pseudo-relevance feedback: the "words" vectors of the
	// first search's top PRFDocs tools (each divided by its largest weight, then averaged) are
	// added to the query at this weight and the search is run again.
	PRF     float64
	PRFDocs int
}

// DefaultOptions are the options of the default search.
func DefaultOptions() Options {
	return Options{Split: SplitSentences, PartWeight: 1, Depth: 50, DepthPerK: 2, PartsWordsOnly: true, MaxParts: 4}
}

// Index encodes, stores and searches tools.
type Index struct {
	st    store.Store
	lex   *lexical.Encoder
	dense embed.Dense
	opt   Options
	// weights are the encoder's fusion weights, shared read-only by every query.
	weights map[string]float64
}

// New returns an index over st with the default search options. dense may be nil.
func New(st store.Store, lex *lexical.Encoder, dense embed.Dense) *Index {
	return NewWithOptions(st, lex, dense, DefaultOptions())
}

// NewWithOptions is New with explicit search options (benchmarks compare them).
func NewWithOptions(st store.Store, lex *lexical.Encoder, dense embed.Dense, opt Options) *Index {
	if opt.Depth <= 0 {
		opt.Depth = 50
	}
	return &Index{st: st, lex: lex, dense: dense, opt: opt, weights: lex.Weights()}
}

// Name identifies the encoding: the lexical encoder's ID, plus the dense model and dimension.
func (ix *Index) Name() string {
	if ix.dense == nil {
		return ix.lex.ID()
	}
	return fmt.Sprintf("%s+%s/%d", ix.lex.ID(), ix.dense.Model(), ix.dense.Dim())
}

// Hash returns the definition hash of a tool: its Hash field, or when that is empty a SHA-256 of
// its name, title, description and input schema.
func Hash(t *toolmeshv1.Tool) string {
	if t.GetHash() != "" {
		return t.GetHash()
	}
	h := sha256.New()
	schema, _ := protojson.MarshalOptions{}.Marshal(t.GetInputSchema())
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", t.GetName(), t.GetTitle(), t.GetDescription(), schema)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Upsert encodes and stores tools (replacing earlier versions by id).
func (ix *Index) Upsert(ctx context.Context, tools []*toolmeshv1.Tool) error {
	for i, t := range tools {
		if t.GetId() == "" {
			return fmt.Errorf("index: tool %d (%q): empty id", i, t.GetName())
		}
	}
	docs := ix.encode(tools)
	if ix.dense != nil {
		for lo := 0; lo < len(tools); lo += EmbedBatch {
			hi := min(lo+EmbedBatch, len(tools))
			texts := make([]string, 0, hi-lo)
			for _, t := range tools[lo:hi] {
				texts = append(texts, DenseText(t))
			}
			vecs, err := ix.dense.Embed(ctx, texts)
			if err != nil {
				return fmt.Errorf("index: embed tools: %w", err)
			}
			if len(vecs) != len(texts) {
				return fmt.Errorf("index: embedder returned %d vectors for %d texts", len(vecs), len(texts))
			}
			for j, v := range vecs {
				docs[lo+j].Dense = v
			}
		}
	}
	return ix.st.Upsert(ctx, docs)
}

// parallelMin is the smallest batch whose lexical encoding is spread over the processors.
const parallelMin = 64

// encode builds the docs of tools with their lexical vectors, spreading the encoding over
// GOMAXPROCS goroutines for large batches (the encoder is safe for concurrent use and each doc
// depends on its tool alone, so the result does not depend on the split).
func (ix *Index) encode(tools []*toolmeshv1.Tool) []store.Doc {
	docs := make([]store.Doc, len(tools))
	one := func(i int) {
		t := tools[i]
		docs[i] = store.Doc{ID: t.GetId(), Server: t.GetServer(), Hash: Hash(t), Tool: t, Sparse: ix.lex.Document(t)}
	}
	workers := min(runtime.GOMAXPROCS(0), len(tools)/parallelMin)
	if workers <= 1 {
		for i := range tools {
			one(i)
		}
		return docs
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				lo := int(next.Add(16)) - 16
				if lo >= len(tools) {
					return
				}
				for i := lo; i < min(lo+16, len(tools)); i++ {
					one(i)
				}
			}
		})
	}
	wg.Wait()
	return docs
}

// DenseText is the text of a tool given to the dense embedder: its name split into words, title,
// description and parameter names.
func DenseText(t *toolmeshv1.Tool) string {
	var b strings.Builder
	b.WriteString(strings.Join(lexical.Words(t.GetName()), " "))
	if t.GetTitle() != "" {
		b.WriteString(". " + t.GetTitle())
	}
	if t.GetDescription() != "" {
		b.WriteString(". " + t.GetDescription())
	}
	if props := t.GetInputSchema().GetFields()["properties"].GetStructValue(); props != nil && len(props.GetFields()) > 0 {
		b.WriteString(" Parameters:")
		for _, n := range sortedKeys(props.GetFields()) {
			b.WriteString(" " + strings.Join(lexical.Words(n), " ") + ",")
		}
	}
	return strings.TrimSuffix(b.String(), ",")
}

// Delete removes tools by id.
func (ix *Index) Delete(ctx context.Context, ids []string) error { return ix.st.Delete(ctx, ids) }

// Complete reports whether the store recorded the index as complete (store.Completion). A store
// that does not record it (the qdrant store) reports true: any index it holds counts as complete,
// as before the marker existed.
func (ix *Index) Complete(ctx context.Context) (bool, error) {
	if c, ok := ix.st.(store.Completion); ok {
		return c.Complete(ctx)
	}
	return true, nil
}

// MarkComplete records in the store that the index is complete; a no-op for a store without
// store.Completion.
func (ix *Index) MarkComplete(ctx context.Context) error {
	if c, ok := ix.st.(store.Completion); ok {
		return c.MarkComplete(ctx)
	}
	return nil
}

// Hashes returns the stored tool ids with their definition hashes.
func (ix *Index) Hashes(ctx context.Context) (map[string]string, error) { return ix.st.Hashes(ctx) }

// ErrEmptyQuery is returned for a query without any searchable term.
var ErrEmptyQuery = errors.New("index: query has no searchable terms")

// Search returns the k best tools for query, optionally only from servers.
func (ix *Index) Search(ctx context.Context, query string, k int, servers []string) ([]*toolmeshv1.ScoredTool, error) {
	if k <= 0 {
		return nil, nil
	}
	depth := ix.opt.Depth
	if ix.opt.DepthPerK > 0 {
		depth = min(depth, ix.opt.DepthPerK*k)
	}
	depth = max(k, depth)
	var qs []store.Query
	if ix.opt.Split == SplitSentences && ix.opt.PartWeight != 0 {
		// Encode once: the request and its sentences from one segmentation.
		whole, parts := ix.lex.QueryParts(query)
		q0, err := ix.query(ctx, query, whole, depth, servers, true)
		if err != nil {
			return nil, err
		}
		if ix.opt.MaxParts > 0 {
			parts = capParts(parts, ix.opt.MaxParts)
		}
		qs = make([]store.Query, 1, 1+len(parts))
		qs[0] = q0
		for _, sp := range parts {
			q, _ := ix.query(ctx, "", sp, depth, servers, false)
			qs = append(qs, q)
		}
	} else {
		var parts []string
		if ix.opt.Split != SplitNone && ix.opt.PartWeight != 0 {
			if parts = splitQuery(query, ix.opt.Split); len(parts) < 2 {
				parts = nil
			}
		}
		q0, err := ix.query(ctx, query, ix.lex.Query(query), depth, servers, true)
		if err != nil {
			return nil, err
		}
		qs = []store.Query{q0}
		for _, p := range parts {
			q, err := ix.query(ctx, p, ix.lex.Query(p), depth, servers, false)
			if err != nil {
				return nil, err
			}
			qs = append(qs, q)
		}
	}
	var lists [][]store.Hit
	var err error
	if m, ok := ix.st.(multiSearcher); ok && ix.opt.PRF == 0 {
		if lists, err = m.SearchMulti(ctx, qs); err != nil {
			return nil, err
		}
	} else {
		for i, q := range qs {
			hits, err := ix.st.Search(ctx, q)
			if err != nil {
				return nil, err
			}
			if i == 0 && ix.opt.PRF > 0 && len(hits) > 0 {
				if hits, err = ix.feedback(ctx, query, hits, depth, servers); err != nil {
					return nil, err
				}
			}
			lists = append(lists, hits)
		}
	}
	full, lists := lists[0], lists[1:]
	if len(lists) == 0 {
		return scoredTools(full, k), nil
	}
	if ix.opt.Merge == MergeInterleave {
		return scoredTools(interleave(full, lists), k), nil
	}
	return scoredTools(merge(full, lists, ix.opt.PartWeight), k), nil
}

// multiSearcher is implemented by stores that run several searches in one pass
// (memory.Store.SearchMulti).
type multiSearcher interface {
	SearchMulti(ctx context.Context, qs []store.Query) ([][]store.Hit, error)
}

// query builds one search from the request's (or a part's) lexical vectors; the dense embedder
// is asked for the whole request only. Parts never fail.
func (ix *Index) query(ctx context.Context, text string, sparse map[string]store.SparseVector, limit int, servers []string, whole bool) (store.Query, error) {
	q := store.Query{Sparse: sparse, Weights: ix.weights, Limit: limit, Servers: servers}
	if !whole && ix.opt.PartsWordsOnly {
		q.Sparse = map[string]store.SparseVector{lexical.VectorWords: q.Sparse[lexical.VectorWords]}
	} else if !whole && ix.opt.PartsNoChars {
		if _, ok := q.Sparse[lexical.VectorChars]; ok {
			sp := make(map[string]store.SparseVector, len(q.Sparse))
			for name, v := range q.Sparse {
				if name != lexical.VectorChars {
					sp[name] = v
				}
			}
			q.Sparse = sp
		}
	}
	if whole && ix.dense != nil {
		vecs, err := ix.dense.Embed(ctx, []string{text})
		if err != nil {
			return q, fmt.Errorf("index: embed query: %w", err)
		}
		if len(vecs) == 1 {
			q.Dense = vecs[0]
		}
	}
	if whole && q.Dense == nil && emptySparse(q.Sparse) {
		return q, ErrEmptyQuery
	}
	return q, nil
}

// feedback reruns the search with the query's "words" vector expanded by the top tools' ones.
func (ix *Index) feedback(ctx context.Context, text string, top []store.Hit, limit int, servers []string) ([]store.Hit, error) {
	sparse := ix.lex.Query(text)
	words := map[uint32]float64{}
	qv := sparse[lexical.VectorWords]
	for i, t := range qv.Indices {
		words[t] += float64(qv.Values[i])
	}
	n := min(max(ix.opt.PRFDocs, 1), len(top))
	for _, h := range top[:n] {
		dv := ix.lex.Document(h.Tool)[lexical.VectorWords]
		var mx float32
		for _, v := range dv.Values {
			mx = max(mx, v)
		}
		if mx == 0 {
			continue
		}
		for i, t := range dv.Indices {
			words[t] += ix.opt.PRF * float64(dv.Values[i]/mx) / float64(n)
		}
	}
	idx := sortedKeys32(words)
	ev := store.SparseVector{Indices: idx, Values: make([]float32, len(idx))}
	for i, t := range idx {
		ev.Values[i] = float32(words[t])
	}
	sparse[lexical.VectorWords] = ev
	return ix.st.Search(ctx, store.Query{Sparse: sparse, Weights: ix.lex.Weights(), Limit: limit, Servers: servers})
}

func emptySparse(m map[string]store.SparseVector) bool {
	for _, v := range m {
		if len(v.Indices) > 0 {
			return false
		}
	}
	return true
}

// merge scores each tool full/max(full) + w·max_p part_p/max(part_p): the whole request still
// ranks, and each part's best tools rise so that the list covers every part.
func merge(full []store.Hit, parts [][]store.Hit, w float64) []store.Hit {
	type entry struct {
		hit          store.Hit
		full, best   float64
		inFull, inPt bool
	}
	n := len(full)
	for _, p := range parts {
		n += len(p)
	}
	pos := make(map[string]int32, n)
	es := make([]entry, 0, n)
	at := func(h store.Hit) *entry {
		i, ok := pos[h.ID]
		if !ok {
			i = int32(len(es))
			pos[h.ID] = i
			es = append(es, entry{})
		}
		e := &es[i]
		e.hit = h
		return e
	}
	if len(full) > 0 && full[0].Score > 0 {
		for _, h := range full {
			e := at(h)
			e.full += h.Score / full[0].Score
			e.inFull = true
		}
	}
	for _, p := range parts {
		if len(p) == 0 || p[0].Score <= 0 {
			continue
		}
		for _, h := range p {
			e := at(h)
			e.best = max(e.best, h.Score/p[0].Score)
			e.inPt = true
		}
	}
	out := make([]store.Hit, len(es))
	for i := range es {
		e := &es[i]
		score := 0.0
		if e.inFull {
			score += e.full
		}
		if e.inPt {
			score += w * e.best
		}
		out[i] = e.hit
		out[i].Score = score
	}
	sortHits(out)
	return out
}

func interleave(full []store.Hit, parts [][]store.Hit) []store.Hit {
	seen := map[string]bool{}
	var out []store.Hit
	add := func(h store.Hit) {
		if !seen[h.ID] {
			seen[h.ID] = true
			h.Score = 1 / float64(len(out)+1)
			out = append(out, h)
		}
	}
	if len(full) > 0 {
		add(full[0])
	}
	for r := 0; ; r++ {
		more := false
		for _, p := range parts {
			if r < len(p) {
				add(p[r])
				more = true
			}
		}
		if !more || len(out) >= len(full) {
			break
		}
	}
	for _, h := range full {
		add(h)
	}
	return out
}

func scoredTools(hits []store.Hit, k int) []*toolmeshv1.ScoredTool {
	if len(hits) > k {
		hits = hits[:k]
	}
	out := make([]*toolmeshv1.ScoredTool, len(hits))
	for i, h := range hits {
		out[i] = &toolmeshv1.ScoredTool{Tool: h.Tool, Score: h.Score}
	}
	return out
}

// capParts merges adjacent parts, the pair with the fewest "words" terms first, until at most
// max remain. Merged vectors are the sums (a part's vectors are term counts, so the sum is the
// vector of the two sentences together).
func capParts(parts []map[string]store.SparseVector, max int) []map[string]store.SparseVector {
	if len(parts) <= max {
		return parts
	}
	parts = append([]map[string]store.SparseVector(nil), parts...)
	for len(parts) > max {
		best, bi := -1, 0
		for i := 0; i+1 < len(parts); i++ {
			n := len(parts[i][lexical.VectorWords].Indices) + len(parts[i+1][lexical.VectorWords].Indices)
			if best < 0 || n < best {
				best, bi = n, i
			}
		}
		parts[bi] = sumSparse(parts[bi], parts[bi+1])
		parts = append(parts[:bi+1], parts[bi+2:]...)
	}
	return parts
}

func sumSparse(a, b map[string]store.SparseVector) map[string]store.SparseVector {
	out := make(map[string]store.SparseVector, len(a))
	names := map[string]bool{}
	for n := range a {
		names[n] = true
	}
	for n := range b {
		names[n] = true
	}
	for n := range names {
		m := map[uint32]float64{}
		for _, v := range []store.SparseVector{a[n], b[n]} {
			for i, t := range v.Indices {
				if i < len(v.Values) {
					m[t] += float64(v.Values[i])
				}
			}
		}
		idx := sortedKeys32(m)
		v := store.SparseVector{Indices: idx, Values: make([]float32, len(idx))}
		for i, t := range idx {
			v.Values[i] = float32(m[t])
		}
		out[n] = v
	}
	return out
}
