package executor

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// TestAllowedAndExcludedTools: a tool the server's allowedTools or excludedTools leave out is
// not in the catalog (so neither listed nor indexed: the retriever indexes the catalog), is not
// counted in the server's tool count, and a call to it is refused with PermissionDenied naming
// the rule, not run.
func TestAllowedAndExcludedTools(t *testing.T) {
	ts := newTestMCP("calc", 0)
	h1 := newHTTPHarness(t, streamableHandler(fixed(ts)))
	ts2 := newTestMCP("other", 0)
	h2 := newHTTPHarness(t, streamableHandler(fixed(ts2)))
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"calc":  {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h1.addr + "/mcp", ExcludedTools: []string{"fail", "sl*", "g?ow"}},
		"other": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h2.addr + "/mcp", AllowedTools: []string{"add", "who*"}, ExcludedTools: []string{"whoami"}},
	}})
	h.waitReady(t)

	lt, err := h.client.ListTools(context.Background(), &toolmeshv1.ExecutorServiceListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tl := range lt.GetTools() {
		ids = append(ids, tl.GetId())
	}
	want := []string{"calc.add", "calc.pid", "calc.whoami", "other.add"}
	if !slices.Equal(ids, want) {
		t.Errorf("catalog = %v, want %v", ids, want)
	}
	servers, err := h.client.ListServers(context.Background(), &toolmeshv1.ExecutorServiceListServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers.GetServers() {
		if n := map[string]int32{"calc": 3, "other": 1}[s.GetName()]; s.GetToolCount() != n {
			t.Errorf("server %s tool_count = %d, want %d (what the catalog holds)", s.GetName(), s.GetToolCount(), n)
		}
	}

	cases := []struct {
		id, rule string
	}{
		{"calc.fail", `mcpServers.calc.excludedTools has "fail"`},
		{"calc.slow", `mcpServers.calc.excludedTools has "sl*"`},
		{"calc.grow", `mcpServers.calc.excludedTools has "g?ow"`},
		{"other.pid", "no pattern of mcpServers.other.allowedTools matches it"},
		{"other.whoami", `mcpServers.other.excludedTools has "whoami"`},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			_, err := call(t, h, tc.id, map[string]any{"ms": 1})
			st := wantCode(t, err, codes.PermissionDenied, tc.id, tc.rule)
			if !strings.Contains(st.Message(), "rule: ") {
				t.Errorf("message %q does not name the rule", st.Message())
			}
		})
	}
	if r, err := call(t, h, "calc.add", map[string]any{"a": 2, "b": 3}); err != nil || text(r) != "5" {
		t.Errorf("calc.add = %v, %v; want 5", r, err)
	}
}

// TestModelCallsDestructive: a call the model chose (by_model) of a tool that may be
// destructive is refused by the executor itself unless the server's config sets
// allowDestructive, with the policy's denial (rule allowDestructive, reason POLICY_DENIED),
// and never reaches the server; a direct call of the same tool runs, as the api allows it.
func TestModelCallsDestructive(t *testing.T) {
	ts := newTestMCP("calc", 0)
	h1 := newHTTPHarness(t, streamableHandler(fixed(ts)))
	ts2 := newTestMCP("ops", 0)
	h2 := newHTTPHarness(t, streamableHandler(fixed(ts2)))
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"calc": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h1.addr + "/mcp"},
		"ops":  {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h2.addr + "/mcp", AllowDestructive: true},
	}})
	h.waitReady(t)
	args, err := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		id      string
		byModel bool
		denied  bool
	}{
		{"the model's call, no allowDestructive", "calc.add", true, true},
		{"the model's call, allowDestructive", "ops.add", true, false},
		{"a direct call, no allowDestructive", "calc.add", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req := &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: tc.id, Arguments: args, ByModel: tc.byModel}
			resp, err := h.client.CallTool(ctx, req)
			// The stream answers as the unary call does.
			stream, serr := h.client.CallToolStream(ctx, &toolmeshv1.ExecutorServiceCallToolStreamRequest{Call: req})
			if serr == nil {
				_, _, serr = collect(t, stream)
			}
			if !tc.denied {
				if err != nil || text(resp) != "5" || serr != nil {
					t.Fatalf("CallTool = %v, %v (stream %v); want 5", resp, err, serr)
				}
				return
			}
			st := wantCode(t, err, codes.PermissionDenied, "permission denied: call "+tc.id+": ",
				"mcpServers.calc does not set allowDestructive: true", "(rule: allowDestructive)")
			if errreason.Of(err) != errreason.PolicyDenied {
				t.Errorf("reason %q, want %s", errreason.Of(err), errreason.PolicyDenied)
			}
			if sst := status.Convert(serr); sst.Code() != codes.PermissionDenied || sst.Message() != st.Message() {
				t.Errorf("stream: %v; want the unary call's %q", serr, st.Message())
			}
		})
	}
}
