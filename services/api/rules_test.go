package api

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/policy"
)

// TestServerRulesFromExecutor: the api has no MCP server config of its own; the rules it
// decides by are those the executor publishes. An excluded tool is refused by the api (the
// executor never sees the call), a server that opts in to allowDestructive has its destructive
// tool offered to the model while another's is withheld, and /v1/servers shows the rules to a
// caller that may list every tool.
func TestServerRulesFromExecutor(t *testing.T) {
	exec := &recordingExecutor{text: "5", rules: map[string]policy.ServerRules{
		"notes": {ExcludedTools: []string{"secret_*"}},
		"db":    {AllowDestructive: true},
	}}
	retr := &searchingRetriever{tools: []*toolmeshv1.Tool{
		{Id: "db.drop_table", Server: "db", Name: "drop_table"}, // no annotations: may be destructive
		{Id: "calc.wipe", Server: "calc", Name: "wipe"},
		readOnlyTool("calc.add"),
	}}
	model := &steeredModel{steer: "calc.add"}
	conn := startAgent(t, testConfig("", ""), exec, retr, model)
	tools, agent := toolmeshv1.NewToolServiceClient(conn), toolmeshv1.NewAgentServiceClient(conn)
	ctx := context.Background()

	_, err := tools.CallTool(ctx, &toolmeshv1.CallToolRequest{Server: "notes", Name: "secret_dump"})
	want := `permission denied: call notes.secret_dump: mcpServers.notes.excludedTools has "secret_*" (rule: excludedTools)`
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != want {
		t.Errorf("call of the excluded tool: %v; want PermissionDenied %q", err, want)
	}
	if _, err := agent.Query(ctx, &toolmeshv1.QueryRequest{Query: "Drop the old table.", K: 3}); err != nil {
		t.Fatal(err)
	}
	if got := model.seen[0]; !slices.Contains(got, "db.drop_table") || slices.Contains(got, "calc.wipe") {
		t.Errorf("the model was offered %v; want db.drop_table (db sets allowDestructive) and not calc.wipe", got)
	}
	if got := exec.called(); slices.Contains(got, "notes.secret_dump") {
		t.Errorf("the executor saw %v; the excluded tool must not reach it", got)
	}
	servers, err := tools.ListServers(ctx, &toolmeshv1.ListServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers.GetServers() {
		if s.GetName() == "notes" && !slices.Equal(s.GetRules().GetExcludedTools(), []string{"secret_*"}) {
			t.Errorf("/v1/servers shows notes with rules %v; want its excludedTools", s.GetRules())
		}
	}
}

// TestServerRulesHidden: a caller that may not list every tool reads no server's rules in
// /v1/servers (they would tell it what is hidden from it).
func TestServerRulesHidden(t *testing.T) {
	exec := &recordingExecutor{text: "5", rules: map[string]policy.ServerRules{"calc": {ExcludedTools: []string{"secret_*"}}}}
	tools, _ := startScoped(t, exec, policy.Scope{Call: []string{"calc"}})
	resp, err := tools.ListServers(as(tokenCalc), &toolmeshv1.ListServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetServers()) == 0 {
		t.Fatal("no servers listed")
	}
	for _, s := range resp.GetServers() {
		if s.GetRules() != nil {
			t.Errorf("a narrow token reads %s's rules %v", s.GetName(), s.GetRules())
		}
	}
}

// oldExecutor is a test double of an executor older than the published rules: ListServers
// names its servers without rules and WatchTools' snapshot carries none. It records the calls
// that reach it.
type oldExecutor struct {
	executorBase
	mu    sync.Mutex
	calls int
}

func (e *oldExecutor) ListServers(context.Context, *toolmeshv1.ExecutorServiceListServersRequest) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	return &toolmeshv1.ExecutorServiceListServersResponse{Servers: []*toolmeshv1.Server{
		{Name: "calc", State: toolmeshv1.ServerState_SERVER_STATE_READY, ToolCount: 1},
	}}, nil
}

func (e *oldExecutor) ListTools(context.Context, *toolmeshv1.ExecutorServiceListToolsRequest) (*toolmeshv1.ExecutorServiceListToolsResponse, error) {
	return &toolmeshv1.ExecutorServiceListToolsResponse{Tools: []*toolmeshv1.Tool{readOnlyTool("calc.add")}}, nil
}

func (e *oldExecutor) WatchTools(_ *toolmeshv1.WatchToolsRequest, s grpc.ServerStreamingServer[toolmeshv1.WatchToolsResponse]) error {
	if err := s.Send(&toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT, Upserted: []*toolmeshv1.Tool{readOnlyTool("calc.add")}, Revision: 1}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (e *oldExecutor) CallTool(context.Context, *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	e.mu.Lock()
	e.calls++
	e.mu.Unlock()
	return &toolmeshv1.ExecutorServiceCallToolResponse{Content: []*toolmeshv1.Content{{Type: "text"}}}, nil
}

// TestServerRulesUnknown: an api that has no rules from its executor refuses every call, list,
// search and question as unavailable (503, NOT_READY, rule serverRules) saying why, and /readyz
// says it is not ready: before the executor answers, and while the executor answers without
// rules (one older than them), which would otherwise let through what a rule refuses.
func TestServerRulesUnknown(t *testing.T) {
	for _, tc := range []struct {
		name string
		exec func(t *testing.T) (string, *oldExecutor)
		why  string
	}{
		{"the executor has not answered", func(t *testing.T) (string, *oldExecutor) { return silentAddr(t), nil },
			"the api has not had the MCP servers' rules from the executor at "},
		{"the executor sends no rules", func(t *testing.T) (string, *oldExecutor) {
			e := &oldExecutor{}
			return startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, e) }), e
		}, "sends no rules for its MCP servers: it is older than this api, and calls are refused rather than made without them; upgrade the executors before the apis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, old := tc.exec(t)
			cfg := testConfig(addr, "")
			cfg.RPCTimeout = 500 * time.Millisecond
			retr := &searchingRetriever{tools: []*toolmeshv1.Tool{readOnlyTool("calc.add")}}
			conn := startAgentWith(t, cfg, retr, &steeredModel{steer: "calc.add"})
			tools, agent := toolmeshv1.NewToolServiceClient(conn), toolmeshv1.NewAgentServiceClient(conn)
			ctx := context.Background()
			refused := func(what string, err error) {
				t.Helper()
				st := status.Convert(err)
				if st.Code() != codes.Unavailable || errreason.Of(err) != errreason.NotReady || !strings.Contains(st.Message(), tc.why) ||
					!strings.Contains(st.Message(), "(rule: serverRules)") {
					t.Errorf("%s: %v (reason %q); want UNAVAILABLE, NOT_READY, saying %q", what, err, errreason.Of(err), tc.why)
				}
			}
			_, err := tools.CallTool(ctx, &toolmeshv1.CallToolRequest{Server: "calc", Name: "add"})
			refused("a tool call", err)
			_, err = agent.Query(ctx, &toolmeshv1.QueryRequest{Query: `@calc.add({"a":1})`})
			refused("a direct query", err)
			_, err = agent.Query(ctx, &toolmeshv1.QueryRequest{Query: "Add one and one."})
			refused("a question", err)
			_, err = tools.ListTools(ctx, &toolmeshv1.ListToolsRequest{})
			refused("a listing", err)
			_, err = tools.SearchTools(ctx, &toolmeshv1.SearchToolsRequest{Q: "add"})
			refused("a search", err)
			if old != nil {
				old.mu.Lock()
				n := old.calls
				old.mu.Unlock()
				if n != 0 {
					t.Errorf("%d calls reached the executor; want none", n)
				}
			}

			code, body, raw := getReadyz(t, gatewayHandler(t, cfg), "")
			if code != http.StatusServiceUnavailable || body.Status == "ready" || !strings.Contains(raw, tc.why) {
				t.Errorf("/readyz: %d %s; want 503 saying %q", code, raw, tc.why)
			}
		})
	}
}

// TestServerRulesFollowed: with the api running, the rules come on the executor's WatchTools
// stream, and a change of them (a reload of the executor's config) reaches the api without a
// restart; an executor whose stream carries none leaves every call refused.
func TestServerRulesFollowed(t *testing.T) {
	exec := &watchingExecutor{events: make(chan *toolmeshv1.WatchToolsResponse, 4)}
	exec.events <- &toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT, Revision: 1,
		Upserted: []*toolmeshv1.Tool{readOnlyTool("calc.add")},
		Rules:    &toolmeshv1.ServerRulesSet{Servers: map[string]*toolmeshv1.ServerRules{"calc": {}}}}
	cfg := testConfig(startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) }), "")
	svc, err := New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	call := func() error {
		_, err := svc.tools.CallTool(context.Background(), &toolmeshv1.CallToolRequest{Server: "calc", Name: "add"})
		return err
	}
	eventually.Check(t, 10*time.Second, "the snapshot's rules in force", func() string {
		if svc.tools.policy.Pending() != "" || !exec.wasAsked() {
			return "pending: " + svc.tools.policy.Pending()
		}
		return ""
	})
	if err := call(); err != nil {
		t.Fatalf("a call under the snapshot's rules: %v", err)
	}

	exec.events <- &toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED, Revision: 2,
		Rules: &toolmeshv1.ServerRulesSet{Servers: map[string]*toolmeshv1.ServerRules{"calc": {ExcludedTools: []string{"add"}}}}}
	eventually.Check(t, 10*time.Second, "the changed rules reach the api", func() string {
		if st := status.Convert(call()); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "(rule: excludedTools)") {
			return st.String()
		}
		return ""
	})

	exec.events <- &toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT, Revision: 3,
		Upserted: []*toolmeshv1.Tool{readOnlyTool("calc.add")}}
	eventually.Check(t, 10*time.Second, "a snapshot without rules leaves calls refused", func() string {
		if st := status.Convert(call()); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "older than this api") {
			return st.String()
		}
		return ""
	})
}

// watchingExecutor is a test double of the executor whose WatchTools sends what the test puts
// in events; ListServers fails, so the rules can come only from the stream.
type watchingExecutor struct {
	executorBase
	events chan *toolmeshv1.WatchToolsResponse
	mu     sync.Mutex
	asked  bool
}

func (e *watchingExecutor) ListServers(context.Context, *toolmeshv1.ExecutorServiceListServersRequest) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	return nil, status.Error(codes.Unavailable, "ListServers is not what this double answers")
}

func (e *watchingExecutor) WatchTools(_ *toolmeshv1.WatchToolsRequest, s grpc.ServerStreamingServer[toolmeshv1.WatchToolsResponse]) error {
	e.mu.Lock()
	e.asked = true
	e.mu.Unlock()
	for {
		select {
		case ev := <-e.events:
			if err := s.Send(ev); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func (e *watchingExecutor) wasAsked() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.asked
}

func (e *watchingExecutor) CallTool(context.Context, *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	return &toolmeshv1.ExecutorServiceCallToolResponse{Content: []*toolmeshv1.Content{{Type: "text"}}}, nil
}
