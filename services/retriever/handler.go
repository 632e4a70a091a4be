package retriever

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/searchbounds"
	"github.com/toolmesh/toolmesh/internal/toolid"
	"github.com/toolmesh/toolmesh/services/retriever/index"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// SearchTools returns the top-k tools for a query.
func (s *Service) SearchTools(ctx context.Context, req *toolmeshv1.RetrieverServiceSearchToolsRequest) (*toolmeshv1.RetrieverServiceSearchToolsResponse, error) {
	q := req.GetQuery()
	switch {
	case q == "":
		return nil, errreason.InvalidField("query", "is required")
	case len(q) > searchbounds.MaxQueryBytes:
		return nil, errreason.InvalidField("query", fmt.Sprintf("is %d bytes, more than the %d allowed", len(q), searchbounds.MaxQueryBytes))
	case !utf8.ValidString(q):
		return nil, errreason.InvalidField("query", "is not valid UTF-8")
	case req.GetK() < 0 || req.GetK() > searchbounds.MaxK:
		return nil, errreason.InvalidField("k", fmt.Sprintf("is %d; it must be between 1 and %d", req.GetK(), searchbounds.MaxK))
	}
	for i, srv := range req.GetServers() {
		if !toolid.ValidServer(srv) {
			return nil, errreason.InvalidField(fmt.Sprintf("servers[%d]", i), fmt.Sprintf("%q must match %s", srv, toolid.ServerRule))
		}
	}
	k := int(req.GetK())
	if k == 0 {
		k = searchbounds.DefaultK
	}
	s.mu.Lock()
	building, indexed, lastErr := !s.synced && !s.kept, len(s.known), s.lastErr
	s.mu.Unlock()
	if building {
		msg := errNotSynced.Error()
		if indexed > 0 {
			msg += fmt.Sprintf(" (%d tools indexed so far)", indexed)
		}
		// Say why: "not synced" alone hides that the store (Qdrant down) or the embedder is
		// what fails the sync.
		if lastErr != "" {
			msg += "; last attempt: " + lastErr
		}
		return nil, errreason.Error(codes.Unavailable, errreason.NotReady, msg)
	}
	ctx, span := s.tracer.Start(ctx, "retrieval "+s.source, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "retrieval"),
			attribute.String("gen_ai.data_source.id", s.source), attribute.Int("gen_ai.request.top_k", k),
			attribute.StringSlice("toolmesh.retrieval.servers", req.GetServers())))
	defer span.End()
	start := time.Now()
	results, err := s.idx.Search(ctx, q, k, req.GetServers())
	s.searches.Record(ctx, time.Since(start).Seconds())
	if errors.Is(err, index.ErrEmptyQuery) {
		span.SetAttributes(attribute.Int("toolmesh.retrieval.results", 0))
		return nil, errreason.InvalidField("query", "has no searchable words (only stop words, numbers or punctuation)")
	}
	if errors.Is(err, store.ErrLost) {
		s.lost(fmt.Errorf("search: %w", err))
	}
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
		span.SetAttributes(attribute.String("error.type", status.Code(toStatus(err)).String()))
		return nil, toStatus(fmt.Errorf("search: %w", err))
	}
	s.mu.Lock()
	considered := len(s.known)
	s.mu.Unlock()
	span.SetAttributes(attribute.Int("toolmesh.retrieval.tools_considered", considered), attribute.Int("toolmesh.retrieval.results", len(results)))
	return &toolmeshv1.RetrieverServiceSearchToolsResponse{Results: results}, nil
}

// GetIndexStatus reports what the index holds and whether it is in step with the executor.
func (s *Service) GetIndexStatus(ctx context.Context, _ *toolmeshv1.GetIndexStatusRequest) (*toolmeshv1.GetIndexStatusResponse, error) {
	ready, why := s.Ready(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	lastErr := s.lastErr
	if lastErr == "" && !ready {
		lastErr = why
	}
	return &toolmeshv1.GetIndexStatusResponse{
		Ready:     ready,
		ToolCount: int32(len(s.known)),
		Embedder:  s.idx.Name(),
		Store:     s.cfg.Store,
		Revision:  s.revision.Load(),
		LastError: lastErr,
	}, nil
}

// toStatus maps index errors to gRPC codes at the edge.
func toStatus(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return errreason.Error(codes.Unavailable, errreason.BackendUnavailable, err.Error())
}
