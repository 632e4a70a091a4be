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
			return nil, fmt.Errorf("embedder: %w", err)
		}
		dense, closeDense = h, h.Close
		model = cfg.EmbedModel
		if cfg.Store == "qdrant" {
			if err := h.Probe(ctx); err != nil {
				_ = h.Close()
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
				return nil, fmt.Errorf("retriever.data-dir: %w", err)
			}
			path = filepath.Join(cfg.DataDir, "tools-"+fileSafe(lex.ID()+"-"+model)+".index")
		}
		m, err := memory.Open(path)
		if err != nil {
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

// Close releases the store and embedder when Run was never called.
func (s *Service) Close() { _ = s.closer() }

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

func fileSafe(s string) string { return strings.Trim(unsafeChars.ReplaceAllString(s, "_"), "_") }
