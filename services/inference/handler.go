package inference

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/chatcheck"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/services/inference/chat"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
	"github.com/toolmesh/toolmesh/services/inference/llama"
	"github.com/toolmesh/toolmesh/services/inference/llmhttp"
)

// Generate asks the model for tool calls or an answer. Tools are best first: when the prompt
// does not fit the context, the conversation's oldest turns are summarized, then left out, and
// only then are the lowest-ranked tools dropped (and reported); the caller's functions never are.
func (s *Service) Generate(ctx context.Context, req *toolmeshv1.GenerateRequest) (*toolmeshv1.GenerateResponse, error) {
	if err := checkQuery(req.GetQuery()); err != nil {
		return nil, err
	}
	switch {
	case len(req.GetTools()) > s.cfg.MaxTools:
		return nil, errreason.InvalidField("tools", fmt.Sprintf("has %d tools, more than the %d allowed", len(req.GetTools()), s.cfg.MaxTools))
	case req.GetMaxTokens() < 0:
		return nil, errreason.InvalidField("max_tokens", "must not be negative")
	}
	tools := make([]*toolmeshv1.Tool, 0, len(req.GetTools()))
	for i, st := range req.GetTools() {
		if st.GetTool().GetId() == "" {
			return nil, errreason.InvalidField(fmt.Sprintf("tools[%d].tool.id", i), "is required")
		}
		tools = append(tools, st.GetTool())
	}
	if err := cmp.Or(chatcheck.Messages(req.GetMessages()), chatcheck.Functions(req.GetFunctions()), chatcheck.Generation(req.GetGeneration())); err != nil {
		return nil, err
	}
	if req.GetRequireCall() && len(tools)+len(req.GetFunctions()) == 0 {
		return nil, errreason.InvalidField("require_call", "asks for a call, but no tool or function is offered")
	}
	if s.chat != nil {
		return s.generateChat(ctx, req, tools)
	}
	if err := s.backend.unavailable(); err != nil {
		return nil, err
	}
	props, err := s.contextSize(ctx)
	if err != nil {
		return nil, llmStatus(err)
	}
	// An explicit max_tokens is kept exactly. Otherwise the configured n_predict is a ceiling:
	// the model gets what the context has left, down to half of it, before any turn is
	// shortened or any tool dropped — a longer budget lets the grammar allow longer calls, and a
	// dropped tool cannot be called at all.
	nPredict := int(req.GetMaxTokens())
	floor := nPredict
	if nPredict == 0 {
		nPredict = s.cfg.LLM.NPredict
		floor = max(nPredict/2, 1)
	}
	f, err := s.fit(ctx, promptParts{query: req.GetQuery(), history: gorilla.StepsFromRecords(req.GetHistory()),
		conv: gorilla.NewConversation(req.GetMessages()), functions: functionTools(req.GetFunctions()), tools: tools, floor: floor}, props.NCtx)
	if err != nil {
		return nil, err
	}
	nPredict = min(nPredict, props.NCtx-f.tokens-1)
	if f.conv.Summarized()+f.conv.Dropped()+len(f.dropped) > 0 {
		s.log.DebugContext(ctx, "prompt shortened to fit the context", "turns", f.conv.Turns(), "summarized", f.conv.Summarized(),
			"dropped_turns", f.conv.Dropped(), "dropped_tools", f.dropped, "prompt_tokens", f.tokens)
	}
	if req.GetRequireCall() && len(f.offered) == 0 {
		return nil, errreason.Error(codes.ResourceExhausted, errreason.ContextTooLong, "a call is required, but no tool fits the context")
	}
	// Under the grammar every response must end before n_predict cuts it off (a token is at
	// least one byte; the end-of-text token takes the last one), so the agent loop always gets
	// something that parses. A negative n_predict (until the end of text) leaves it unsized.
	maxBytes := 0
	if nPredict > 0 {
		maxBytes = max(nPredict-1, 1)
	}
	cat, err := s.catalogs.build(f.offered, maxBytes, req.GetRequireCall())
	if errors.Is(err, gorilla.ErrNoCallFits) {
		return nil, status.Errorf(codes.ResourceExhausted, "a call is required, but no call of the offered tools fits max_tokens %d", nPredict)
	}
	if err != nil {
		return nil, errreason.InvalidField("tools", err.Error())
	}
	if maxBytes > 0 {
		if u := cat.Uncallable(); len(u) > 0 {
			s.log.WarnContext(ctx, "tools whose calls cannot fit max_tokens are left out of the grammar",
				"tools", u, "max_tokens", nPredict)
		}
		s.log.DebugContext(ctx, "grammar sized to max_tokens", "max_tokens", nPredict,
			"max_response_bytes", cat.MaxResponseBytes(), "classes", cat.Limits(), "grammar_bytes", len(cat.Grammar()))
	}

	gen := req.GetGeneration()
	// The stop strings are not the server's: one could cut a call in half. A plain answer is cut
	// at them below.
	comp, err := s.llm.Complete(ctx, llama.CompletionRequest{
		Prompt:      f.prompt,
		NPredict:    nPredict,
		Grammar:     cat.Grammar(),
		CachePrompt: new(true),
		Sampling:    sampling(gen),
	})
	if err != nil {
		return nil, llmStatus(err)
	}
	calls, answer, err := cat.Parse(comp.Content)
	if err != nil && (comp.StopType == llama.StopLimit || comp.Truncated) {
		return nil, status.Errorf(codes.ResourceExhausted,
			"the model's output was cut off after %d tokens (max_tokens %d) before its calls were complete: %v", comp.TokensPredicted, nPredict, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "the model's output does not parse although a grammar bound it: %v", err)
	}
	out := &toolmeshv1.GenerateResponse{
		RawOutput:      comp.Content,
		DroppedToolIds: f.dropped,
		Model:          s.cfg.LLM.Model,
		Usage:          &toolmeshv1.Usage{PromptTokens: int32(comp.TokensEvaluated), CompletionTokens: int32(comp.TokensPredicted)},
		FinishReason:   "tool_calls",
		History:        f.history(),
	}
	for _, c := range calls {
		args, err := structpb.NewStruct(c.Arguments)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "arguments of %s: %v", c.ToolID, err)
		}
		out.Calls = append(out.Calls, &toolmeshv1.FunctionCall{ToolId: c.ToolID, Arguments: args})
	}
	if len(calls) == 0 {
		out.Answer, out.FinishReason, err = s.boundAnswer(ctx, answer, gen, comp.TokensPredicted)
		if err != nil {
			return nil, llmStatus(err)
		}
	}
	recordOutcome(ctx, gen, out.GetFinishReason(), out.GetHistory())
	return out, nil
}

// boundAnswer applies the caller's stop strings and max_tokens to a plain answer the grammar let
// run on its own budget: cut before the first stop string, then to max_tokens tokens
// ("length"). predicted is how many tokens the model generated: an answer of no more is not
// tokenized again.
func (s *Service) boundAnswer(ctx context.Context, answer string, gen *toolmeshv1.GenerationOptions, predicted int) (string, string, error) {
	answer, _ = cutAtStop(answer, gen.GetStop())
	limit := int(gen.GetMaxTokens())
	if limit <= 0 || predicted <= limit {
		return answer, "stop", nil
	}
	cut, longer, err := s.cutTokens(ctx, answer, limit)
	if err != nil || !longer {
		return answer, "stop", err
	}
	return cut, "length", nil
}

// sampling is the request's sampling options as llama-server takes them (nil: the configured
// default, then the server's).
func sampling(gen *toolmeshv1.GenerationOptions) llama.Sampling {
	if gen == nil {
		return llama.Sampling{}
	}
	return llama.Sampling{Temperature: gen.Temperature, TopP: gen.TopP, Seed: gen.Seed}
}

// generateChat asks an OpenAI-compatible server; it budgets the context itself.
func (s *Service) generateChat(ctx context.Context, req *toolmeshv1.GenerateRequest, tools []*toolmeshv1.Tool) (*toolmeshv1.GenerateResponse, error) {
	res, err := s.chat.Generate(ctx, chat.Request{Query: req.GetQuery(), Messages: req.GetMessages(), Tools: tools,
		Functions: req.GetFunctions(), History: req.GetHistory(), RequireCall: req.GetRequireCall(),
		MaxTokens: int(req.GetMaxTokens()), Generation: req.GetGeneration()})
	if err != nil {
		return nil, backendStatus(err)
	}
	out := &toolmeshv1.GenerateResponse{
		Answer:       res.Answer,
		RawOutput:    res.RawOutput,
		Model:        s.cfg.ChatModel,
		Usage:        &toolmeshv1.Usage{PromptTokens: int32(res.PromptTokens), CompletionTokens: int32(res.CompletionTokens)},
		FinishReason: res.FinishReason,
		// The server sees every turn; how they fit its context is its business.
		History: &toolmeshv1.HistoryFit{Turns: int32(gorilla.NewConversation(req.GetMessages()).Turns())},
	}
	for _, c := range res.Calls {
		args, err := structpb.NewStruct(c.Arguments)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "arguments of %s: %v", c.ToolID, err)
		}
		out.Calls = append(out.Calls, &toolmeshv1.FunctionCall{ToolId: c.ToolID, Arguments: args, Id: c.CallID})
	}
	// The upstream's reason is passed on, but calls are "tool_calls" whatever it said (OpenAI
	// says "stop" when tool_choice named the function), and a server that said nothing stopped.
	switch {
	case len(out.Calls) > 0:
		out.FinishReason = "tool_calls"
	case out.FinishReason == "":
		out.FinishReason = "stop"
	}
	recordOutcome(ctx, req.GetGeneration(), out.GetFinishReason(), out.GetHistory())
	return out, nil
}

// GetModelStatus says whether the llama-server answers and what it serves.
func (s *Service) GetModelStatus(ctx context.Context, _ *toolmeshv1.GetModelStatusRequest) (*toolmeshv1.GetModelStatusResponse, error) {
	if s.chat != nil {
		// OpenAI-compatible servers have no common health route; the first call tells.
		return &toolmeshv1.GetModelStatusResponse{Ready: true, BackendUrl: s.cfg.ChatURL, Model: s.cfg.ChatModel, Backend: "openai",
			Message: "openai backend: not probed"}, nil
	}
	out := &toolmeshv1.GetModelStatusResponse{BackendUrl: s.cfg.LLM.URL, Model: s.cfg.LLM.Model, Backend: "llama.cpp"}
	if err := s.llm.Health(ctx); err != nil {
		out.Message, out.Fix = s.backend.notReady(err), s.backend.fix()
		return out, nil
	}
	p, err := s.contextSize(ctx)
	if err != nil {
		out.Message, out.Fix = err.Error(), s.backend.fix()
		return out, nil
	}
	out.Ready, out.ContextSize = true, int32(p.NCtx)
	return out, nil
}

// llmStatus maps llama-server errors to gRPC codes at the edge.
func llmStatus(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return backendStatus(err)
}

// backendStatus is the status of a model backend's error, with the reason the backend's error
// carries (llmhttp.StatusOf), so the api can say whether the model is loading, unreadable or down.
func backendStatus(err error) error {
	return llmhttp.StatusOf(llmhttp.Code(err), err.Error(), err).Err()
}
