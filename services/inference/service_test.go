package inference

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/services/inference/chat/chattest"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func calcTools(t *testing.T) []*toolmeshv1.ScoredTool {
	t.Helper()
	num := map[string]any{"type": "number"}
	schema, err := structpb.NewStruct(map[string]any{"type": "object",
		"properties": map[string]any{"a": num, "b": num}, "required": []any{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*toolmeshv1.ScoredTool
	for i, name := range []string{"add", "subtract", "multiply", "divide"} {
		out = append(out, &toolmeshv1.ScoredTool{Score: float64(10 - i), Tool: &toolmeshv1.Tool{
			Id: "calculator." + name, Server: "calculator", Name: name,
			Description: strings.Repeat("A calculator operation on two numbers a and b. ", 4), InputSchema: schema}})
	}
	return out
}

// newTestService runs the service against the llama-server at url.
func newTestService(t *testing.T, url string) *Service {
	t.Helper()
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
	cfg.LLM.URL = url
	cfg.LLM.NPredict = 64
	s, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.closer() })
	return s
}

func toolsOf(st []*toolmeshv1.ScoredTool) []*toolmeshv1.Tool {
	var out []*toolmeshv1.Tool
	for _, s := range st {
		out = append(out, s.GetTool())
	}
	return out
}

// TestGenerateOnDouble scripts the model's output on the llama-server double.
func TestGenerateOnDouble(t *testing.T) {
	tools := calcTools(t)
	cat, err := gorilla.Build(toolsOf(tools))
	if err != nil {
		t.Fatal(err)
	}
	add, _ := cat.Name("calculator.add")
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	s := newTestService(t, d.URL)
	query := "What is 2 plus 3?"
	d.Script(cat.Prompt(query, nil), llamatest.Reply{Pieces: []string{"<<function>>" + add + "(a=2, b=3)"}})

	resp, err := s.Generate(context.Background(), &toolmeshv1.GenerateRequest{Query: query, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetCalls()) != 1 || resp.GetCalls()[0].GetToolId() != "calculator.add" {
		t.Fatalf("calls = %v, want one call to calculator.add", resp.GetCalls())
	}
	if got := resp.GetCalls()[0].GetArguments().AsMap(); fmt.Sprint(got) != "map[a:2 b:3]" {
		t.Errorf("arguments = %v, want a=2 b=3", got)
	}
	reqs := d.Requests()
	if len(reqs) == 0 || reqs[len(reqs)-1].Grammar == "" {
		t.Errorf("the completion was sent without a grammar")
	}
}

func TestGenerateDropsLowestRankedToolsToFit(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: 1100})
	d.SetDefault(llamatest.Reply{Pieces: []string{"Five."}})
	s := newTestService(t, d.URL)
	resp, err := s.Generate(context.Background(), &toolmeshv1.GenerateRequest{Query: "What is 2 plus 3?", Tools: calcTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	dropped := resp.GetDroppedToolIds()
	if len(dropped) == 0 || dropped[0] != "calculator.divide" {
		t.Errorf("dropped = %v, want the lowest-ranked (calculator.divide) first", dropped)
	}
	if resp.GetAnswer() != "Five." {
		t.Errorf("answer = %q, want Five.", resp.GetAnswer())
	}
}

// TestGenerateGivesTheModelWhatTheContextLeaves: without max_tokens, the configured n_predict
// is a ceiling; the model gets what the context leaves (down to half of it) before a tool is
// dropped, and the grammar is sized to that.
func TestGenerateGivesTheModelWhatTheContextLeaves(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: 4096})
	d.SetDefault(llamatest.Reply{Pieces: []string{"Five."}})
	s := newTestService(t, d.URL)
	s.cfg.LLM.NPredict = 4000
	resp, err := s.Generate(context.Background(), &toolmeshv1.GenerateRequest{Query: "What is 2 plus 3?", Tools: calcTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	reqs := d.Requests()
	got := reqs[len(reqs)-1].NPredict
	if len(resp.GetDroppedToolIds()) != 0 || got >= 4000 || got < 2000 {
		t.Errorf("dropped %v, n_predict %d; want no tool dropped and n_predict between 2000 and 4000", resp.GetDroppedToolIds(), got)
	}
	// An explicit max_tokens is kept as asked.
	if _, err := s.Generate(context.Background(), &toolmeshv1.GenerateRequest{Query: "What is 2 plus 3?", Tools: calcTools(t), MaxTokens: 100}); err != nil {
		t.Fatal(err)
	}
	reqs = d.Requests()
	if got := reqs[len(reqs)-1].NPredict; got != 100 {
		t.Errorf("n_predict with max_tokens 100 = %d", got)
	}
}

func TestGenerateErrors(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	s := newTestService(t, d.URL)
	tests := []struct {
		name     string
		req      *toolmeshv1.GenerateRequest
		setup    func()
		wantCode codes.Code
		wantMsg  string
	}{
		{"empty query", &toolmeshv1.GenerateRequest{}, nil, codes.InvalidArgument, "query:"},
		{"negative max_tokens", &toolmeshv1.GenerateRequest{Query: "q", MaxTokens: -1}, nil, codes.InvalidArgument, "max_tokens:"},
		{"tool without id", &toolmeshv1.GenerateRequest{Query: "q", Tools: []*toolmeshv1.ScoredTool{{Tool: &toolmeshv1.Tool{}}}}, nil, codes.InvalidArgument, "tools[0].tool.id:"},
		{"output cut off at max_tokens", &toolmeshv1.GenerateRequest{Query: "cut", Tools: calcTools(t)}, func() {
			d.SetDefault(llamatest.Reply{Pieces: []string{"<<function>>calculator.add(a=2, b="}, StopType: "limit"})
		}, codes.ResourceExhausted, "cut off"},
		{"model loading", &toolmeshv1.GenerateRequest{Query: "q"}, func() { d.Loading(100, false) }, codes.Unavailable, "Loading model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			_, err := s.Generate(context.Background(), tc.req)
			if status.Code(err) != tc.wantCode || !strings.Contains(status.Convert(err).Message(), tc.wantMsg) {
				t.Errorf("err = %v, want %v containing %q", err, tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// TestGenerateOnRealServer decodes under the real grammar with a real llama-server running a
// random-weight model: the text is noise, but whatever comes out must parse into calls to
// offered tools or an answer.
func TestGenerateOnRealServer(t *testing.T) {
	srv := llamatest.StartServer(t, llamatest.ServerOptions{})
	s := newTestService(t, srv.URL)
	for i := 0; i < 3; i++ {
		resp, err := s.Generate(context.Background(), &toolmeshv1.GenerateRequest{Query: fmt.Sprintf("What is %d plus 3?", i), Tools: calcTools(t)})
		if err != nil {
			t.Fatalf("generate: %v", err)
		}
		for _, c := range resp.GetCalls() {
			if !strings.HasPrefix(c.GetToolId(), "calculator.") {
				t.Errorf("call to %q, which was not offered", c.GetToolId())
			}
		}
		if resp.GetUsage().GetCompletionTokens() == 0 {
			t.Errorf("usage = %v, want completion tokens", resp.GetUsage())
		}
	}
	st, err := s.GetModelStatus(context.Background(), &toolmeshv1.GetModelStatusRequest{})
	if err != nil || !st.GetReady() || st.GetContextSize() != 4096 || st.GetBackend() != "llama.cpp" {
		t.Errorf("model status = %v, %v; want llama.cpp ready with context 4096", st, err)
	}
}

// TestGenerateOpenAIBackend selects the OpenAI-compatible backend and scripts a tool call on
// its double.
func TestGenerateOpenAIBackend(t *testing.T) {
	d := chattest.NewDouble(t, chattest.Reply{ToolCalls: []chattest.ToolCall{{ID: "call_1", Name: "calculator__add", Arguments: `{"a":2,"b":3}`}}})
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
	cfg.Backend, cfg.ChatURL, cfg.ChatModel = "openai", d.URL, "some-model"
	s, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.closer() })
	resp, err := s.Generate(context.Background(), &toolmeshv1.GenerateRequest{Query: "What is 2 plus 3?", Tools: calcTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetCalls()) != 1 || resp.GetCalls()[0].GetToolId() != "calculator.add" ||
		fmt.Sprint(resp.GetCalls()[0].GetArguments().AsMap()) != "map[a:2 b:3]" {
		t.Errorf("calls = %v, want calculator.add(a=2, b=3)", resp.GetCalls())
	}
	if st, err := s.GetModelStatus(context.Background(), &toolmeshv1.GetModelStatusRequest{}); err != nil || st.GetBackend() != "openai" || st.GetModel() != "some-model" {
		t.Errorf("model status = %v, %v; want the openai backend's some-model", st, err)
	}
}
