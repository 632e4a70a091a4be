// Package lexical is the embedded default "embedder": it turns tools and queries into hashed-term
// sparse vectors whose dot product, with the store's IDF, is a BM25F score (vector "words"), plus
// a character n-gram TF-IDF cosine (vector "chars") that matches across morphology, compounds
// and typos. No model file is needed.
//
// # BM25F as a sparse dot product
//
// For a term t, a tool's pseudo term frequency is the field-weighted, length-normalized sum over
// its fields f (name, title, server, description, parameter names, parameter descriptions, enum
// values):
//
//	tf~(t) = Σ_f w_f · tf_f(t) / (1 − b + b·len_f/avglen_f)
//	d(t)   = tf~(t)·(k1+1) / (tf~(t) + k1)
//
// and the query weight q(t) is the term's count in the query. The store multiplies by
// idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5)) (Qdrant's IDF modifier), so Σ_t idf·q·d is exactly
// BM25F (Robertson, Zaragoza & Taylor 2004; per-field length normalization).
//
// avglen_f is a fixed constant per field (the mean field length of the 1,951 BFCL tool
// definitions, a sample of real-world tool catalogs), not a statistic of the live index: a
// document's vector then depends on that document alone, so upserting one tool never forces
// re-encoding the others, and vectors stored in Qdrant stay valid. BM25 is flat around avgdl
// (a 2× error moves a length factor by at most b), which makes a good fixed prior sufficient.
package lexical

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"

	"github.com/rivo/uniseg"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// Names of the sparse vectors the encoder produces.
const (
	VectorWords = "words"
	VectorChars = "chars"
	VectorPairs = "pairs"
)

// version is bumped whenever the encoding changes in a way Config does not capture.
const version = 1

// Field identifies one part of a tool definition.
type Field int

// The fields of a tool definition that feed the "words" vector.
const (
	FieldName Field = iota
	FieldTitle
	FieldServer
	FieldDescription
	FieldParamName
	FieldParamDesc
	FieldEnum
	numFields
)

// Config holds every knob of the encoding. Encoder.ID() hashes it, so a changed knob changes the
// ID and persisted indexes are rebuilt.
type Config struct {
	// Stem applies Snowball English (Porter2) stemming to document and query terms.
	Stem bool
	// QueryStopWords drops English stop words from queries; QueryNumbers keeps pure numbers in
	// queries (they are argument values far more often than tool vocabulary).
	QueryStopWords bool
	QueryNumbers   bool
	// K1 and B are BM25's saturation and length-normalization parameters.
	K1, B float64
	// Weights are the BM25F field weights; AvgLen the fixed mean field lengths in terms.
	Weights [numFields]float64
	AvgLen  [numFields]float64
	// PerFieldNorm normalizes each field by its own length (BM25F as in Robertson et al.); when
	// false the weighted fields are pooled into one document of length Σ w_f·len_f normalized by
	// AvgDocLen (plain BM25 over the concatenation when all weights are 1).
	PerFieldNorm bool
	AvgDocLen    float64
	// CharN is the character n-gram length of the "chars" vector; 0 disables it. CharWeight is
	// that vector's share in the fused score (the "words" vector weighs 1).
	CharN      int
	CharWeight float64
	// CharParams adds parameter names to the text the n-grams are taken from (name and
	// description always are).
	CharParams bool
	// PairWeight, when positive, adds the "pairs" vector at this fusion weight: ordered pairs
	// of adjacent content words (stop words skipped, stemmed) from the name, title and
	// description, so that phrase matches ("greatest common divisor") count more than scattered
	// words.
	PairWeight float64
}

// DefaultConfig is the configuration of the embedded default scorer.
func DefaultConfig() Config {
	return Config{
		Stem:           true,
		QueryStopWords: true,
		K1:             1.2,
		B:              0.75,
		//                name title server desc pname pdesc enum
		Weights:      [numFields]float64{2, 2, 0.5, 1, 1, 0.5, 0.5},
		AvgLen:       [numFields]float64{3, 3, 1, 17, 4, 28, 3},
		PerFieldNorm: true,
		AvgDocLen:    55,
		CharN:        4,
		CharWeight:   0.35,
		PairWeight:   0.2,
	}
}

// BaselineConfig is plain BM25 (k1 1.2, b 0.75) over name words + description + parameter
// names + parameter descriptions, no stemming, no stop words: the reference baseline.
func BaselineConfig(avgDocLen float64) Config {
	return Config{
		K1:           1.2,
		B:            0.75,
		Weights:      [numFields]float64{1, 0, 0, 1, 1, 1, 0},
		AvgLen:       [numFields]float64{1, 1, 1, 1, 1, 1, 1},
		QueryNumbers: true,
		AvgDocLen:    avgDocLen,
	}
}

// Encoder turns tools and queries into sparse vectors. It is immutable and safe for concurrent
// use.
type Encoder struct {
	cfg Config
	id  string
}

// New returns an encoder with the given configuration.
func New(cfg Config) *Encoder {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d %+v", version, cfg)
	return &Encoder{cfg: cfg, id: fmt.Sprintf("lexical-v%d-%08x", version, h.Sum32())}
}

// Default returns the encoder with DefaultConfig.
func Default() *Encoder { return New(DefaultConfig()) }

// ID identifies the encoding; it changes whenever the encoding does.
func (e *Encoder) ID() string { return e.id }

// Config returns the encoder's configuration.
func (e *Encoder) Config() Config { return e.cfg }

// Weights returns the default fusion weights of the named vectors.
func (e *Encoder) Weights() map[string]float64 {
	w := map[string]float64{VectorWords: 1}
	if e.cfg.CharN > 0 {
		w[VectorChars] = e.cfg.CharWeight
	}
	if e.cfg.PairWeight > 0 {
		w[VectorPairs] = e.cfg.PairWeight
	}
	return w
}

// Document encodes a tool.
func (e *Encoder) Document(t *toolmeshv1.Tool) map[string]store.SparseVector {
	var fields [numFields][]string
	fields[FieldName] = e.terms(t.GetName(), false)
	fields[FieldTitle] = e.terms(t.GetTitle(), false)
	fields[FieldServer] = e.terms(t.GetServer(), false)
	fields[FieldDescription] = e.terms(t.GetDescription(), false)
	var pnames, pdescs, enums []string
	walkSchema(t.GetInputSchema(), 0, func(name, desc string, enum []string) {
		pnames = append(pnames, name)
		pdescs = append(pdescs, desc)
		enums = append(enums, enum...)
	})
	fields[FieldParamName] = e.terms(strings.Join(pnames, " "), false)
	fields[FieldParamDesc] = e.terms(strings.Join(pdescs, " \n "), false)
	fields[FieldEnum] = e.terms(strings.Join(enums, " "), false)

	out := map[string]store.SparseVector{VectorWords: e.bm25f(&fields)}
	if e.cfg.CharN > 0 {
		text := t.GetName() + " " + t.GetTitle() + " " + t.GetDescription()
		if e.cfg.CharParams {
			text += " " + strings.Join(pnames, " ")
		}
		out[VectorChars] = e.chars(Words(text), false)
	}
	if e.cfg.PairWeight > 0 {
		tf := map[string]float64{}
		for _, text := range []string{t.GetName(), t.GetTitle(), t.GetDescription()} {
			e.pairs(text, tf)
		}
		for p, x := range tf {
			tf[p] = x * (e.cfg.K1 + 1) / (x + e.cfg.K1)
		}
		out[VectorPairs] = hashed(tf)
	}
	return out
}

// pairs adds the ordered pairs of adjacent content words of text to tf.
func (e *Encoder) pairs(text string, tf map[string]float64) {
	prev := ""
	for _, w := range Words(text) {
		if !e.keepQueryWord(w) || isDigits(w) {
			continue
		}
		if e.cfg.Stem {
			w = stem(w)
		}
		if prev != "" && prev != w {
			tf[prev+" "+w]++
		}
		prev = w
	}
}

// Query encodes a search request. Both vectors are empty when the text has no usable term.
func (e *Encoder) Query(text string) map[string]store.SparseVector {
	return e.queryWords(Words(text))
}

// QueryParts encodes a request and its parts in one pass over the text: whole is Query(text),
// and parts[i] is Query(Parts(text)[i]), exactly (same vectors, bit for bit). The text is
// segmented into sentences once and every part into words once; each part's word list gives
// its "words", "chars" and "pairs" vectors and decides whether the part is kept, and the whole
// request's list is the one Query uses. parts is nil when the request has fewer than two parts
// (a one-part request is searched as a whole only).
func (e *Encoder) QueryParts(text string) (whole map[string]store.SparseVector, parts []map[string]store.SparseVector) {
	whole = e.queryWords(Words(text))
	_, pws := partWords(text)
	if len(pws) < 2 {
		return whole, nil
	}
	parts = make([]map[string]store.SparseVector, len(pws))
	for i, ws := range pws {
		parts[i] = e.queryWords(ws)
	}
	return whole, parts
}

// Parts cuts a request into its parts: sentences (Unicode UAX #29 sentence boundaries) and
// semicolon-separated clauses, trimmed, keeping only parts with at least one searchable term
// under the default configuration (len(Terms(part, true)) > 0). A request of one part returns
// one element.
func Parts(text string) []string {
	ps, _ := partWords(text)
	return ps
}

// partWords is Parts with each part's Words.
func partWords(text string) (parts []string, words [][]string) {
	def := defaultEncoder()
	rest := text
	state := -1
	var s string
	for len(rest) > 0 {
		s, rest, state = uniseg.FirstSentenceInString(rest, state)
		for c := range strings.SplitSeq(s, ";") {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			ws := Words(c)
			if slices.ContainsFunc(ws, def.keepQueryWord) {
				parts = append(parts, c)
				words = append(words, ws)
			}
		}
	}
	return parts, words
}

// queryWords encodes a request from its Words: the same word list feeds the "words" vector
// (kept words, stemmed, counted), the "chars" vector (kept words, unstemmed) and the "pairs"
// vector (kept non-numeric words, stemmed, adjacent distinct pairs).
func (e *Encoder) queryWords(ws []string) map[string]store.SparseVector {
	tf := make(map[string]float64, len(ws))
	var ptf map[string]float64
	if e.cfg.PairWeight > 0 {
		ptf = make(map[string]float64, len(ws))
	}
	var kept []string
	if e.cfg.CharN > 0 {
		kept = make([]string, 0, len(ws))
	}
	prev := ""
	for _, w := range ws {
		if !e.keepQueryWord(w) {
			continue
		}
		if e.cfg.CharN > 0 {
			kept = append(kept, w)
		}
		t := w
		if e.cfg.Stem {
			t = stem(w)
		}
		tf[t]++
		if ptf != nil && !isDigits(w) {
			if prev != "" && prev != t {
				ptf[prev+" "+t]++
			}
			prev = t
		}
	}
	out := map[string]store.SparseVector{VectorWords: hashed(tf)}
	if e.cfg.CharN > 0 {
		out[VectorChars] = e.chars(kept, true)
	}
	if ptf != nil {
		out[VectorPairs] = hashed(ptf)
	}
	return out
}

func (e *Encoder) keepQueryWord(w string) bool {
	if len([]rune(w)) < 2 && !isDigits(w) {
		return false
	}
	if !e.cfg.QueryNumbers && isDigits(w) {
		return false
	}
	return !(e.cfg.QueryStopWords && isStopWord(w))
}

func (e *Encoder) terms(text string, query bool) []string {
	if text == "" {
		return nil
	}
	ws := Words(text)
	out := ws[:0]
	for _, w := range ws {
		if query {
			if !e.keepQueryWord(w) {
				continue
			}
		} else if len([]rune(w)) < 2 && !isDigits(w) {
			continue
		}
		if e.cfg.Stem {
			w = stem(w)
		}
		out = append(out, w)
	}
	return out
}

func (e *Encoder) bm25f(fields *[numFields][]string) store.SparseVector {
	c := &e.cfg
	tf := map[string]float64{}
	if c.PerFieldNorm {
		for f := Field(0); f < numFields; f++ {
			if c.Weights[f] == 0 || len(fields[f]) == 0 {
				continue
			}
			norm := 1 - c.B + c.B*float64(len(fields[f]))/c.AvgLen[f]
			for _, t := range fields[f] {
				tf[t] += c.Weights[f] / norm
			}
		}
		for t, x := range tf {
			tf[t] = x * (c.K1 + 1) / (x + c.K1)
		}
		return hashed(tf)
	}
	dl := 0.0
	for f := Field(0); f < numFields; f++ {
		if c.Weights[f] == 0 {
			continue
		}
		dl += c.Weights[f] * float64(len(fields[f]))
		for _, t := range fields[f] {
			tf[t] += c.Weights[f]
		}
	}
	k := c.K1 * (1 - c.B + c.B*dl/c.AvgDocLen)
	for t, x := range tf {
		tf[t] = x * (c.K1 + 1) / (x + k)
	}
	return hashed(tf)
}

// chars builds the character n-gram vector of words (each padded with a space on both sides):
// log-scaled counts, L2-normalized, so that with the store's IDF the dot product is an
// IDF-weighted cosine.
func (e *Encoder) chars(words []string, query bool) store.SparseVector {
	n := e.cfg.CharN
	size := 0
	for _, w := range words {
		size += max(1, len(w)+3-n)
	}
	tf := make(map[string]float64, size)
	for _, w := range words {
		if isASCII(w) {
			// Bytes are runes: the n-grams are substrings of the padded word.
			p := " " + w + " "
			if len(p) <= n {
				tf[p]++
				continue
			}
			for i := 0; i+n <= len(p); i++ {
				tf[p[i:i+n]]++
			}
			continue
		}
		rs := []rune(" " + w + " ")
		if len(rs) <= n {
			tf[string(rs)]++
			continue
		}
		for i := 0; i+n <= len(rs); i++ {
			tf[string(rs[i:i+n])]++
		}
	}
	ss := 0.0
	for g, x := range tf {
		x = 1 + math.Log(x)
		tf[g] = x
		ss += x * x
	}
	if ss > 0 {
		inv := 1 / math.Sqrt(ss)
		for g := range tf {
			tf[g] *= inv
		}
	}
	return hashed(tf)
}

// Hash is the term hash used for sparse indices: FNV-1a 32 of the UTF-8 term.
func Hash(term string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(term); i++ {
		h ^= uint32(term[i])
		h *= 16777619
	}
	return h
}

func hashed(tf map[string]float64) store.SparseVector {
	m := make(map[uint32]float64, len(tf))
	for t, x := range tf {
		m[Hash(t)] += x
	}
	v := store.SparseVector{Indices: make([]uint32, 0, len(m)), Values: make([]float32, 0, len(m))}
	for i := range m {
		v.Indices = append(v.Indices, i)
	}
	slices.Sort(v.Indices)
	for _, i := range v.Indices {
		v.Values = append(v.Values, float32(m[i]))
	}
	return v
}

// walkSchema calls fn for every property of a JSON Schema object, nested objects and array items
// included (to a depth of 4), with its name, description (and title) and string enum values.
func walkSchema(s *structpb.Struct, depth int, fn func(name, desc string, enum []string)) {
	if s == nil || depth > 4 {
		return
	}
	if items := s.GetFields()["items"].GetStructValue(); items != nil {
		walkSchema(items, depth+1, fn)
	}
	props := s.GetFields()["properties"].GetStructValue()
	if props == nil {
		return
	}
	names := make([]string, 0, len(props.GetFields()))
	for n := range props.GetFields() {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic order: the encoding must not depend on map iteration
	for _, n := range names {
		p := props.GetFields()[n].GetStructValue()
		desc := p.GetFields()["description"].GetStringValue()
		if title := p.GetFields()["title"].GetStringValue(); title != "" {
			desc = title + ". " + desc
		}
		var enum []string
		for _, v := range p.GetFields()["enum"].GetListValue().GetValues() {
			if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
				enum = append(enum, s.StringValue)
			}
		}
		fn(n, desc, enum)
		walkSchema(p, depth+1, fn)
	}
}
