package api

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/policy"
)

const tokenCalc, tokenOps = "calc-token-0123456789abcdef", "ops-token-0123456789abcdef"

// startScoped runs the api over the doubles with two tokens: calc, with the scope calc, and ops,
// which may call every tool and ask questions. as gives a token's outgoing context.
func startScoped(t *testing.T, exec *recordingExecutor, calc policy.Scope) (toolmeshv1.ToolServiceClient, toolmeshv1.AgentServiceClient) {
	t.Helper()
	cfg := testConfig("", "")
	cfg.Tokens = "calc:" + tokenCalc + ",ops:" + tokenOps
	cfg.Policy = policy.Config{Tokens: map[string]policy.Scope{"calc": calc, "ops": {Call: []string{"*"}, Query: true}}}
	conn := startAgent(t, cfg, exec, &searchingRetriever{tools: []*toolmeshv1.Tool{readOnlyTool("calc.add")}}, &steeredModel{steer: "calc.add"})
	return toolmeshv1.NewToolServiceClient(conn), toolmeshv1.NewAgentServiceClient(conn)
}

// as is the outgoing context of a request with token.
func as(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// doubleServers are the servers recordingExecutor says are configured.
var doubleServers = []string{"calc", "db", "notes"}

func (e *recordingExecutor) ListServers(context.Context, *toolmeshv1.ExecutorServiceListServersRequest) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	out := &toolmeshv1.ExecutorServiceListServersResponse{}
	for _, s := range doubleServers {
		out.Servers = append(out.Servers, &toolmeshv1.Server{Name: s, Rules: policy.RulesProto(e.rules[s])})
	}
	return out, nil
}

func (e *recordingExecutor) ListTools(_ context.Context, req *toolmeshv1.ExecutorServiceListToolsRequest) (*toolmeshv1.ExecutorServiceListToolsResponse, error) {
	if s := req.GetServer(); s != "" && !slices.Contains(doubleServers, s) {
		return nil, status.Errorf(codes.NotFound, "unknown server %q", s)
	}
	return &toolmeshv1.ExecutorServiceListToolsResponse{Tools: []*toolmeshv1.Tool{readOnlyTool("calc.add")}}, nil
}

// TestUnknownServers: a request's servers list with a name that is no server is bad input
// (INVALID_ARGUMENT naming servers[i] and the servers there are, closest first), not the
// policy's "rule: servers"; a token that may list only some servers is told only of those,
// and a server it may not list reads exactly like one that does not exist. GET
// /v1/tools?server= keeps its NOT_FOUND, with the same list; a search's server filter is
// checked as a query's servers are.
func TestUnknownServers(t *testing.T) {
	exec := &recordingExecutor{text: "5"}
	tools, agent := startScoped(t, exec, policy.Scope{Call: []string{"calc"}, Query: true})
	query := func(token string, q string, servers ...string) error {
		_, err := agent.Query(as(token), &toolmeshv1.QueryRequest{Query: q, Servers: servers})
		return err
	}
	stream := func(token string, servers ...string) error {
		s, err := agent.QueryStream(as(token), &toolmeshv1.QueryStreamRequest{Query: "What is 1 plus 1?", Servers: servers})
		if err != nil {
			return err
		}
		for {
			if _, err := s.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	listErr := func(token, server string) error {
		_, err := tools.ListTools(as(token), &toolmeshv1.ListToolsRequest{Server: server})
		return err
	}
	searchErr := func(token string, servers ...string) error {
		_, err := tools.SearchTools(as(token), &toolmeshv1.SearchToolsRequest{Q: "add", Server: servers})
		return err
	}
	cases := []struct {
		name  string
		err   error
		code  codes.Code
		field string
		msg   string
	}{
		{"a typo in a question's servers", query(tokenOps, "What is 1 plus 1?", "calc", "dbb"), codes.InvalidArgument, "servers[1]",
			`servers[1]: unknown server "dbb" (the servers: db, calc, notes)`},
		{"a typo in a direct call's servers", query(tokenOps, "@calc.add({})", "calcc"), codes.InvalidArgument, "servers[0]",
			`unknown server "calcc" (the servers: calc, db, notes)`},
		{"a typo in a stream's servers", stream(tokenOps, "nots"), codes.InvalidArgument, "servers[0]",
			`unknown server "nots" (the servers: notes, calc, db)`},
		{"a server the token may not list reads as unknown", query(tokenCalc, "@calc.add({})", "db"), codes.InvalidArgument, "servers[0]",
			`servers[0]: unknown server "db" (the servers: calc)`},
		{"as does one that does not exist", query(tokenCalc, "@calc.add({})", "nosuch"), codes.InvalidArgument, "servers[0]",
			`servers[0]: unknown server "nosuch" (the servers: calc)`},
		{"a known server out of the direct call's bound is still the policy's", query(tokenOps, "@calc.add({})", "db"), codes.PermissionDenied, "",
			"the request's servers are db (rule: servers)"},
		{"known servers pass", query(tokenOps, "What is 1 plus 1?", "calc"), codes.OK, "", ""},
		{"listing an unknown server", listErr(tokenOps, "calcc"), codes.NotFound, "", `unknown server "calcc" (the servers: calc, db, notes)`},
		{"listing a server the token may not list", listErr(tokenCalc, "db"), codes.NotFound, "", `unknown server "db" (the servers: calc)`},
		{"listing a server the token may list", listErr(tokenCalc, "calc"), codes.OK, "", ""},
		{"a typo in a search's server", searchErr(tokenOps, "calc", "nots"), codes.InvalidArgument, "server[1]", `server[1]: unknown server "nots" (the servers: notes, calc, db)`},
		{"a search's server the token may not list", searchErr(tokenCalc, "db"), codes.InvalidArgument, "server[0]", `server[0]: unknown server "db" (the servers: calc)`},
		{"a search's bad server name", searchErr(tokenOps, "Bad!"), codes.InvalidArgument, "server[0]", "must match"},
		{"a search's known server", searchErr(tokenOps, "calc"), codes.OK, "", ""},
	}
	for _, tc := range cases {
		msg := status.Convert(tc.err).Message()
		if got := status.Code(tc.err); got != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %v; want %s with %q", tc.name, tc.err, tc.code, tc.msg)
		}
		if f, _ := errreason.FieldOf(tc.err); f != tc.field {
			t.Errorf("%s: field %q, want %q", tc.name, f, tc.field)
		}
	}
	if got := exec.called(); slices.Contains(got, "db.add") {
		t.Errorf("executor called %v", got)
	}
}
