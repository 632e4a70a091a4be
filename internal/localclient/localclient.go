// Package localclient gives a service the generated gRPC client of another service of the same
// process (`toolmesh up`), calling its implementation through server.Local: the caller keeps
// its client interface, the call keeps its interceptors, spans and metrics, and nothing is
// encoded or sent. A method added to a service's proto fails to compile here until it is added.
package localclient

import (
	"context"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/server"
)

// Executor is a client of the ExecutorService registered on c's server, nil when none is.
func Executor(c *server.LocalClient) toolmeshv1.ExecutorServiceClient {
	if c == nil {
		return nil
	}
	srv, ok := c.Local().Service(toolmeshv1.ExecutorService_ServiceDesc.ServiceName).(toolmeshv1.ExecutorServiceServer)
	if !ok {
		return nil
	}
	return executor{c, srv}
}

type executor struct {
	c   *server.LocalClient
	srv toolmeshv1.ExecutorServiceServer
}

func (e executor) ListTools(ctx context.Context, in *toolmeshv1.ExecutorServiceListToolsRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListToolsResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_ListTools_FullMethodName, in, e.srv.ListTools, opts...)
}

func (e executor) ListServers(ctx context.Context, in *toolmeshv1.ExecutorServiceListServersRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_ListServers_FullMethodName, in, e.srv.ListServers, opts...)
}

func (e executor) CallTool(ctx context.Context, in *toolmeshv1.ExecutorServiceCallToolRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_CallTool_FullMethodName, in, e.srv.CallTool, opts...)
}

func (e executor) CallToolStream(ctx context.Context, in *toolmeshv1.ExecutorServiceCallToolStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.ExecutorServiceCallToolStreamResponse], error) {
	return server.LocalServerStream(ctx, e.c, toolmeshv1.ExecutorService_CallToolStream_FullMethodName, in, e.srv.CallToolStream, opts...)
}

func (e executor) WatchTools(ctx context.Context, in *toolmeshv1.WatchToolsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.WatchToolsResponse], error) {
	return server.LocalServerStream(ctx, e.c, toolmeshv1.ExecutorService_WatchTools_FullMethodName, in, e.srv.WatchTools, opts...)
}

func (e executor) ListPendingTools(ctx context.Context, in *toolmeshv1.ExecutorServiceListPendingToolsRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListPendingToolsResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_ListPendingTools_FullMethodName, in, e.srv.ListPendingTools, opts...)
}

func (e executor) ApproveTool(ctx context.Context, in *toolmeshv1.ExecutorServiceApproveToolRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceApproveToolResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_ApproveTool_FullMethodName, in, e.srv.ApproveTool, opts...)
}

func (e executor) WatchPinEvents(ctx context.Context, in *toolmeshv1.WatchPinEventsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.WatchPinEventsResponse], error) {
	return server.LocalServerStream(ctx, e.c, toolmeshv1.ExecutorService_WatchPinEvents_FullMethodName, in, e.srv.WatchPinEvents, opts...)
}

func (e executor) ListPrompts(ctx context.Context, in *toolmeshv1.ExecutorServiceListPromptsRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListPromptsResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_ListPrompts_FullMethodName, in, e.srv.ListPrompts, opts...)
}

func (e executor) GetPrompt(ctx context.Context, in *toolmeshv1.ExecutorServiceGetPromptRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceGetPromptResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_GetPrompt_FullMethodName, in, e.srv.GetPrompt, opts...)
}

func (e executor) ListResources(ctx context.Context, in *toolmeshv1.ExecutorServiceListResourcesRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListResourcesResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_ListResources_FullMethodName, in, e.srv.ListResources, opts...)
}

func (e executor) ListResourceTemplates(ctx context.Context, in *toolmeshv1.ExecutorServiceListResourceTemplatesRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListResourceTemplatesResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_ListResourceTemplates_FullMethodName, in, e.srv.ListResourceTemplates, opts...)
}

func (e executor) ReadResource(ctx context.Context, in *toolmeshv1.ExecutorServiceReadResourceRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceReadResourceResponse, error) {
	return server.LocalUnary(ctx, e.c, toolmeshv1.ExecutorService_ReadResource_FullMethodName, in, e.srv.ReadResource, opts...)
}

func (e executor) WatchListChanged(ctx context.Context, in *toolmeshv1.WatchListChangedRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.WatchListChangedResponse], error) {
	return server.LocalServerStream(ctx, e.c, toolmeshv1.ExecutorService_WatchListChanged_FullMethodName, in, e.srv.WatchListChanged, opts...)
}

// Retriever is a client of the RetrieverService registered on c's server, nil when none is.
func Retriever(c *server.LocalClient) toolmeshv1.RetrieverServiceClient {
	if c == nil {
		return nil
	}
	srv, ok := c.Local().Service(toolmeshv1.RetrieverService_ServiceDesc.ServiceName).(toolmeshv1.RetrieverServiceServer)
	if !ok {
		return nil
	}
	return retriever{c, srv}
}

type retriever struct {
	c   *server.LocalClient
	srv toolmeshv1.RetrieverServiceServer
}

func (r retriever) SearchTools(ctx context.Context, in *toolmeshv1.RetrieverServiceSearchToolsRequest, opts ...grpc.CallOption) (*toolmeshv1.RetrieverServiceSearchToolsResponse, error) {
	return server.LocalUnary(ctx, r.c, toolmeshv1.RetrieverService_SearchTools_FullMethodName, in, r.srv.SearchTools, opts...)
}

func (r retriever) GetIndexStatus(ctx context.Context, in *toolmeshv1.GetIndexStatusRequest, opts ...grpc.CallOption) (*toolmeshv1.GetIndexStatusResponse, error) {
	return server.LocalUnary(ctx, r.c, toolmeshv1.RetrieverService_GetIndexStatus_FullMethodName, in, r.srv.GetIndexStatus, opts...)
}

// Inference is a client of the InferenceService registered on c's server, nil when none is.
func Inference(c *server.LocalClient) toolmeshv1.InferenceServiceClient {
	if c == nil {
		return nil
	}
	srv, ok := c.Local().Service(toolmeshv1.InferenceService_ServiceDesc.ServiceName).(toolmeshv1.InferenceServiceServer)
	if !ok {
		return nil
	}
	return inference{c, srv}
}

type inference struct {
	c   *server.LocalClient
	srv toolmeshv1.InferenceServiceServer
}

func (i inference) Generate(ctx context.Context, in *toolmeshv1.GenerateRequest, opts ...grpc.CallOption) (*toolmeshv1.GenerateResponse, error) {
	return server.LocalUnary(ctx, i.c, toolmeshv1.InferenceService_Generate_FullMethodName, in, i.srv.Generate, opts...)
}

func (i inference) GetModelStatus(ctx context.Context, in *toolmeshv1.GetModelStatusRequest, opts ...grpc.CallOption) (*toolmeshv1.GetModelStatusResponse, error) {
	return server.LocalUnary(ctx, i.c, toolmeshv1.InferenceService_GetModelStatus_FullMethodName, in, i.srv.GetModelStatus, opts...)
}

func (i inference) ComposeAnswer(ctx context.Context, in *toolmeshv1.ComposeAnswerRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.ComposeAnswerResponse], error) {
	return server.LocalServerStream(ctx, i.c, toolmeshv1.InferenceService_ComposeAnswer_FullMethodName, in, i.srv.ComposeAnswer, opts...)
}
