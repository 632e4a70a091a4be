package executor

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// ListPendingTools lists the definitions waiting for approval, each with its diff.
func (s *Service) ListPendingTools(_ context.Context, req *toolmeshv1.ExecutorServiceListPendingToolsRequest) (*toolmeshv1.ExecutorServiceListPendingToolsResponse, error) {
	if srv := req.GetServer(); srv != "" {
		if _, ok := s.set.Load().sessions[srv]; !ok {
			return nil, status.Errorf(codes.NotFound, "unknown server %q", srv)
		}
	}
	return &toolmeshv1.ExecutorServiceListPendingToolsResponse{Tools: s.pins.list(req.GetServer())}, nil
}

// ApproveTool pins a pending definition and releases the tool.
func (s *Service) ApproveTool(_ context.Context, req *toolmeshv1.ExecutorServiceApproveToolRequest) (*toolmeshv1.ExecutorServiceApproveToolResponse, error) {
	if _, _, ok := toolid.Split(req.GetToolId()); !ok {
		return nil, status.Errorf(codes.InvalidArgument, "tool_id: %q is not SERVER.TOOL", req.GetToolId())
	}
	t, err := s.pins.approve(req.GetToolId(), req.GetHash(), req.GetApprovedBy())
	if err != nil {
		return nil, pinStatus(err)
	}
	return &toolmeshv1.ExecutorServiceApproveToolResponse{Tool: t}, nil
}

// pinStatus maps an approval's errors to gRPC status, as toStatus does a call's.
func pinStatus(err error) error {
	var np *notPendingError
	var stale *staleApprovalError
	var ro *readOnlyError
	switch {
	case errors.As(err, &np):
		return errreason.Error(codes.NotFound, errreason.UnknownTool, err.Error())
	case errors.As(err, &stale):
		return status.Error(codes.Aborted, err.Error())
	case errors.As(err, &ro):
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// WatchPinEvents sends the buffered pin events after req.after, then each new one, until the
// client leaves or the executor stops. A client that fell more than the buffer behind sees a
// gap in the sequence.
func (s *Service) WatchPinEvents(req *toolmeshv1.WatchPinEventsRequest, stream grpc.ServerStreamingServer[toolmeshv1.WatchPinEventsResponse]) error {
	ctx := stream.Context()
	after := req.GetAfter()
	for {
		evs, next := s.pins.events.since(after)
		for _, ev := range evs {
			if err := stream.Send(&toolmeshv1.WatchPinEventsResponse{Event: ev}); err != nil {
				return err
			}
			after = ev.GetSequence()
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.stopped:
			return status.Error(codes.Unavailable, "executor stopped")
		case <-s.draining:
			return errreason.Error(codes.Unavailable, errreason.Stopping, "executor stopping")
		case <-next:
		}
	}
}
