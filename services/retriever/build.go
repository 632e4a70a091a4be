package retriever

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/llamaserver"
	mref "github.com/toolmesh/toolmesh/internal/model"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/services/retriever/embed"
	"github.com/toolmesh/toolmesh/services/retriever/index"
	"github.com/toolmesh/toolmesh/services/retriever/lexical"
	"github.com/toolmesh/toolmesh/services/retriever/store"
	"github.com/toolmesh/toolmesh/services/retriever/store/memory"
	"github.com/toolmesh/toolmesh/services/retriever/store/qdrant"
)

// New builds the index the config names (embedders, store) and the service around it.
// With an http embedder and the qdrant store it asks the embeddings server once for the
// vector dimension, because the collection name carries it.
func New(ctx context.Context, cfg Config, logger *slog.Logger, tel *telemetry.Service) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lex := lexical.Default()
	var dense embed.Dense
	var closeDense func() error
	// stopEmbedServer stops the llama-server toolmesh runs for EmbedModelRef, if any.
	stopEmbedServer := func() {}
	var embedServer *llamaserver.Supervisor
	if cfg.EmbedModelRef != "" {
		sup, stop, err := startEmbedServer(cfg, logger)
		if err != nil {
			return nil, err
		}
		embedServer, stopEmbedServer = sup, stop
		ref, _ := mref.ParseRef(cfg.EmbedModelRef)
		cfg.Embedder, cfg.EmbedURL, cfg.EmbedModel = "http", sup.URL(), ref.DisplayName()
	}
	model := lex.ID()
	if cfg.Embedder == "http" {
		h, err := embed.NewHTTP(embed.HTTPConfig{
			URL:       cfg.EmbedURL,
			Model:     cfg.EmbedModel,
			APIKey:    cfg.EmbedAPIKey,
			BatchSize: cfg.EmbedBatchSize,
			Timeout:   cfg.EmbedTimeout,
		}, nil, logger)
		if err != nil {
			stopEmbedServer()
			return nil, fmt.Errorf("embedder: %w", err)
		}
		dense, closeDense = h, func() error { err := h.Close(); stopEmbedServer(); return err }
		model = cfg.EmbedModel
		if cfg.Store == "qdrant" {
			probe := h.Probe
			if embedServer != nil {
				probe = func(ctx context.Context) error { return waitEmbedder(ctx, embedServer, h) }
			}
			if err := probe(ctx); err != nil {
				_ = closeDense()
				return nil, fmt.Errorf("embedder at %s: the qdrant store needs the vector dimension: %w", cfg.EmbedURL, err)
			}
		}
	}

	var st store.Store
	switch cfg.Store {
	case "memory":
		path := ""
		if cfg.DataDir != "" {
			if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
				closeAll(closeDense)
				return nil, fmt.Errorf("retriever.data-dir: %w", err)
			}
			path = filepath.Join(cfg.DataDir, "tools-"+fileSafe(lex.ID()+"-"+model)+".index")
		}
		m, err := memory.Open(path)
		if err != nil {
			closeAll(closeDense)
			return nil, fmt.Errorf("memory store: %w", err)
		}
		st = m
	case "qdrant":
		dim := 0
		if dense != nil {
			dim = dense.Dim()
		}
		sparse := slices.Sorted(maps.Keys(lex.Weights()))
		q, err := qdrant.New(ctx, qdrant.Config{
			Addr:       cfg.QdrantAddr,
			APIKey:     cfg.QdrantAPIKey,
			UseTLS:     cfg.QdrantTLS,
			CAFile:     cfg.QdrantCAFile,
			Collection: cfg.QdrantCollection,
			Timeout:    cfg.QdrantTimeout,
		}, model, dim, sparse)
		if err != nil {
			closeAll(closeDense)
			return nil, fmt.Errorf("qdrant store at %s: %w", cfg.QdrantAddr, err)
		}
		st = q
	}
	idx := index.New(st, lex, dense)
	closer := func() error {
		err := st.Close()
		if closeDense != nil {
			if cerr := closeDense(); err == nil {
				err = cerr
			}
		}
		return err
	}
	s := newService(cfg, idx, st.Ready, closer, logger)
	s.setTelemetry(tel, model)
	return s, nil
}

// closeAll runs the closers that are set, when New fails halfway.
func closeAll(closers ...func() error) {
	for _, c := range closers {
		if c != nil {
			_ = c()
		}
	}
}

// embedStartTimeout bounds the wait for the embedding model toolmesh runs, download included,
// when the store cannot start without it.
const embedStartTimeout = 10 * time.Minute

// startEmbedServer starts llama-server --embedding for EmbedModelRef; stop ends it.
func startEmbedServer(cfg Config, logger *slog.Logger) (*llamaserver.Supervisor, func(), error) {
	ref, err := mref.ParseRef(cfg.EmbedModelRef)
	if err != nil {
		return nil, nil, fmt.Errorf("retriever.embed.model-ref: %w", err)
	}
	cache, err := cfg.EmbedServer.Cache()
	if err != nil {
		return nil, nil, fmt.Errorf("retriever.embed.models-dir: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("embed_model", ref.String())
	sup, err := llamaserver.New(llamaserver.Config{
		Bin: cfg.EmbedServer.Bin, GPULayers: cfg.EmbedServer.GPULayers, Embedding: true, Alias: ref.DisplayName(),
	}, llamaserver.FromCache(ref, cache, log), log)
	if err != nil {
		return nil, nil, fmt.Errorf("retriever.embed.server-bin: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sup.Run(ctx) }()
	log.Info("running llama-server --embedding for the embedding model", "llama_server", sup.Bin(), "url", sup.URL())
	return sup, func() { cancel(); <-done }, nil
}

// waitEmbedder probes the embedder until it answers (learning the vector dimension), the
// server fails for good, or embedStartTimeout passes.
func waitEmbedder(ctx context.Context, sup *llamaserver.Supervisor, h *embed.HTTP) error {
	ctx, cancel := context.WithTimeout(ctx, embedStartTimeout)
	defer cancel()
	for {
		err := h.Probe(ctx)
		if err == nil {
			return nil
		}
		if st := sup.Status(); st.State == llamaserver.Failed {
			return fmt.Errorf("%s: %w", st.Message, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s (%s): %w", embedStartTimeout, sup.Status().Message, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Close releases the store and embedder when Run was never called.
func (s *Service) Close() { _ = s.closer() }

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

func fileSafe(s string) string { return strings.Trim(unsafeChars.ReplaceAllString(s, "_"), "_") }
