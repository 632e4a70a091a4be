package inference

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/invalid"
	"github.com/toolmesh/toolmesh/internal/toolid"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
	"github.com/toolmesh/toolmesh/services/inference/llama"
)

// Generate asks the model for tool calls or an answer. Tools are best first: when the prompt
// does not fit the context, the lowest-ranked ones are dropped and reported.
func (s *Service) Generate(ctx context.Context, req *toolmeshv1.GenerateRequest) (*toolmeshv1.GenerateResponse, error) {
	switch q := req.GetQuery(); {
	case q == "":
		return nil, invalid.Field("query", "is required")
	case len(q) > toolid.MaxQueryBytes:
		return nil, invalid.Field("query", fmt.Sprintf("is %d bytes, more than the %d allowed", len(q), toolid.MaxQueryBytes))
	case !utf8.ValidString(q):
		return nil, invalid.Field("query", "is not valid UTF-8")
	case len(req.GetTools()) > s.cfg.MaxTools:
		return nil, invalid.Field("tools", fmt.Sprintf("has %d tools, more than the %d allowed", len(req.GetTools()), s.cfg.MaxTools))
	case req.GetMaxTokens() < 0:
		return nil, invalid.Field("max_tokens", "must not be negative")
	}
	tools := make([]*toolmeshv1.Tool, 0, len(req.GetTools()))
	for i, st := range req.GetTools() {
		if st.GetTool().GetId() == "" {
			return nil, invalid.Field(fmt.Sprintf("tools[%d].tool.id", i), "is required")
		}
		tools = append(tools, st.GetTool())
	}
	if s.chat != nil {
		return s.generateChat(ctx, req, tools)
	}
	props, err := s.contextSize(ctx)
	if err != nil {
		return nil, llmStatus(err)
	}
	// An explicit max_tokens is kept exactly. Otherwise the configured n_predict is a ceiling:
	// the model gets what the context has left, down to half of it, before any tool is
	// dropped — a longer budget lets the grammar allow longer calls, and a dropped tool
	// cannot be called at all.
	nPredict := int(req.GetMaxTokens())
	floor := nPredict
	if nPredict == 0 {
		nPredict = s.cfg.LLM.NPredict
		floor = max(nPredict/2, 1)
	}
	history := gorilla.StepsFromRecords(req.GetHistory())

	var cat *gorilla.Catalog
	var prompt string
	var dropped []string
	for {
		// The prompt does not depend on the grammar's limits: size the grammar once, below.
		if cat, err = s.catalogs.build(tools, 0); err != nil {
			return nil, invalid.Field("tools", err.Error())
		}
		prompt = cat.Prompt(req.GetQuery(), history)
		n, err := s.llm.CountTokens(ctx, prompt)
		if err != nil {
			return nil, llmStatus(err)
		}
		// +1: llama-server puts BOS in front of a string prompt.
		if n+1+floor <= props.NCtx {
			nPredict = min(nPredict, props.NCtx-n-1)
			break
		}
		if len(tools) == 0 {
			return nil, status.Errorf(codes.ResourceExhausted,
				"the question and earlier steps take %d tokens; with max_tokens %d that exceeds the model's context of %d", n+1, floor, props.NCtx)
		}
		dropped = append(dropped, tools[len(tools)-1].GetId())
		tools = tools[:len(tools)-1]
	}
	// Under the grammar every response must end before n_predict cuts it off (a token is at
	// least one byte; the end-of-text token takes the last one), so the agent loop always gets
	// something that parses.
	if nPredict > 0 {
		if cat, err = s.catalogs.build(tools, max(nPredict-1, 1)); err != nil {
			return nil, invalid.Field("tools", err.Error())
		}
		if u := cat.Uncallable(); len(u) > 0 {
			s.log.WarnContext(ctx, "tools whose calls cannot fit max_tokens are left out of the grammar",
				"tools", u, "max_tokens", nPredict)
		}
		s.log.DebugContext(ctx, "grammar sized to max_tokens", "max_tokens", nPredict,
			"max_response_bytes", cat.MaxResponseBytes(), "classes", cat.Limits(), "grammar_bytes", len(cat.Grammar()))
	}

	comp, err := s.llm.Complete(ctx, llama.CompletionRequest{
		Prompt:      prompt,
		NPredict:    nPredict,
		Grammar:     cat.Grammar(),
		CachePrompt: new(true),
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
		Answer:         answer,
		RawOutput:      comp.Content,
		DroppedToolIds: dropped,
		Model:          s.cfg.LLM.Model,
		Usage:          &toolmeshv1.Usage{PromptTokens: int32(comp.TokensEvaluated), CompletionTokens: int32(comp.TokensPredicted)},
	}
	for _, c := range calls {
		args, err := structpb.NewStruct(c.Arguments)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "arguments of %s: %v", c.ToolID, err)
		}
		out.Calls = append(out.Calls, &toolmeshv1.FunctionCall{ToolId: c.ToolID, Arguments: args})
	}
	return out, nil
}

// generateChat asks an OpenAI-compatible server; it budgets the context itself.
func (s *Service) generateChat(ctx context.Context, req *toolmeshv1.GenerateRequest, tools []*toolmeshv1.Tool) (*toolmeshv1.GenerateResponse, error) {
	res, err := s.chat.Generate(ctx, req.GetQuery(), tools, req.GetHistory(), int(req.GetMaxTokens()))
	if err != nil {
		return nil, backendStatus(err)
	}
	out := &toolmeshv1.GenerateResponse{
		Answer:    res.Answer,
		RawOutput: res.RawOutput,
		Model:     s.cfg.ChatModel,
		Usage:     &toolmeshv1.Usage{PromptTokens: int32(res.PromptTokens), CompletionTokens: int32(res.CompletionTokens)},
	}
	for _, c := range res.Calls {
		args, err := structpb.NewStruct(c.Arguments)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "arguments of %s: %v", c.ToolID, err)
		}
		out.Calls = append(out.Calls, &toolmeshv1.FunctionCall{ToolId: c.ToolID, Arguments: args})
	}
	return out, nil
}

// GetModelStatus says whether the llama-server answers and what it serves.
func (s *Service) GetModelStatus(ctx context.Context, _ *toolmeshv1.GetModelStatusRequest) (*toolmeshv1.GetModelStatusResponse, error) {
	if s.chat != nil {
		// OpenAI-compatible servers have no common health route; the first call tells.
		return &toolmeshv1.GetModelStatusResponse{Ready: true, BackendUrl: s.cfg.ChatURL, Model: s.cfg.ChatModel,
			Message: "openai backend: not probed"}, nil
	}
	out := &toolmeshv1.GetModelStatusResponse{BackendUrl: s.cfg.LLM.URL, Model: s.cfg.LLM.Model}
	if err := s.llm.Health(ctx); err != nil {
		out.Message, out.Fix = err.Error(), s.backend.fix()
		if s.backend.why != "" {
			out.Message = s.backend.why + "; " + out.Message
		}
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
// carries (llama.StatusOf), so the api can say whether the model is loading, unreadable or down.
func backendStatus(err error) error {
	return llama.StatusOf(llama.Code(err), err.Error(), err).Err()
}
