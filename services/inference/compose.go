package inference

import (
	"context"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/invalid"
	"github.com/toolmesh/toolmesh/internal/toolid"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
	"github.com/toolmesh/toolmesh/services/inference/llama"
)

// ComposeAnswer asks the model, without a grammar and without tools, to answer the question
// from the calls' results, and streams the text as the server generates it. Gorilla's own
// prompt with no functions and the calls as history is what the model was trained to answer
// in plain text.
func (s *Service) ComposeAnswer(req *toolmeshv1.ComposeAnswerRequest, stream grpc.ServerStreamingServer[toolmeshv1.ComposeAnswerResponse]) error {
	ctx := stream.Context()
	switch q := req.GetQuery(); {
	case q == "":
		return invalid.Field("query", "is required")
	case len(q) > toolid.MaxQueryBytes:
		return invalid.Field("query", fmt.Sprintf("is %d bytes, more than the %d allowed", len(q), toolid.MaxQueryBytes))
	case !utf8.ValidString(q):
		return invalid.Field("query", "is not valid UTF-8")
	case req.GetMaxTokens() < 0:
		return invalid.Field("max_tokens", "must not be negative")
	}
	if s.chat != nil {
		return s.composeChat(ctx, req, stream)
	}
	cat, err := gorilla.Build(nil)
	if err != nil {
		return status.Errorf(codes.Internal, "empty catalog: %v", err)
	}
	nPredict := int(req.GetMaxTokens())
	if nPredict == 0 {
		nPredict = s.cfg.LLM.NPredict
	}
	comp, err := s.llm.CompleteStream(ctx, llama.CompletionRequest{
		Prompt:      cat.Prompt(req.GetQuery(), gorilla.StepsFromRecords(req.GetHistory())),
		NPredict:    nPredict,
		CachePrompt: new(true),
	}, func(c llama.Chunk) error {
		if c.Text == "" {
			return nil
		}
		return stream.Send(&toolmeshv1.ComposeAnswerResponse{Delta: c.Text})
	})
	if err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return llmStatus(err)
	}
	return stream.Send(&toolmeshv1.ComposeAnswerResponse{Done: true,
		Usage: &toolmeshv1.Usage{PromptTokens: int32(comp.TokensEvaluated), CompletionTokens: int32(comp.TokensPredicted)}})
}

// composeChat streams the answer from an OpenAI-compatible server: a chat completion without
// tools whose message holds the question and the calls' results. The stream's context is the
// request's, so a client that goes away cancels the HTTP request and the server stops.
func (s *Service) composeChat(ctx context.Context, req *toolmeshv1.ComposeAnswerRequest, stream grpc.ServerStreamingServer[toolmeshv1.ComposeAnswerResponse]) error {
	res, err := s.chat.Compose(ctx, req.GetQuery(), req.GetHistory(), int(req.GetMaxTokens()), func(delta string) error {
		return stream.Send(&toolmeshv1.ComposeAnswerResponse{Delta: delta})
	})
	if err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return backendStatus(err)
	}
	if res.FinishReason == "length" {
		s.log.DebugContext(ctx, "composed answer cut off at max_tokens", "completion_tokens", res.CompletionTokens)
	}
	return stream.Send(&toolmeshv1.ComposeAnswerResponse{Done: true,
		Usage: &toolmeshv1.Usage{PromptTokens: int32(res.PromptTokens), CompletionTokens: int32(res.CompletionTokens)}})
}
