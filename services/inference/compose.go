package inference

import (
	"cmp"
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/chatcheck"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/services/inference/chat"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
	"github.com/toolmesh/toolmesh/services/inference/llama"
)

// ComposeAnswer asks the model, without a grammar and without tools, to answer the question
// from the calls' results, and streams the text as the server generates it. Gorilla's own
// prompt with no functions and the calls as history is what the model was trained to answer
// in plain text; the conversation's earlier turns go before the question, fitted to the
// context as Generate fits them.
func (s *Service) ComposeAnswer(req *toolmeshv1.ComposeAnswerRequest, stream grpc.ServerStreamingServer[toolmeshv1.ComposeAnswerResponse]) error {
	ctx := stream.Context()
	if req.GetMaxTokens() < 0 {
		return errreason.InvalidField("max_tokens", "must not be negative")
	}
	if err := cmp.Or(checkQuery(req.GetQuery()), chatcheck.Messages(req.GetMessages()), chatcheck.Generation(req.GetGeneration())); err != nil {
		return err
	}
	if s.chat != nil {
		return s.composeChat(ctx, req, stream)
	}
	if err := s.backend.unavailable(); err != nil {
		return err
	}
	gen := req.GetGeneration()
	// Both bounds are the answer's: the caller's (generation) and the api's.
	limit := bound(int(gen.GetMaxTokens()), int(req.GetMaxTokens()))
	nPredict, floor := limit, limit
	if limit == 0 {
		nPredict = s.cfg.LLM.NPredict
		floor = max(nPredict/2, 1)
	}
	history := gorilla.StepsFromRecords(req.GetHistory())
	conv := gorilla.NewConversation(req.GetMessages())
	var prompt string
	if conv.Turns() == 0 {
		// Nothing to shorten: the server says when the prompt is too long.
		cat, err := s.catalogs.build(nil, 0, false)
		if err != nil {
			return status.Errorf(codes.Internal, "empty catalog: %v", err)
		}
		prompt = cat.ConversationPrompt(conv, req.GetQuery(), history)
	} else {
		props, err := s.contextSize(ctx)
		if err != nil {
			return llmStatus(err)
		}
		f, err := s.fit(ctx, promptParts{query: req.GetQuery(), history: history, conv: conv, floor: floor}, props.NCtx)
		if err != nil {
			return err
		}
		prompt, conv = f.prompt, f.conv
	}
	comp, err := s.llm.CompleteStream(ctx, llama.CompletionRequest{
		Prompt:      prompt,
		NPredict:    nPredict,
		Stop:        gen.GetStop(),
		CachePrompt: new(true),
		Sampling:    sampling(gen),
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
	finish := finishReason(comp)
	fit := &toolmeshv1.HistoryFit{Turns: int32(conv.Turns()), Summarized: int32(conv.Summarized()), Dropped: int32(conv.Dropped())}
	recordOutcome(ctx, gen, finish, fit)
	return stream.Send(&toolmeshv1.ComposeAnswerResponse{Done: true, FinishReason: finish, History: fit,
		Usage: &toolmeshv1.Usage{PromptTokens: int32(comp.TokensEvaluated), CompletionTokens: int32(comp.TokensPredicted)}})
}

// finishReason is how a completion ended in OpenAI's terms ("length" when n_predict or the
// context cut it), for ComposeAnswer's finish_reason and gen_ai.response.finish_reasons.
func finishReason(comp *llama.Completion) string {
	if comp.StopType == llama.StopLimit || comp.Truncated {
		return "length"
	}
	return "stop"
}

// composeChat streams the answer from an OpenAI-compatible server: a chat completion without
// tools whose message holds the question and the calls' results. The stream's context is the
// request's, so a client that goes away cancels the HTTP request and the server stops.
func (s *Service) composeChat(ctx context.Context, req *toolmeshv1.ComposeAnswerRequest, stream grpc.ServerStreamingServer[toolmeshv1.ComposeAnswerResponse]) error {
	res, err := s.chat.Compose(ctx, chat.ComposeRequest{Query: req.GetQuery(), Messages: req.GetMessages(), History: req.GetHistory(),
		MaxTokens: int(req.GetMaxTokens()), Generation: req.GetGeneration()}, func(delta string) error {
		return stream.Send(&toolmeshv1.ComposeAnswerResponse{Delta: delta})
	})
	if err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return backendStatus(err)
	}
	finish := res.FinishReason
	if finish == "" {
		finish = "stop" // the server did not say; the stream ended as it should
	}
	fit := &toolmeshv1.HistoryFit{Turns: int32(gorilla.NewConversation(req.GetMessages()).Turns())}
	recordOutcome(ctx, req.GetGeneration(), finish, fit)
	return stream.Send(&toolmeshv1.ComposeAnswerResponse{Done: true, FinishReason: finish, History: fit,
		Usage: &toolmeshv1.Usage{PromptTokens: int32(res.PromptTokens), CompletionTokens: int32(res.CompletionTokens)}})
}
