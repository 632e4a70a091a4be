package api

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/policy"
)

// TestToolRateLimit: calc.add allows 2 calls a minute per token. A token's third call is
// refused with RESOURCE_EXHAUSTED (TOOL_RATE_LIMITED) and a retry-after header, whether it is a
// call of the tools API or a direct @SERVER.TOOL query, and never reaches the executor; another
// tool, and another token, are not affected; a call the model chooses over the limit is a tool
// error the model reads, and the question is still answered.
func TestToolRateLimit(t *testing.T) {
	const tokenCI, tokenOps, tokenBot = "ci-token-0123456789abcdef", "ops-token-0123456789abcdef", "bot-token-0123456789abcdef"
	cfg := testConfig("", "")
	cfg.Tokens = "ci:" + tokenCI + ",ops:" + tokenOps + ",bot:" + tokenBot
	exec := &recordingExecutor{text: "5", rules: map[string]policy.ServerRules{
		"calc": {ToolRateLimits: map[string]*mcpconfig.RateLimit{"add": {Calls: 2, Per: time.Minute}}},
	}}
	model := &steeredModel{steer: "calc.add"}
	conn := startAgent(t, cfg, exec, &searchingRetriever{tools: []*toolmeshv1.Tool{readOnlyTool("calc.add")}}, model)
	tools, agent := toolmeshv1.NewToolServiceClient(conn), toolmeshv1.NewAgentServiceClient(conn)
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	}
	add := &toolmeshv1.CallToolRequest{Server: "calc", Name: "add"}
	for i := range 2 {
		if _, err := tools.CallTool(as(tokenCI), add); err != nil {
			t.Fatalf("call %d of 2: %v", i+1, err)
		}
	}
	refused := func(name string, err error, header metadata.MD) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || errreason.Of(err) != errreason.ToolRateLimited ||
			!strings.Contains(st.Message(), "rate limit of calc.add reached for token ci: 2 calls per 1m0s") {
			t.Errorf("%s: %v; want RESOURCE_EXHAUSTED, TOOL_RATE_LIMITED, naming the tool, the token and the limit", name, err)
		}
		if ra := header.Get("retry-after"); len(ra) != 1 || ra[0] != "30" {
			t.Errorf("%s: retry-after %v; want [30]", name, ra)
		}
		if n, ok := policy.RetryAfterOf(st); !ok || n != 30 {
			t.Errorf("%s: RetryInfo %d, %v; want 30 s", name, n, ok)
		}
	}
	var header metadata.MD
	_, err := tools.CallTool(as(tokenCI), add, grpc.Header(&header))
	refused("the third call", err, header)
	header = nil
	_, err = agent.Query(as(tokenCI), &toolmeshv1.QueryRequest{Query: `@calc.add({"a":1})`}, grpc.Header(&header))
	refused("a direct query", err, header)
	if got := len(exec.called()); got != 2 {
		t.Errorf("the executor saw %d calls; want the 2 within the limit", got)
	}

	if _, err := tools.CallTool(as(tokenCI), &toolmeshv1.CallToolRequest{Server: "calc", Name: "sub"}); err != nil {
		t.Errorf("another tool of the same server: %v", err)
	}
	if _, err := tools.CallTool(as(tokenOps), add); err != nil {
		t.Errorf("another token: %v", err)
	}

	// bot spends its calls, then asks a question whose model calls calc.add twice (steps 1
	// and 2): both are tool errors the model reads, and the question is answered.
	for range 2 {
		if _, err := agent.Query(as(tokenBot), &toolmeshv1.QueryRequest{Query: `@calc.add({"a":1})`}); err != nil {
			t.Fatal(err)
		}
	}
	before := len(exec.called())
	resp, err := agent.Query(as(tokenBot), &toolmeshv1.QueryRequest{Query: "Add one to the total."})
	if err != nil {
		t.Fatalf("a question whose model calls a tool over its limit: %v; want an answer", err)
	}
	calls := resp.GetToolCalls()
	if len(calls) == 0 || !slices.ContainsFunc(calls, func(c *toolmeshv1.ToolCallRecord) bool {
		return c.GetIsError() && strings.Contains(c.GetOutput(), "rate limit of calc.add reached for token bot") && strings.Contains(c.GetOutput(), "retry after")
	}) {
		t.Errorf("tool calls %v; want calc.add refused by its rate limit, as a tool error", calls)
	}
	if resp.GetAnswer() != "done" {
		t.Errorf("answer %q; want the model's", resp.GetAnswer())
	}
	if got := len(exec.called()); got != before {
		t.Errorf("the executor saw %d more calls; want none over the limit", got-before)
	}
}
