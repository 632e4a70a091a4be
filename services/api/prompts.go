package api

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// contextExecutor is the part of the executor the prompts and resources API needs.
type contextExecutor interface {
	executorClient
	ListPrompts(ctx context.Context, in *toolmeshv1.ExecutorServiceListPromptsRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListPromptsResponse, error)
	GetPrompt(ctx context.Context, in *toolmeshv1.ExecutorServiceGetPromptRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceGetPromptResponse, error)
	ListResources(ctx context.Context, in *toolmeshv1.ExecutorServiceListResourcesRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListResourcesResponse, error)
	ListResourceTemplates(ctx context.Context, in *toolmeshv1.ExecutorServiceListResourceTemplatesRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListResourceTemplatesResponse, error)
	ReadResource(ctx context.Context, in *toolmeshv1.ExecutorServiceReadResourceRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceReadResourceResponse, error)
}

// Bounds of a prompt's arguments: MCP prompts take a few short strings.
const (
	maxPromptArguments     = 64
	maxPromptArgumentBytes = 64 << 10
	maxResourceURIBytes    = 8 << 10
)

// contextHandler serves PromptService and ResourceService: the MCP servers' prompts and
// resources, through the executor, with the policy of internal/policy (policy.ServerContext:
// a token reaches the prompts and resources of the servers its scope covers whole).
type contextHandler struct {
	toolmeshv1.UnimplementedPromptServiceServer
	toolmeshv1.UnimplementedResourceServiceServer
	cfg      Config
	executor contextExecutor
	policy   *policy.Policy
}

// scope checks the server a request names and what c may do with it: a server c may not see
// the prompts and resources of reads as one that does not exist when a is List; for a get or
// read it is refused as a tool call out of scope is.
func (h *contextHandler) scope(ctx context.Context, c policy.Caller, a policy.Action, server string, required bool) error {
	switch {
	case server == "" && required:
		return errreason.InvalidField("server", "is required")
	case server == "":
		return nil
	case !toolid.ValidServer(server):
		return errreason.InvalidField("server", "must match "+toolid.ServerRule)
	}
	d := h.policy.ServerContext(c, a, server)
	if d == nil {
		return nil
	}
	if a == policy.List || !h.policy.ListsServer(c, server) {
		known, err := knownServers(ctx, h.executor, h.policy, h.cfg, c)
		if err != nil {
			return err
		}
		return status.Error(codes.NotFound, unknownServer(server, known))
	}
	return h.policy.Record(ctx, d)
}

// visible keeps the errors of the servers c may list the prompts and resources of.
func (h *contextHandler) visible(c policy.Caller, errs map[string]string) map[string]string {
	if !h.policy.Scoped() {
		return errs
	}
	maps.DeleteFunc(errs, func(server, _ string) bool { return h.policy.ServerContext(c, policy.List, server) != nil })
	return errs
}

// executorError maps the executor's answer: a server's unknown prompt or resource stays
// NOT_FOUND; an unknown server (removed by a reload meanwhile) names those there are.
func (h *contextHandler) executorError(ctx context.Context, server string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.NotFound && server != "" {
		return err
	}
	return dependencyError(ctx, "executor", h.cfg.ExecutorAddr, err)
}

// list runs a listing of the executor's (one server's, or all) and keeps what c may see.
func list[T any](ctx context.Context, h *contextHandler, server string, call func(context.Context) ([]T, map[string]string, error), serverOf func(T) string) ([]T, map[string]string, error) {
	c := caller(ctx, nil)
	if err := h.scope(ctx, c, policy.List, server, false); err != nil {
		return nil, nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	items, errs, err := call(lctx)
	if err != nil {
		return nil, nil, h.executorError(lctx, server, err)
	}
	if h.policy.Scoped() {
		items = slices.DeleteFunc(items, func(it T) bool { return h.policy.ServerContext(c, policy.List, serverOf(it)) != nil })
	}
	return items, h.visible(c, errs), nil
}

func (h *contextHandler) ListPrompts(ctx context.Context, req *toolmeshv1.ListPromptsRequest) (*toolmeshv1.ListPromptsResponse, error) {
	prompts, errs, err := list(ctx, h, req.GetServer(), func(ctx context.Context) ([]*toolmeshv1.Prompt, map[string]string, error) {
		resp, err := h.executor.ListPrompts(ctx, &toolmeshv1.ExecutorServiceListPromptsRequest{Server: req.GetServer()})
		return resp.GetPrompts(), resp.GetErrors(), err
	}, (*toolmeshv1.Prompt).GetServer)
	if err != nil {
		return nil, err
	}
	return &toolmeshv1.ListPromptsResponse{Prompts: prompts, Errors: errs}, nil
}

func (h *contextHandler) GetPrompt(ctx context.Context, req *toolmeshv1.GetPromptRequest) (*toolmeshv1.GetPromptResponse, error) {
	c := caller(ctx, nil)
	if err := h.scope(ctx, c, policy.Call, req.GetServer(), true); err != nil {
		return nil, err
	}
	if req.GetName() == "" {
		return nil, errreason.InvalidField("name", "is required")
	}
	if n := len(req.GetArguments()); n > maxPromptArguments {
		return nil, errreason.InvalidField("arguments", fmt.Sprintf("has %d arguments, more than the %d allowed", n, maxPromptArguments))
	}
	for k, v := range req.GetArguments() {
		if len(k)+len(v) > maxPromptArgumentBytes {
			return nil, errreason.InvalidField("arguments."+k, fmt.Sprintf("is more than %d bytes", maxPromptArgumentBytes))
		}
	}
	gctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	resp, err := h.executor.GetPrompt(gctx, &toolmeshv1.ExecutorServiceGetPromptRequest{Server: req.GetServer(), Name: req.GetName(), Arguments: req.GetArguments()})
	if err != nil {
		return nil, h.executorError(gctx, req.GetServer(), err)
	}
	return &toolmeshv1.GetPromptResponse{Description: resp.GetDescription(), Messages: resp.GetMessages()}, nil
}

func (h *contextHandler) ListResources(ctx context.Context, req *toolmeshv1.ListResourcesRequest) (*toolmeshv1.ListResourcesResponse, error) {
	resources, errs, err := list(ctx, h, req.GetServer(), func(ctx context.Context) ([]*toolmeshv1.Resource, map[string]string, error) {
		resp, err := h.executor.ListResources(ctx, &toolmeshv1.ExecutorServiceListResourcesRequest{Server: req.GetServer()})
		return resp.GetResources(), resp.GetErrors(), err
	}, (*toolmeshv1.Resource).GetServer)
	if err != nil {
		return nil, err
	}
	return &toolmeshv1.ListResourcesResponse{Resources: resources, Errors: errs}, nil
}

func (h *contextHandler) ListResourceTemplates(ctx context.Context, req *toolmeshv1.ListResourceTemplatesRequest) (*toolmeshv1.ListResourceTemplatesResponse, error) {
	templates, errs, err := list(ctx, h, req.GetServer(), func(ctx context.Context) ([]*toolmeshv1.ResourceTemplate, map[string]string, error) {
		resp, err := h.executor.ListResourceTemplates(ctx, &toolmeshv1.ExecutorServiceListResourceTemplatesRequest{Server: req.GetServer()})
		return resp.GetResourceTemplates(), resp.GetErrors(), err
	}, (*toolmeshv1.ResourceTemplate).GetServer)
	if err != nil {
		return nil, err
	}
	return &toolmeshv1.ListResourceTemplatesResponse{ResourceTemplates: templates, Errors: errs}, nil
}

func (h *contextHandler) ReadResource(ctx context.Context, req *toolmeshv1.ReadResourceRequest) (*toolmeshv1.ReadResourceResponse, error) {
	c := caller(ctx, nil)
	if err := h.scope(ctx, c, policy.Call, req.GetServer(), true); err != nil {
		return nil, err
	}
	switch uri := req.GetUri(); {
	case uri == "":
		return nil, errreason.InvalidField("uri", "is required: the resource's URI as its server lists it")
	case len(uri) > maxResourceURIBytes:
		return nil, errreason.InvalidField("uri", fmt.Sprintf("is %d bytes, more than the %d allowed", len(uri), maxResourceURIBytes))
	}
	rctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	resp, err := h.executor.ReadResource(rctx, &toolmeshv1.ExecutorServiceReadResourceRequest{Server: req.GetServer(), Uri: req.GetUri()})
	if err != nil {
		return nil, h.executorError(rctx, req.GetServer(), err)
	}
	return &toolmeshv1.ReadResourceResponse{Contents: resp.GetContents()}, nil
}
