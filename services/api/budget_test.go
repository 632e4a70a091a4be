package api

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// bigExecutor answers calc.big with 20 KiB of text, every other tool with a few bytes.
type bigExecutor struct{ recordingExecutor }

func (e *bigExecutor) CallTool(ctx context.Context, req *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	resp, err := e.recordingExecutor.CallTool(ctx, req)
	if req.GetToolId() == "calc.big" {
		resp.Content[0].Text = proto.String(strings.Repeat("line of output\n", 20<<10/15))
	}
	return resp, err
}

// twoCallModel calls every offered tool in step 1, then answers; it keeps the history each
// Generate and ComposeAnswer was given.
type twoCallModel struct {
	toolmeshv1.UnimplementedInferenceServiceServer
	mu      sync.Mutex
	history [][]*toolmeshv1.ToolCallRecord
}

func (m *twoCallModel) Generate(_ context.Context, req *toolmeshv1.GenerateRequest) (*toolmeshv1.GenerateResponse, error) {
	m.mu.Lock()
	m.history = append(m.history, req.GetHistory())
	m.mu.Unlock()
	if len(req.GetHistory()) > 0 {
		return &toolmeshv1.GenerateResponse{Answer: "done"}, nil
	}
	var calls []*toolmeshv1.FunctionCall
	for _, t := range req.GetTools() {
		args, _ := structpb.NewStruct(map[string]any{})
		calls = append(calls, &toolmeshv1.FunctionCall{ToolId: t.GetTool().GetId(), Arguments: args})
	}
	return &toolmeshv1.GenerateResponse{Calls: calls}, nil
}

func (m *twoCallModel) ComposeAnswer(req *toolmeshv1.ComposeAnswerRequest, s grpc.ServerStreamingServer[toolmeshv1.ComposeAnswerResponse]) error {
	m.mu.Lock()
	m.history = append(m.history, req.GetHistory())
	m.mu.Unlock()
	return s.Send(&toolmeshv1.ComposeAnswerResponse{Delta: "done"})
}

// TestStepOutputBudget: the outputs of one step's calls take at most api.step-output-tokens in
// the model's prompt together: a small output stays whole, the large one is cut to the rest of
// the budget and says so, and what the model is given next (Generate, ComposeAnswer) and the
// query's record are the same cut outputs. A direct query, which no model reads, is not cut.
func TestStepOutputBudget(t *testing.T) {
	const budget = 1024
	cfg := testConfig("", "")
	cfg.StepOutputTokens = budget
	exec := &bigExecutor{recordingExecutor{text: "42"}}
	model := &twoCallModel{}
	retr := &searchingRetriever{tools: []*toolmeshv1.Tool{readOnlyTool("calc.big"), readOnlyTool("calc.small")}}
	cfg.ExecutorAddr = startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) })
	conn := startAgentWith(t, cfg, retr, model)
	agent := toolmeshv1.NewAgentServiceClient(conn)

	resp, err := agent.Query(context.Background(), &toolmeshv1.QueryRequest{Query: "Run both.", K: 2})
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.GetToolCalls()
	if len(calls) != 2 {
		t.Fatalf("%d calls; want 2", len(calls))
	}
	big, small := calls[0], calls[1]
	if small.GetOutput() != "42" {
		t.Errorf("the small output is %q; want it whole", small.GetOutput())
	}
	if !strings.HasPrefix(big.GetOutput(), "line of output") || !strings.Contains(big.GetOutput(), "cut to this step's budget for tool output (api.step-output-tokens=1024)") {
		t.Errorf("the large output ends %q; want it cut, saying so", big.GetOutput()[max(0, len(big.GetOutput())-200):])
	}
	if total := promptTokens(big.GetOutput()) + promptTokens(small.GetOutput()) + 2*quotes; total > budget {
		t.Errorf("the step's outputs take up to %d tokens; want at most %d", total, budget)
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	for i, h := range model.history[1:] {
		if len(h) != 2 || h[0].GetOutput() != big.GetOutput() || h[1].GetOutput() != "42" {
			t.Errorf("the model's request %d was given %d calls, not the recorded outputs", i+2, len(h))
		}
	}

	direct, err := agent.Query(context.Background(), &toolmeshv1.QueryRequest{Query: "@calc.big({})"})
	if err != nil {
		t.Fatal(err)
	}
	if out := direct.GetToolCalls()[0].GetOutput(); strings.Contains(out, "api.step-output-tokens") {
		t.Errorf("a direct query's output was cut to the step's budget: %d bytes", len(out))
	}
}

func TestPromptTokens(t *testing.T) {
	tests := []struct {
		s    string
		want int
	}{
		{"abc", 3}, {"a\nb", 4}, {`it's "x"\`, 13}, {"\x01", 4}, {"é", 2}, {"\u2028", 6}, {"\U000e0001", 10}, {"\xff", 3},
	}
	for _, tt := range tests {
		if got := promptTokens(tt.s); got != tt.want {
			t.Errorf("promptTokens(%q) = %d; want %d", tt.s, got, tt.want)
		}
	}
	for _, s := range []string{strings.Repeat("ab\n", 500), strings.Repeat("é\x01", 300), strings.Repeat("x", 50)} {
		for _, share := range []int{0, 5, 40, 300, 1000} {
			if got := promptTokens(cutToTokens(s, share, 1024)); got > max(share, promptTokens("…[cut]")) {
				t.Errorf("cutToTokens(%.10q..., %d) takes %d tokens", s, share, got)
			}
		}
	}
}
