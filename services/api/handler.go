package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/audit"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/closest"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/redact"
	"github.com/toolmesh/toolmesh/internal/searchbounds"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// executorClient is the part of the executor the tools API needs.
type executorClient interface {
	ListTools(ctx context.Context, in *toolmeshv1.ExecutorServiceListToolsRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListToolsResponse, error)
	ListServers(ctx context.Context, in *toolmeshv1.ExecutorServiceListServersRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListServersResponse, error)
	CallTool(ctx context.Context, in *toolmeshv1.ExecutorServiceCallToolRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceCallToolResponse, error)
	CallToolStream(ctx context.Context, in *toolmeshv1.ExecutorServiceCallToolStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.ExecutorServiceCallToolStreamResponse], error)
}

// retrieverClient is the part of the retriever the tools API needs.
type retrieverClient interface {
	SearchTools(ctx context.Context, in *toolmeshv1.RetrieverServiceSearchToolsRequest, opts ...grpc.CallOption) (*toolmeshv1.RetrieverServiceSearchToolsResponse, error)
	GetIndexStatus(ctx context.Context, in *toolmeshv1.GetIndexStatusRequest, opts ...grpc.CallOption) (*toolmeshv1.GetIndexStatusResponse, error)
}

type toolHandler struct {
	toolmeshv1.UnimplementedToolServiceServer
	cfg       Config
	executor  executorClient
	retriever retrieverClient // nil when no retriever is configured
	policy    *policy.Policy
	rules     *serverRules // the executor's rules, which the policy decides by
	trail     *trail
}

// caller is who the request in ctx comes from, for the policy.
func caller(ctx context.Context, servers []string) policy.Caller {
	return policy.Caller{Token: auth.Name(ctx), Servers: servers}
}

func (h *toolHandler) ListTools(ctx context.Context, req *toolmeshv1.ListToolsRequest) (*toolmeshv1.ListToolsResponse, error) {
	if req.GetServer() != "" && !toolid.ValidServer(req.GetServer()) {
		return nil, errreason.InvalidField("server", "must match "+toolid.ServerRule)
	}
	c := caller(ctx, nil)
	if d := h.policy.MayList(c); d != nil {
		return nil, h.policy.Record(ctx, d)
	}
	if err := h.rules.ready(ctx, policy.List); err != nil {
		return nil, err
	}
	if srv := req.GetServer(); srv != "" && !h.policy.ListsServer(c, srv) {
		// A server the caller may not list reads as one that does not exist.
		return nil, h.notFoundServer(ctx, c, srv)
	}
	lctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	resp, err := h.executor.ListTools(lctx, &toolmeshv1.ExecutorServiceListToolsRequest{Server: req.GetServer()})
	if status.Code(err) == codes.NotFound && req.GetServer() != "" {
		return nil, h.notFoundServer(ctx, c, req.GetServer())
	}
	if err != nil {
		return nil, dependencyError(lctx, "executor", h.cfg.ExecutorAddr, err)
	}
	// What a token may not list is left out, as if it did not exist; a refusal per tool would
	// be noise (and would say what there is to be refused).
	tools := resp.GetTools()
	if h.policy.Scoped() {
		tools = slices.DeleteFunc(slices.Clone(tools), func(t *toolmeshv1.Tool) bool { return h.policy.List(c, t.GetId()) != nil })
	}
	return &toolmeshv1.ListToolsResponse{Tools: tools}, nil
}

// notFoundServer is the NOT_FOUND answer for a server c cannot list, naming those it can.
func (h *toolHandler) notFoundServer(ctx context.Context, c policy.Caller, name string) error {
	known, err := knownServers(ctx, h.executor, h.policy, h.cfg, c)
	if err != nil {
		return err
	}
	return status.Error(codes.NotFound, unknownServer(name, known))
}

// checkServerNames refuses a list of server names (a query's servers, a search's server filter:
// field names it) that names no server c may list: a typo is bad input, naming the servers
// there are, closest first, not a search that finds nothing or a policy refusal of every call.
// A server c may not list reads as one that does not exist.
func checkServerNames(ctx context.Context, ex executorClient, p *policy.Policy, cfg Config, c policy.Caller, field string, servers []string) error {
	if len(servers) == 0 {
		return nil
	}
	for i, s := range servers {
		if !toolid.ValidServer(s) {
			return errreason.InvalidField(fmt.Sprintf("%s[%d]", field, i), "must match "+toolid.ServerRule)
		}
	}
	known, err := knownServers(ctx, ex, p, cfg, c)
	if err != nil {
		return err
	}
	for i, s := range servers {
		if !slices.Contains(known, s) {
			return errreason.InvalidField(fmt.Sprintf("%s[%d]", field, i), unknownServer(s, known))
		}
	}
	return nil
}

// maxKnownServers bounds how many servers an unknown server's message names.
const maxKnownServers = 10

// knownServers is the names of the configured servers c may list: all a message about a server
// name may tell c of.
func knownServers(ctx context.Context, ex executorClient, p *policy.Policy, cfg Config, c policy.Caller) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.RPCTimeout)
	defer cancel()
	resp, err := ex.ListServers(ctx, &toolmeshv1.ExecutorServiceListServersRequest{})
	if err != nil {
		return nil, dependencyError(ctx, "executor", cfg.ExecutorAddr, err)
	}
	var names []string
	for _, s := range resp.GetServers() {
		if p.ListsServer(c, s.GetName()) {
			names = append(names, s.GetName())
		}
	}
	return names, nil
}

// unknownServer says that name is no server and which servers there are, closest first, so
// that a typo shows its fix. known must be only what the caller may list: a server it may not
// list then reads exactly as one that does not exist.
func unknownServer(name string, known []string) string {
	if len(known) == 0 {
		return fmt.Sprintf("unknown server %q (there are no servers)", name)
	}
	return fmt.Sprintf("unknown server %q (the servers: %s)", name, closest.List(name, known, maxKnownServers))
}

func (h *toolHandler) ListServers(ctx context.Context, _ *toolmeshv1.ListServersRequest) (*toolmeshv1.ListServersResponse, error) {
	servers, err := h.allServers(ctx)
	if err != nil {
		return nil, err
	}
	c := caller(ctx, nil)
	if h.policy.Scoped() {
		servers = slices.DeleteFunc(slices.Clone(servers), func(s *toolmeshv1.Server) bool { return !h.policy.ListsServer(c, s.GetName()) })
	}
	if !h.policy.ListsAll(c) {
		// The operator's patterns are for a caller that may see every tool: a narrower one
		// would read which tools of its servers are hidden from it.
		for _, s := range servers {
			s.Rules = nil
		}
	}
	return &toolmeshv1.ListServersResponse{Servers: servers}, nil
}

// allServers is every configured server, whoever asks; ListServers keeps those the caller may list.
func (h *toolHandler) allServers(ctx context.Context) ([]*toolmeshv1.Server, error) {
	resp, err := h.listServers(ctx)
	return resp.GetServers(), err
}

// listServers is the executor's servers and the state of its MCP server configuration.
func (h *toolHandler) listServers(ctx context.Context) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	resp, err := h.executor.ListServers(ctx, &toolmeshv1.ExecutorServiceListServersRequest{})
	if err != nil {
		return nil, dependencyError(ctx, "executor", h.cfg.ExecutorAddr, err)
	}
	// An executor's answer carries its servers' rules: the policy's, until WatchTools delivers.
	h.rules.servers(resp)
	// A server's last error quotes its URL, with whatever credentials the user put in it; the
	// console shows this field, and /readyz reports it.
	for _, srv := range resp.GetServers() {
		srv.LastError = redact.Text(srv.GetLastError())
		srv.Endpoint = redact.Text(srv.GetEndpoint())
	}
	if c := resp.GetConfig(); c != nil {
		c.LastReloadError = redact.Text(c.GetLastReloadError())
	}
	return resp, nil
}

func (h *toolHandler) CallTool(ctx context.Context, req *toolmeshv1.CallToolRequest) (*toolmeshv1.CallToolResponse, error) {
	return h.CallToolProgress(ctx, req, nil)
}

// CallToolProgress is CallTool that passes the tool's progress reports to progress as they
// come, when progress is set (the MCP face does, for a client that asked for them).
func (h *toolHandler) CallToolProgress(ctx context.Context, req *toolmeshv1.CallToolRequest, progress func(*toolmeshv1.CallProgress)) (_ *toolmeshv1.CallToolResponse, err error) {
	if req.GetServer() == "" {
		return nil, errreason.InvalidField("server", "is required")
	}
	if !toolid.ValidServer(req.GetServer()) {
		return nil, errreason.InvalidField("server", "must match "+toolid.ServerRule)
	}
	if req.GetName() == "" {
		return nil, errreason.InvalidField("name", "is required")
	}
	id := toolid.Join(req.GetServer(), req.GetName())
	var resp *toolmeshv1.ExecutorServiceCallToolResponse
	audited := h.trail.begin(ctx, h.trail.seenOf(ctx), audit.OriginCall, id, req.GetArguments()).withJSON(req.GetArgumentsJson())
	defer func() { audited.end(ctx, resp, resp.GetIsError(), err) }()
	h.rules.ensure(ctx) // the policy refuses the call while it has no rules
	c := caller(ctx, nil)
	if d := h.policy.Call(c, id); d != nil {
		return nil, h.policy.Record(ctx, d)
	}
	if err := audited.ready(); err != nil {
		return nil, err
	}
	if _, l := h.policy.Take(c, id); l != nil {
		_ = grpc.SetHeader(ctx, l.Header())
		return nil, h.policy.RecordLimited(ctx, l)
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.CallTimeout)
	defer cancel()
	// Arguments as JSON text go on as they came (the executor parses them, once); the answer
	// then carries the server's structured content as it sent it.
	call := &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: id, ArgumentsJson: req.GetArgumentsJson()}
	if call.ArgumentsJson == nil {
		call.Arguments = req.GetArguments()
	}
	var trailer metadata.MD
	if progress == nil {
		resp, err = h.executor.CallTool(ctx, call, grpc.Trailer(&trailer))
	} else {
		resp, trailer, err = h.streamCall(ctx, call, progress)
	}
	if err != nil {
		return nil, dependencyError(ctx, "executor", h.cfg.ExecutorAddr, err)
	}
	if cut := trailer.Get(resultCutKey); len(cut) == 1 {
		// The REST gateway sends it as the Toolmesh-Result-Cut header.
		_ = grpc.SetHeader(ctx, metadata.Pairs(resultCutKey, cut[0]))
	}
	return &toolmeshv1.CallToolResponse{
		Content:               resp.GetContent(),
		StructuredContent:     resp.GetStructuredContent(),
		StructuredContentJson: resp.GetStructuredContentJson(),
		IsError:               resp.GetIsError(),
		DurationMs:            resp.GetDurationMs(),
	}, nil
}

// streamCall makes call with the executor's CallToolStream: progress gets each report, the
// result ends it. It returns the call's trailer too.
func (h *toolHandler) streamCall(ctx context.Context, call *toolmeshv1.ExecutorServiceCallToolRequest, progress func(*toolmeshv1.CallProgress)) (*toolmeshv1.ExecutorServiceCallToolResponse, metadata.MD, error) {
	st, err := h.executor.CallToolStream(ctx, &toolmeshv1.ExecutorServiceCallToolStreamRequest{Call: call})
	if err != nil {
		return nil, nil, err
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil, nil, status.Error(codes.Internal, "the executor ended the call without its result")
		}
		if err != nil {
			return nil, nil, err
		}
		switch e := m.GetEvent().(type) {
		case *toolmeshv1.ExecutorServiceCallToolStreamResponse_Progress:
			progress(e.Progress)
		case *toolmeshv1.ExecutorServiceCallToolStreamResponse_Result:
			// The result is the stream's last message; its trailer comes with the end.
			if _, err := st.Recv(); !errors.Is(err, io.EOF) {
				return e.Result, nil, nil
			}
			return e.Result, st.Trailer(), nil
		}
	}
}

// resultCutKey is the executor's trailer (executor.CutTrailer) on a call whose result it cut
// to the tool's limit, and the api's header passing it on; its value is the limit in bytes.
const resultCutKey = "toolmesh-result-cut"

func (h *toolHandler) SearchTools(ctx context.Context, req *toolmeshv1.SearchToolsRequest) (*toolmeshv1.SearchToolsResponse, error) {
	switch {
	case req.GetQ() == "":
		return nil, errreason.InvalidField("q", "is required")
	case len(req.GetQ()) > searchbounds.MaxQueryBytes:
		return nil, errreason.InvalidField("q", fmt.Sprintf("is %d bytes, more than the %d allowed", len(req.GetQ()), searchbounds.MaxQueryBytes))
	case req.GetK() < 0 || req.GetK() > searchbounds.MaxK:
		return nil, errreason.InvalidField("k", fmt.Sprintf("must be between 1 and %d", searchbounds.MaxK))
	}
	if h.retriever == nil {
		return nil, status.Error(codes.Unavailable, "tool search needs a retriever: none is configured (set --api.retriever-addr)")
	}
	c := caller(ctx, nil)
	if d := h.policy.MaySearch(c); d != nil {
		return nil, h.policy.Record(ctx, d)
	}
	if err := h.rules.ready(ctx, policy.Search); err != nil {
		return nil, err
	}
	if err := checkServerNames(ctx, h.executor, h.policy, h.cfg, c, "server", req.GetServer()); err != nil {
		return nil, err
	}
	k := req.GetK()
	if k == 0 {
		k = searchbounds.DefaultK
	}
	servers, ok := h.policy.Within(c, policy.Search, req.GetServer())
	if !ok {
		return &toolmeshv1.SearchToolsResponse{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	resp, err := h.retriever.SearchTools(ctx, &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: req.GetQ(), K: k, Servers: servers})
	if err != nil {
		return nil, dependencyError(ctx, "retriever", h.cfg.RetrieverAddr, err)
	}
	results := resp.GetResults()
	if h.policy.Scoped() {
		results = slices.DeleteFunc(slices.Clone(results), func(r *toolmeshv1.ScoredTool) bool { return h.policy.Search(c, r.GetTool().GetId()) != nil })
	}
	return &toolmeshv1.SearchToolsResponse{Results: results}, nil
}

// dependencyError passes a dependency's own status through and explains the failures that are
// the call's, not the dependency's, so a user sees "executor at 127.0.0.1:7704 is unreachable"
// rather than a bare code. It sorts by code and reason, never by message: ctx is the call's
// context, so a deadline that ctx reports is ours; an UNAVAILABLE without a toolmesh reason
// comes from the transport (the dependency marks its own backends' failures, errreason).
func dependencyError(ctx context.Context, name, addr string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return status.Errorf(codes.Internal, "%s: %v", name, err)
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "%s at %s did not answer in time", name, addr)
	case st.Code() == codes.Canceled:
		return status.Error(codes.Canceled, "request canceled")
	case unreachable(err) && server.Replicated(addr):
		// With client-side health checks a replica that answers but reports NOT_SERVING (an
		// executor draining, a retriever not synced) gets no call either: not "unreachable".
		return status.Errorf(codes.Unavailable, "%s at %s: no replica is reachable and serving: %s", name, addr, st.Message())
	case unreachable(err):
		return status.Errorf(codes.Unavailable, "%s at %s is unreachable: %s", name, addr, st.Message())
	}
	return err
}

// unreachable says whether err is the transport's UNAVAILABLE (the dependency could not be
// reached) rather than one the dependency answered with.
func unreachable(err error) bool {
	return status.Code(err) == codes.Unavailable && errreason.Of(err) == ""
}
