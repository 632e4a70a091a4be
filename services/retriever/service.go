// Package retriever keeps an index of every tool the executor knows and returns the top-k
// tools for a question. It follows the executor's WatchTools stream, so the index is always
// the tools that can actually be called.
package retriever

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/llamaserver"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// toolIndex is what the service needs of the index: encode-and-store, delete, search.
type toolIndex interface {
	Upsert(ctx context.Context, tools []*toolmeshv1.Tool) error
	Delete(ctx context.Context, ids []string) error
	Search(ctx context.Context, query string, k int, servers []string) ([]*toolmeshv1.ScoredTool, error)
	// Hashes returns every indexed id with its definition hash.
	Hashes(ctx context.Context) (map[string]string, error)
	// Complete reports whether the stored index was recorded complete: a full sync finished on
	// it, in this run or an earlier one. MarkComplete records that, durably with the data.
	Complete(ctx context.Context) (bool, error)
	MarkComplete(ctx context.Context) error
	// Name says which embedder and model the index uses.
	Name() string
}

// upsertBatch bounds one index write, so a large catalog shows progress and a failure
// loses little work. The memory store applies a write of this size whole or not at all; on
// Qdrant a failed write may show in part, or land later (store/qdrant's package doc), and the
// next sync's reconcile, which reads what the store holds, repairs it.
const upsertBatch = 256

// Service is the retriever.
type Service struct {
	toolmeshv1.UnimplementedRetrieverServiceServer

	cfg    Config
	log    *slog.Logger
	idx    toolIndex
	ready  func(context.Context) error // the store's own readiness
	closer func() error
	// embedServer is the llama-server toolmesh runs for the embedding model, if any: Run starts
	// it and stops it when it returns, before the store closes.
	embedServer *llamaserver.Supervisor
	// open, when set, opens the index once the embedding model answers (Run calls it first).
	open func(context.Context) error

	mu      sync.Mutex
	known   map[string]string // indexed id → hash, as last written
	synced  bool              // a snapshot has been applied since start
	lastErr string
	// read is whether the index has been read once since start; kept whether it held tools
	// then and was recorded complete (an index kept from an earlier run whose sync finished),
	// which may serve before the first sync. An index this process builds from empty, or one
	// left by a run that died during its first build, serves only once complete: half built,
	// it would answer with whatever tools happen to be written so far.
	read, kept bool

	// resubscribe ends the current WatchTools subscription with a cause, so that Run starts
	// over from a fresh snapshot; nil between subscriptions.
	resubscribe context.CancelCauseFunc

	revision atomic.Uint64

	tel      *telemetry.Service
	tracer   trace.Tracer
	source   string // gen_ai.data_source.id: the store and the embedder
	searches metric.Float64Histogram
}

// setTelemetry traces each search as a GenAI retrieval span and measures its latency.
func (s *Service) setTelemetry(tel *telemetry.Service, model string) {
	s.tel = tel
	s.tracer = tel.Tracer("github.com/toolmesh/toolmesh/services/retriever")
	s.source = s.cfg.Store + "/" + model
	h, err := tel.Meter("github.com/toolmesh/toolmesh/services/retriever").Float64Histogram("toolmesh.retrieval.duration",
		metric.WithUnit("s"), metric.WithDescription("Time to find the top-k tools for a query."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1))
	if err != nil {
		h, _ = metricnoop.Meter{}.Float64Histogram("")
	}
	s.searches = h
}

func newService(cfg Config, idx toolIndex, ready func(context.Context) error, closer func() error, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if ready == nil {
		ready = func(context.Context) error { return nil }
	}
	if closer == nil {
		closer = func() error { return nil }
	}
	s := &Service{cfg: cfg, log: logger, idx: idx, ready: ready, closer: closer}
	s.setTelemetry(nil, "")
	return s
}

// Register adds the RetrieverService.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	toolmeshv1.RegisterRetrieverServiceServer(g, s)
}

// Run follows the executor's tool changes until ctx ends: it subscribes, reconciles the index
// with the snapshot, applies each change, and on any failure resubscribes with backoff (the
// next snapshot repairs whatever a failed write left out). Then it closes the store.
func (s *Service) Run(ctx context.Context) error {
	defer func() {
		if err := s.closer(); err != nil {
			s.log.Warn("close tool index store", "err", err)
		}
	}()
	if sup := s.embedServer; sup != nil {
		s.log.Info("running llama-server --embedding for the embedding model", "embed_model", s.cfg.EmbedModelRef, "llama_server", sup.Bin(), "url", sup.URL())
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = sup.Run(sctx) }()
		defer func() { stop(); <-done }()
	}
	if s.open != nil {
		if err := s.open(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	client := s.cfg.LocalExecutor
	if client == nil {
		conn, err := grpc.NewClient(s.cfg.ExecutorAddr, slices.Concat(server.DialOptionsFor(toolmeshv1.ExecutorService_ServiceDesc.ServiceName, s.cfg.ExecutorAddr), s.cfg.DialOptions, s.tel.GRPCDialOptions())...)
		if err != nil {
			return fmt.Errorf("executor client: %w", err)
		}
		defer conn.Close()
		client = toolmeshv1.NewExecutorServiceClient(conn)
	}

	// Read the index before the executor answers, so that a kept complete index serves even
	// while the executor is slow or down. On failure the sync reads it again.
	if _, err := s.readIndex(ctx); err != nil {
		s.log.Warn("cannot read the tool index at start-up; it is read again by the sync", "err", err)
	}

	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		err := s.follow(ctx, client)
		if ctx.Err() != nil {
			return nil
		}
		s.setErr(err)
		s.log.Warn("tool sync with the executor stopped; resubscribing", "executor", s.cfg.ExecutorAddr, "err", err, "retry_in", backoff)
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(backoff*2, s.cfg.ResyncBackoffMax)
	}
}

// follow runs one WatchTools subscription until it fails.
func (s *Service) follow(ctx context.Context, client toolmeshv1.ExecutorServiceClient) error {
	sctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	s.resubscribe = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.resubscribe = nil
		s.mu.Unlock()
		cancel(nil)
	}()
	stream, err := client.WatchTools(sctx, &toolmeshv1.WatchToolsRequest{})
	if err != nil {
		return fmt.Errorf("watch tools of executor at %s: %w", s.cfg.ExecutorAddr, err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil && sctx.Err() != nil {
				return context.Cause(sctx)
			}
			return fmt.Errorf("watch tools of executor at %s: %w", s.cfg.ExecutorAddr, err)
		}
		switch ev.GetType() {
		case toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT:
			err = s.reconcile(ctx, ev.GetUpserted())
			if err == nil {
				// Recorded before searches are let in, so that a restart serves this index at
				// once only if it got this far.
				if err = s.idx.MarkComplete(ctx); err != nil {
					err = fmt.Errorf("record the index as complete: %w", err)
				}
			}
		case toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED:
			err = s.apply(ctx, ev.GetUpserted(), ev.GetRemovedIds())
		default:
			err = fmt.Errorf("executor sent a watch event of unknown type %v", ev.GetType())
		}
		if err != nil {
			return err
		}
		s.revision.Store(ev.GetRevision())
		s.mu.Lock()
		s.synced, s.lastErr = true, ""
		s.mu.Unlock()
	}
}

// reconcile makes the index equal to the snapshot, writing only what differs from what the store
// reports holding. Every failed write ends the subscription, so the next snapshot comes here: a
// write that failed but was applied anyway (Qdrant applies updates it accepted, and its store's
// Hashes waits for them first) is kept when the snapshot agrees and undone when not.
func (s *Service) reconcile(ctx context.Context, tools []*toolmeshv1.Tool) error {
	indexed, err := s.readIndex(ctx)
	if err != nil {
		return err
	}
	inSnapshot := make(map[string]bool, len(tools))
	for _, t := range tools {
		inSnapshot[t.GetId()] = true
	}
	var gone []string
	for id := range indexed {
		if !inSnapshot[id] {
			gone = append(gone, id)
		}
	}
	return s.apply(ctx, tools, gone)
}

// readIndex reads what the index holds; the first read since start decides whether the index
// is kept (see Service.kept).
func (s *Service) readIndex(ctx context.Context) (map[string]string, error) {
	complete, err := s.idx.Complete(ctx)
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	indexed, err := s.idx.Hashes(ctx)
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	s.mu.Lock()
	s.known = indexed
	first := !s.read
	if first {
		s.read, s.kept = true, len(indexed) > 0 && complete
	}
	s.mu.Unlock()
	if first && len(indexed) > 0 && !complete {
		// Its tools are reused (only what changed is indexed again), but it is not served.
		s.log.Warn("the kept tool index is from a sync that did not finish; searches wait for the next one",
			"tools", len(indexed))
	}
	return indexed, nil
}

// apply indexes the tools whose hash changed and deletes the removed ids. The deletes come
// last: indexing (embedding) is the slow part that fails, and a failure there must leave the
// old index serving, removed tools included, until the next snapshot repairs it (whole on the
// memory store; on Qdrant a failed batch may show in part).
func (s *Service) apply(ctx context.Context, upserted []*toolmeshv1.Tool, removed []string) error {
	s.mu.Lock()
	var changed []*toolmeshv1.Tool
	for _, t := range upserted {
		if h, ok := s.known[t.GetId()]; !ok || h != t.GetHash() || t.GetHash() == "" {
			changed = append(changed, t)
		}
	}
	var deleted []string
	for _, id := range removed {
		if _, ok := s.known[id]; ok {
			deleted = append(deleted, id)
		}
	}
	s.mu.Unlock()

	start := time.Now()
	for i := 0; i < len(changed); i += upsertBatch {
		batch := changed[i:min(i+upsertBatch, len(changed))]
		if err := s.idx.Upsert(ctx, batch); err != nil {
			return fmt.Errorf("index %d tools: %w", len(batch), err)
		}
		s.mu.Lock()
		if s.known == nil {
			s.known = map[string]string{}
		}
		for _, t := range batch {
			s.known[t.GetId()] = t.GetHash()
		}
		s.mu.Unlock()
		if len(changed) > upsertBatch {
			s.log.Info("indexing tools", "done", i+len(batch), "of", len(changed))
		}
	}
	if len(deleted) > 0 {
		if err := s.idx.Delete(ctx, deleted); err != nil {
			return fmt.Errorf("delete %d tools from the index: %w", len(deleted), err)
		}
		s.mu.Lock()
		for _, id := range deleted {
			delete(s.known, id)
		}
		s.mu.Unlock()
	}
	if len(changed)+len(deleted) > 0 {
		s.log.Info("tool index updated", "indexed", len(changed), "deleted", len(deleted), "took", time.Since(start))
	}
	return nil
}

func (s *Service) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err.Error()
	if errors.Is(err, store.ErrLost) {
		s.synced, s.kept, s.known = false, false, nil
	}
}

// lost handles a store that found its index gone (store.ErrLost) outside the sync: searches
// stop until the index is rebuilt (an empty or half-rebuilt one would answer wrongly, with
// OK), and the sync starts over from a fresh snapshot, which writes every tool again.
func (s *Service) lost(err error) {
	s.setErr(err)
	s.mu.Lock()
	resubscribe := s.resubscribe
	s.mu.Unlock()
	s.log.Warn("the tool index store lost its index; rebuilding it", "err", err)
	if resubscribe != nil {
		resubscribe(err)
	}
}

// Ready is true once the index has been synced with the executor and the store answers.
func (s *Service) Ready(ctx context.Context) (bool, string) {
	s.mu.Lock()
	synced, lastErr := s.synced, s.lastErr
	s.mu.Unlock()
	if err := s.ready(ctx); err != nil {
		if errors.Is(err, store.ErrLost) {
			s.lost(fmt.Errorf("store: %w", err))
		}
		return false, "store: " + err.Error()
	}
	if !synced {
		if lastErr == "" {
			lastErr = "waiting for the executor's tool list"
		}
		return false, "not synced yet: " + lastErr
	}
	return true, ""
}

var errNotSynced = errors.New("the tool index has not been synced with the executor yet")
