// Package memory is the in-process tool store: exact scores over inverted postings (one per named
// sparse vector), brute-force cosine for dense vectors, an optional snapshot file so restarts do
// not re-embed. It is the default store of `toolmesh up`.
//
// Scoring. Each named sparse vector v scores a doc as s_v = Σ_t idf_v(t)·q(t)·d(t), with
// idf_v(t) = ln(1 + (N − df_v(t) + 0.5)/(df_v(t) + 0.5)) over all N stored docs (Qdrant's IDF
// modifier). The lexical score is the weighted sum of the s_v, each divided by its maximum over
// the candidates (score-sum fusion after max normalization), so the best doc scores Σ_v w_v at
// most. When the query has a dense vector, the dense cosine ranking and the lexical ranking are
// fused by reciprocal rank fusion (k = 60) with weights Weights["dense"] and 1.
package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sync"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// RRFK is the reciprocal-rank-fusion constant used between dense and lexical rankings.
const RRFK = 60

// rrfDepth is how many hits of each ranking take part in the fusion (at least Limit).
const rrfDepth = 100

var errClosed = errors.New("memory store: closed")

// Option configures a Store.
type Option func(*Store)

// WithLogger sets the logger that reports snapshot problems (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// WithFingerprint names the encoding of the stored vectors (for example the index's Name()).
// A snapshot written under another fingerprint is not loaded: the store starts empty so that
// the caller re-indexes everything with the current encoder.
func WithFingerprint(f string) Option { return func(s *Store) { s.fingerprint = f } }

type posting struct {
	slot int32
	w    float32
}

type slot struct {
	live   bool
	id     string
	server int32
	hash   string
	tool   *toolmeshv1.Tool
	dense  []float32 // L2-normalized
	// terms lists each named vector's indices, to remove the doc's postings.
	terms map[string][]uint32
}

// Store is the in-process store. It is safe for concurrent use; searches share a read lock, so
// readers never block each other.
type Store struct {
	path        string
	fingerprint string
	log         *slog.Logger
	loadErr     error
	// write writes the snapshot file's bytes; nil is f.Write. Tests replace it to fail or stop
	// a write halfway.
	write func(f *os.File, b []byte) error

	wmu sync.Mutex // serializes writers (apply, persist, roll back)

	mu          sync.RWMutex
	closed      bool
	slots       []slot
	free        []int32
	byID        map[string]int32
	serverIDs   map[string]int32
	serverNames []string
	vecs        map[string]map[uint32][]posting
	live        int
	// complete is the completion marker (store.Completion), persisted with the docs.
	complete bool

	scratch sync.Pool
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.Completion = (*Store)(nil)
)

// New returns an empty store without persistence.
func New(opts ...Option) *Store {
	s := &Store{
		log:       slog.Default(),
		byID:      map[string]int32{},
		serverIDs: map[string]int32{},
		vecs:      map[string]map[uint32][]posting{},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Open returns a store persisted to path: the snapshot there is loaded if present, and every
// Upsert or Delete batch rewrites it atomically. An empty path means no persistence. A snapshot
// that is corrupt, of another format version or of another fingerprint is reported (logged and
// returned by LoadError), moved aside to path+".bad", and the store starts empty so the index is
// rebuilt; only an unusable directory is an error.
func Open(path string, opts ...Option) (*Store, error) {
	s := New(opts...)
	if path == "" {
		return s, nil
	}
	s.path = path
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// LoadError reports why the snapshot found by Open was not loaded, or nil.
func (s *Store) LoadError() error { return s.loadErr }

// Len returns the number of stored docs.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.live
}

// Upsert inserts or replaces docs by ID. With persistence, the batch is written to the snapshot
// before any search sees it; if that fails, the store is unchanged and the error returned.
func (s *Store) Upsert(ctx context.Context, docs []store.Doc) error {
	for i := range docs {
		if docs[i].ID == "" {
			return fmt.Errorf("memory store: doc %d: empty id", i)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.commit(docIDs(docs), func() {
		for i := range docs {
			s.put(&docs[i])
		}
	})
}

// Delete removes docs by ID; unknown ids are ignored.
func (s *Store) Delete(ctx context.Context, ids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.RLock()
	known := slices.ContainsFunc(ids, func(id string) bool { _, ok := s.byID[id]; return ok })
	closed := s.closed
	s.mu.RUnlock()
	if !known && !closed {
		return nil // nothing to write
	}
	return s.commit(ids, func() {
		for _, id := range ids {
			if sl, ok := s.byID[id]; ok {
				s.remove(sl)
			}
		}
	})
}

// commit applies a batch (apply changes the docs of ids). With persistence the batch becomes
// searchable only once the snapshot with it is on disk: a search during a write that then fails
// must answer from the old index, not show a batch that is about to vanish. So the batch is
// applied, the snapshot captured and the batch undone under one lock (searches wait only for
// that, not for the encoding and fsync), the file written, and the batch applied again.
// Called with wmu held, so no other write comes in between.
func (s *Store) commit(ids []string, apply func()) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	if s.path == "" {
		apply()
		s.mu.Unlock()
		return nil
	}
	undo := s.capture(ids)
	apply()
	snap := s.snapshot()
	s.rollBack(undo)
	s.mu.Unlock()

	if err := s.persist(snap); err != nil {
		return fmt.Errorf("memory store: persist %s: %w", s.path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	apply()
	return nil
}

// Hashes returns every stored id with its hash.
func (s *Store) Hashes(ctx context.Context) (map[string]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	out := make(map[string]string, s.live)
	for i := range s.slots {
		if s.slots[i].live {
			out[s.slots[i].id] = s.slots[i].hash
		}
	}
	return out, nil
}

// Complete reports whether the index was marked complete, here or in the loaded snapshot.
func (s *Store) Complete(ctx context.Context) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false, errClosed
	}
	return s.complete, nil
}

// MarkComplete marks the index complete. With persistence the mark is in the snapshot file, in
// the same atomic write as the docs, before Complete reports it; if the write fails the store
// stays unmarked and the error is returned. Marking an index already marked writes nothing.
func (s *Store) MarkComplete(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	if s.complete || s.path == "" {
		s.complete = true
		s.mu.Unlock()
		return nil
	}
	s.complete = true
	snap := s.snapshot()
	s.complete = false
	s.mu.Unlock()
	if err := s.persist(snap); err != nil {
		return fmt.Errorf("memory store: persist %s: %w", s.path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.complete = true
	return nil
}

// Ready reports nil unless the store is closed.
func (s *Store) Ready(ctx context.Context) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	return nil
}

// Close makes every later call fail. The snapshot is already up to date.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func docIDs(docs []store.Doc) []string {
	ids := make([]string, len(docs))
	for i := range docs {
		ids[i] = docs[i].ID
	}
	return ids
}

// undoLog holds what a batch replaced: the earlier docs of its ids (nil where there was none).
type undoLog struct {
	ids  []string
	prev []*store.Doc
}

// capture records the current docs of ids, to restore them after the snapshot is taken.
// Called with mu held.
func (s *Store) capture(ids []string) *undoLog {
	u := &undoLog{ids: ids, prev: make([]*store.Doc, len(ids))}
	for i, id := range ids {
		if sl, ok := s.byID[id]; ok {
			d := s.docAt(sl)
			u.prev[i] = &d
		}
	}
	return u
}

// rollBack restores the docs capture recorded. Called with mu held.
func (s *Store) rollBack(u *undoLog) {
	for i := len(u.ids) - 1; i >= 0; i-- {
		if sl, ok := s.byID[u.ids[i]]; ok {
			s.remove(sl)
		}
	}
	for _, d := range u.prev {
		if d != nil {
			s.put(d)
		}
	}
}

// docAt rebuilds the stored doc of a slot (sparse vectors from the postings). Called with mu held.
func (s *Store) docAt(sl int32) store.Doc {
	x := &s.slots[sl]
	d := store.Doc{ID: x.id, Server: s.serverNames[x.server], Hash: x.hash, Tool: x.tool, Dense: x.dense}
	if len(x.terms) > 0 {
		d.Sparse = make(map[string]store.SparseVector, len(x.terms))
		for name, idx := range x.terms {
			post := s.vecs[name]
			v := store.SparseVector{Indices: idx, Values: make([]float32, len(idx))}
			for j, t := range idx {
				for _, p := range post[t] {
					if p.slot == sl {
						v.Values[j] = p.w
						break
					}
				}
			}
			d.Sparse[name] = v
		}
	}
	return d
}

func (s *Store) serverID(name string) int32 {
	if id, ok := s.serverIDs[name]; ok {
		return id
	}
	id := int32(len(s.serverNames))
	s.serverIDs[name] = id
	s.serverNames = append(s.serverNames, name)
	return id
}

// put inserts or replaces one doc. Called with mu held.
func (s *Store) put(d *store.Doc) {
	if sl, ok := s.byID[d.ID]; ok {
		s.remove(sl)
	}
	var sl int32
	if n := len(s.free); n > 0 {
		sl = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		sl = int32(len(s.slots))
		s.slots = append(s.slots, slot{})
	}
	x := slot{live: true, id: d.ID, server: s.serverID(d.Server), hash: d.Hash, tool: d.Tool, dense: normalized(d.Dense)}
	if len(d.Sparse) > 0 {
		x.terms = make(map[string][]uint32, len(d.Sparse))
	}
	for name, v := range d.Sparse {
		post := s.vecs[name]
		if post == nil {
			post = map[uint32][]posting{}
			s.vecs[name] = post
		}
		idx := make([]uint32, 0, len(v.Indices))
		for j, t := range v.Indices {
			if j >= len(v.Values) || v.Values[j] == 0 {
				continue
			}
			post[t] = append(post[t], posting{slot: sl, w: v.Values[j]})
			idx = append(idx, t)
		}
		x.terms[name] = idx
	}
	s.slots[sl] = x
	s.byID[d.ID] = sl
	s.live++
}

// remove deletes the doc in slot sl. Called with mu held.
func (s *Store) remove(sl int32) {
	x := &s.slots[sl]
	for name, idx := range x.terms {
		post := s.vecs[name]
		for _, t := range idx {
			pl := post[t]
			for j := range pl {
				if pl[j].slot == sl {
					pl[j] = pl[len(pl)-1]
					pl = pl[:len(pl)-1]
					break
				}
			}
			if len(pl) == 0 {
				delete(post, t)
			} else {
				post[t] = pl
			}
		}
	}
	delete(s.byID, x.id)
	*x = slot{}
	s.free = append(s.free, sl)
	s.live--
}

func normalized(v []float32) []float32 {
	if len(v) == 0 {
		return nil
	}
	ss := 0.0
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	if ss == 0 {
		return out
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out
}

// filter returns the slot filter for servers (nil: all) and whether any slot can pass.
// Called with mu held.
func (s *Store) filter(servers []string) (func(int32) bool, bool) {
	if len(servers) == 0 {
		return nil, true
	}
	allowed := make([]bool, len(s.serverNames))
	any := false
	for _, name := range servers {
		if id, ok := s.serverIDs[name]; ok {
			allowed[id] = true
			any = true
		}
	}
	return func(sl int32) bool { return allowed[s.slots[sl].server] }, any
}

type scored struct {
	slot  int32
	score float64
}

func weight(w map[string]float64, name string) float64 {
	if x, ok := w[name]; ok {
		return x
	}
	return 1
}

func (s *Store) denseScores(qd []float32, ok func(int32) bool) []scored {
	q := normalized(qd)
	out := make([]scored, 0, s.live)
	for i := range s.slots {
		x := &s.slots[i]
		if !x.live || len(x.dense) != len(q) || (ok != nil && !ok(int32(i))) {
			continue
		}
		var dot float32
		for j, v := range x.dense {
			dot += v * q[j]
		}
		out = append(out, scored{slot: int32(i), score: float64(dot)})
	}
	return out
}

func (s *Store) hits(top []scored) []store.Hit {
	out := make([]store.Hit, len(top))
	for i, c := range top {
		x := &s.slots[c.slot]
		out[i] = store.Hit{ID: x.id, Tool: x.tool, Score: c.score}
	}
	return out
}
