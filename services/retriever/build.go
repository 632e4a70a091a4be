package retriever

import (
	"context"
	"errors"
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
	mref "github.com/toolmesh/toolmesh/internal/modelfetch"
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
// vector dimension, because the collection name carries it. The llama-server toolmesh runs
// for EmbedModelRef only gets its port here: Run starts it, and then opens a qdrant store,
// once the model answers.
func New(ctx context.Context, cfg Config, logger *slog.Logger, tel *telemetry.Service) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lex := lexical.Default()
	var dense embed.Dense
	var closeDense func() error
	var embedServer *llamaserver.Supervisor
	// closeEmbedServer releases its port when Run never ran (Run stops it itself).
	closeEmbedServer := func() {}
	if cfg.EmbedModelRef != "" {
		sup, err := newEmbedServer(cfg, logger)
		if err != nil {
			return nil, err
		}
		embedServer, closeEmbedServer = sup, func() { _ = sup.Close() }
		ref, _ := mref.ParseRef(cfg.EmbedModelRef)
		cfg.Embedder, cfg.EmbedURL, cfg.EmbedModel = "http", sup.URL(), ref.DisplayName()
	}
	model := lex.ID()
	var h *embed.HTTP
	if cfg.Embedder == "http" {
		var err error
		h, err = embed.NewHTTP(embed.HTTPConfig{
			URL:       cfg.EmbedURL,
			Model:     cfg.EmbedModel,
			APIKey:    cfg.EmbedAPIKey,
			BatchSize: cfg.EmbedBatchSize,
			Timeout:   cfg.EmbedTimeout,
		}, nil, logger)
		if err != nil {
			closeEmbedServer()
			return nil, fmt.Errorf("embedder: %w", err)
		}
		dense, closeDense = h, func() error { err := h.Close(); closeEmbedServer(); return err }
		model = cfg.EmbedModel
	}
	closeWith := func(st store.Store) func() error {
		return func() error {
			var err error
			if st != nil {
				err = st.Close()
			}
			if closeDense != nil {
				if cerr := closeDense(); err == nil {
					err = cerr
				}
			}
			return err
		}
	}

	if cfg.Store == "qdrant" && embedServer != nil {
		// The collection's name carries the vector dimension, which the model toolmesh runs
		// tells only once Run has started it.
		p := &pendingIndex{name: lex.ID() + "+" + model}
		s := newService(cfg, p, p.Ready, func() error { return errors.Join(p.Close(), closeWith(nil)()) }, logger)
		s.embedServer = embedServer
		s.open = func(ctx context.Context) error {
			if err := waitEmbedder(ctx, embedServer, h); err != nil {
				return fmt.Errorf("embedder at %s: the qdrant store needs the vector dimension: %w", cfg.EmbedURL, err)
			}
			st, err := openStore(ctx, cfg, lex, dense, model)
			if err != nil {
				return err
			}
			p.set(index.New(st, lex, dense), st)
			return nil
		}
		s.setTelemetry(tel, model)
		return s, nil
	}
	if cfg.Store == "qdrant" && h != nil {
		if err := h.Probe(ctx); err != nil {
			_ = closeDense()
			return nil, fmt.Errorf("embedder at %s: the qdrant store needs the vector dimension: %w", cfg.EmbedURL, err)
		}
	}
	st, err := openStore(ctx, cfg, lex, dense, model)
	if err != nil {
		closeAll(closeDense)
		return nil, err
	}
	s := newService(cfg, index.New(st, lex, dense), st.Ready, closeWith(st), logger)
	s.embedServer = embedServer
	s.setTelemetry(tel, model)
	return s, nil
}

// openStore opens the store the config names, for the index of lex and dense (named model).
func openStore(ctx context.Context, cfg Config, lex *lexical.Encoder, dense embed.Dense, model string) (store.Store, error) {
	switch cfg.Store {
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
			return nil, fmt.Errorf("qdrant store at %s: %w", cfg.QdrantAddr, err)
		}
		return q, nil
	}
	path := ""
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("retriever.data-dir: %w", err)
		}
		path = filepath.Join(cfg.DataDir, "tools-"+fileSafe(lex.ID()+"-"+model)+".index")
	}
	m, err := memory.Open(path)
	if err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	return m, nil
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

// newEmbedServer is the llama-server --embedding for EmbedModelRef, its port taken; Run starts it.
func newEmbedServer(cfg Config, logger *slog.Logger) (*llamaserver.Supervisor, error) {
	ref, err := mref.ParseRef(cfg.EmbedModelRef)
	if err != nil {
		return nil, fmt.Errorf("retriever.embed.model-ref: %w", err)
	}
	cache, err := cfg.EmbedServer.Cache()
	if err != nil {
		return nil, fmt.Errorf("retriever.embed.models-dir: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("embed_model", ref.String())
	sup, err := llamaserver.New(llamaserver.Config{
		Bin: cfg.EmbedServer.Bin, GPULayers: cfg.EmbedServer.GPULayers, Embedding: true, Alias: ref.DisplayName(),
	}, llamaserver.FromCache(ref, cache, cfg.EmbedServer.Hub, log), log)
	if err != nil {
		return nil, fmt.Errorf("retriever.embed.server-bin: %w", err)
	}
	return sup, nil
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
