// Package store holds the tool index's storage contract. Implementations: the in-process
// memory store (package store/memory) and Qdrant (package store/qdrant).
package store

import (
	"context"
	"errors"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// SparseVector is a lexical vector: Indices are hashed terms, sorted ascending and unique;
// Values are the term weights. Scoring is Σ idf(i)·query(i)·doc(i): the store supplies the
// IDF (Qdrant's Modifier_Idf formula, ln(1 + (N − df + 0.5)/(df + 0.5))), so weights here
// are term-frequency parts only.
type SparseVector struct {
	Indices []uint32
	Values  []float32
}

// Doc is one tool in the index.
type Doc struct {
	// ID is the tool id, SERVER.TOOL.
	ID     string
	Server string
	// Hash is the tool definition's hash; a tool whose hash did not change is not re-indexed.
	Hash string
	Tool *toolmeshv1.Tool
	// Dense is nil when no dense embedder is configured.
	Dense []float32
	// Sparse holds the named lexical vectors (for example "words", "chars").
	Sparse map[string]SparseVector
}

// Query asks for the best Limit tools.
type Query struct {
	Dense  []float32
	Sparse map[string]SparseVector
	// Weights gives each named vector's share in the fused score ("dense" names the dense one);
	// a missing name weighs 1. Stores that fuse by rank may use them as rank weights or ignore them.
	Weights map[string]float64
	Limit   int
	// Servers limits the search to these servers; empty searches all.
	Servers []string
}

// Hit is one result, best first.
type Hit struct {
	ID    string
	Tool  *toolmeshv1.Tool
	Score float64
}

// Store keeps docs and searches them. Every method is safe for concurrent use.
// Upserts and deletes are idempotent. What a failed one leaves differs: the memory store applies
// a call whole or not at all, so the earlier state keeps serving; the qdrant store cannot (a
// write it reported failed may still be applied later, and a search may see part of a batch;
// see its package doc). Either way Hashes tells what the store holds.
type Store interface {
	Upsert(ctx context.Context, docs []Doc) error
	Delete(ctx context.Context, ids []string) error
	// Search fuses the query's vectors into one ranking and returns at most q.Limit hits, tied
	// scores in id order.
	Search(ctx context.Context, q Query) ([]Hit, error)
	// Hashes returns every stored id with its hash, to reconcile with the catalog after a
	// restart or a failed write. It reflects every earlier write, including ones reported as
	// failed that the backend may still apply (or it fails until it can).
	Hashes(ctx context.Context) (map[string]string, error)
	// Ready reports whether the store can serve, and why not.
	Ready(ctx context.Context) error
	Close() error
}

// Completion is implemented by a store that persists, with its data, whether the index it holds
// was once complete: a full sync with the executor's catalog finished on it. An index kept from
// an earlier run may serve before the next sync only when it was complete; one left by a run that
// died during its first build holds whatever tools happened to be written, and would answer OK
// with the wrong tools.
type Completion interface {
	// Complete reports whether MarkComplete was recorded on the stored index (in this run, or in
	// the run whose data was loaded).
	Complete(ctx context.Context) (bool, error)
	// MarkComplete records, durably and atomically with the data, that the index is complete.
	MarkComplete(ctx context.Context) error
}

// ErrLost is wrapped by the errors of a store that found its index gone behind its back (a
// Qdrant collection deleted, a Qdrant restarted without its data). The store carries on with
// an empty index; its user has to write every doc again, and should not serve searches from it
// until then.
var ErrLost = errors.New("the stored index is gone")
