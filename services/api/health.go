package api

import (
	"context"
	"crypto/rand"

	"go.opentelemetry.io/otel/trace"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// QuestionsReady says whether AgentService can answer questions: the model answers, as
// /readyz's inference section says. ToolService (search, direct calls) does not need it, so
// the gRPC health of the two differs (a client that follows health sends its questions to a
// replica that can answer them). It is asked every few seconds: the call is left out of the
// traces, where it would be a trace of its own each time.
func (s *Service) QuestionsReady(ctx context.Context) (bool, string) {
	if s.agent.inference == nil {
		return false, "no inference service is configured (--api.inference-addr)"
	}
	ctx, cancel := context.WithTimeout(untraced(ctx), s.cfg.RPCTimeout)
	defer cancel()
	st, err := s.agent.inference.GetModelStatus(ctx, &toolmeshv1.GetModelStatusRequest{})
	switch {
	case err != nil:
		return false, dependencyError(ctx, "inference", s.cfg.InferenceAddr, err).Error()
	case !st.GetReady():
		return false, st.GetMessage()
	}
	return true, ""
}

// untraced is ctx under a span that is not sampled, so that the calls made with it (and, with
// the default parent-based sampler, the spans they start downstream) record nothing.
func untraced(ctx context.Context) context.Context {
	var cfg trace.SpanContextConfig
	_, _ = rand.Read(cfg.TraceID[:])
	_, _ = rand.Read(cfg.SpanID[:])
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(cfg))
}
