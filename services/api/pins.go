package api

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// pinClient is the part of the executor that reviewing and approving tool definitions
// (mcpServers pinning) needs; the executor's client has it.
type pinClient interface {
	ListPendingTools(ctx context.Context, in *toolmeshv1.ExecutorServiceListPendingToolsRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListPendingToolsResponse, error)
	ApproveTool(ctx context.Context, in *toolmeshv1.ExecutorServiceApproveToolRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceApproveToolResponse, error)
}

func (h *toolHandler) pins() (pinClient, error) {
	if pc, ok := h.executor.(pinClient); ok {
		return pc, nil
	}
	return nil, status.Error(codes.Unimplemented, "this executor client cannot review tool definitions")
}

// ListPendingTools is the executor's definitions waiting for approval, for an admin
// (policy.Admin): they show what a server now tells the model, before anyone approves it.
func (h *toolHandler) ListPendingTools(ctx context.Context, req *toolmeshv1.ListPendingToolsRequest) (*toolmeshv1.ListPendingToolsResponse, error) {
	if req.GetServer() != "" && !toolid.ValidServer(req.GetServer()) {
		return nil, errreason.InvalidField("server", "must match "+toolid.ServerRule)
	}
	if d := h.policy.Admin(caller(ctx, nil)); d != nil {
		return nil, h.policy.Record(ctx, d)
	}
	pc, err := h.pins()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	resp, err := pc.ListPendingTools(ctx, &toolmeshv1.ExecutorServiceListPendingToolsRequest{Server: req.GetServer()})
	if err != nil {
		return nil, dependencyError(ctx, "executor", h.cfg.ExecutorAddr, err)
	}
	return &toolmeshv1.ListPendingToolsResponse{Tools: resp.GetTools()}, nil
}

// ApproveTool pins a pending definition, for an admin; the executor records who approved
// (the token's name) in the pin file and its pin events.
func (h *toolHandler) ApproveTool(ctx context.Context, req *toolmeshv1.ApproveToolRequest) (*toolmeshv1.ApproveToolResponse, error) {
	switch {
	case req.GetServer() == "":
		return nil, errreason.InvalidField("server", "is required")
	case !toolid.ValidServer(req.GetServer()):
		return nil, errreason.InvalidField("server", "must match "+toolid.ServerRule)
	case req.GetName() == "":
		return nil, errreason.InvalidField("name", "is required")
	}
	c := caller(ctx, nil)
	if d := h.policy.Admin(c); d != nil {
		return nil, h.policy.Record(ctx, d)
	}
	pc, err := h.pins()
	if err != nil {
		return nil, err
	}
	by := "a caller without a token"
	if c.Token != "" {
		by = "token " + c.Token
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.RPCTimeout)
	defer cancel()
	resp, err := pc.ApproveTool(ctx, &toolmeshv1.ExecutorServiceApproveToolRequest{
		ToolId: toolid.Join(req.GetServer(), req.GetName()), Hash: req.GetHash(), ApprovedBy: by})
	if err != nil {
		return nil, dependencyError(ctx, "executor", h.cfg.ExecutorAddr, err)
	}
	return &toolmeshv1.ApproveToolResponse{Tool: resp.GetTool()}, nil
}
