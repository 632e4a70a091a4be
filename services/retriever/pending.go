package retriever

import (
	"context"
	"errors"
	"sync"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

var errEmbedderStarting = errors.New("waiting for the embedding model toolmesh runs (the qdrant collection's name needs its vector dimension)")

// pendingIndex stands in for the index of a qdrant store that Run opens once the embedding
// model toolmesh runs answers: until then every call fails with errEmbedderStarting.
type pendingIndex struct {
	name string // the index's name before it opens (the dimension is not known yet)

	mu  sync.Mutex
	idx toolIndex
	st  store.Store
}

func (p *pendingIndex) set(idx toolIndex, st store.Store) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idx, p.st = idx, st
}

func (p *pendingIndex) get() (toolIndex, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idx == nil {
		return nil, errEmbedderStarting
	}
	return p.idx, nil
}

// Ready is the store's readiness once it is open.
func (p *pendingIndex) Ready(ctx context.Context) error {
	p.mu.Lock()
	st := p.st
	p.mu.Unlock()
	if st == nil {
		return errEmbedderStarting
	}
	return st.Ready(ctx)
}

// Close closes the store if it was opened.
func (p *pendingIndex) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st == nil {
		return nil
	}
	return p.st.Close()
}

func (p *pendingIndex) Name() string {
	if idx, err := p.get(); err == nil {
		return idx.Name()
	}
	return p.name
}

func (p *pendingIndex) Upsert(ctx context.Context, tools []*toolmeshv1.Tool) error {
	idx, err := p.get()
	if err != nil {
		return err
	}
	return idx.Upsert(ctx, tools)
}

func (p *pendingIndex) Delete(ctx context.Context, ids []string) error {
	idx, err := p.get()
	if err != nil {
		return err
	}
	return idx.Delete(ctx, ids)
}

func (p *pendingIndex) Search(ctx context.Context, query string, k int, servers []string) ([]*toolmeshv1.ScoredTool, error) {
	idx, err := p.get()
	if err != nil {
		return nil, err
	}
	return idx.Search(ctx, query, k, servers)
}

func (p *pendingIndex) Hashes(ctx context.Context) (map[string]string, error) {
	idx, err := p.get()
	if err != nil {
		return nil, err
	}
	return idx.Hashes(ctx)
}

func (p *pendingIndex) Complete(ctx context.Context) (bool, error) {
	idx, err := p.get()
	if err != nil {
		return false, err
	}
	return idx.Complete(ctx)
}

func (p *pendingIndex) MarkComplete(ctx context.Context) error {
	idx, err := p.get()
	if err != nil {
		return err
	}
	return idx.MarkComplete(ctx)
}
