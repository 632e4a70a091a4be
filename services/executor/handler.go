package executor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// ListTools returns the catalog, of one server or of all.
func (s *Service) ListTools(_ context.Context, req *toolmeshv1.ExecutorServiceListToolsRequest) (*toolmeshv1.ExecutorServiceListToolsResponse, error) {
	if srv := req.GetServer(); srv != "" {
		if _, ok := s.set.Load().sessions[srv]; !ok {
			return nil, status.Errorf(codes.NotFound, "unknown server %q", srv)
		}
	}
	return &toolmeshv1.ExecutorServiceListToolsResponse{Tools: s.cat.list(req.GetServer())}, nil
}

// ListServers returns every configured server and the state of its session, and the state
// of the configuration.
func (s *Service) ListServers(context.Context, *toolmeshv1.ExecutorServiceListServersRequest) (*toolmeshv1.ExecutorServiceListServersResponse, error) {
	sessions := s.set.Load().list()
	out := make([]*toolmeshv1.Server, 0, len(sessions))
	for _, sess := range sessions {
		st := withSignIn(sess.status(), sess.dial.auth)
		st.Rules = s.cat.serverRules(sess.name)
		out = append(out, st)
	}
	return &toolmeshv1.ExecutorServiceListServersResponse{Servers: out, Config: s.conf.status()}, nil
}

// CallTool validates the arguments and calls the tool.
func (s *Service) CallTool(ctx context.Context, req *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	return s.call(ctx, req, nil)
}

// CallToolStream is CallTool with the server's progress reports sent ahead of the result.
// The reports are forwarded by a goroutine of their own: the MCP server's reader hands them
// over without waiting, and a receiver slower than the server gets the latest one.
func (s *Service) CallToolStream(req *toolmeshv1.ExecutorServiceCallToolStreamRequest, stream grpc.ServerStreamingServer[toolmeshv1.ExecutorServiceCallToolStreamResponse]) error {
	sink := newProgressSink()
	// send sends the latest report not sent yet, if any; an error means the stream is gone,
	// and the call's context ends with it.
	send := func() error {
		p := sink.take()
		if p == nil {
			return nil
		}
		return stream.Send(&toolmeshv1.ExecutorServiceCallToolStreamResponse{
			Event: &toolmeshv1.ExecutorServiceCallToolStreamResponse_Progress{Progress: p}})
	}
	done := make(chan struct{})
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case <-done:
				// The report that came just before the result goes first: the server
				// sent them in that order.
				_ = send()
				return
			case <-sink.ready:
				if send() != nil {
					return
				}
			}
		}
	}()
	out, err := s.call(stream.Context(), req.GetCall(), sink)
	close(done)
	<-forwarded
	if err != nil {
		return err
	}
	return stream.Send(&toolmeshv1.ExecutorServiceCallToolStreamResponse{
		Event: &toolmeshv1.ExecutorServiceCallToolStreamResponse_Result{Result: out}})
}

// call is CallTool's work, with progress reports going to sink when it is set.
func (s *Service) call(ctx context.Context, req *toolmeshv1.ExecutorServiceCallToolRequest, sink *progressSink) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	start := time.Now()
	var timeout time.Duration
	if d := req.GetTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "timeout: invalid duration")
		}
		timeout = d.AsDuration()
	}
	var cut *resultCut
	res, err := s.callTool(withCutNote(ctx, &cut), req, timeout, sink)
	if err != nil {
		return nil, toStatus(err)
	}
	out := resultToProto(res, req.GetArgumentsJson() != nil)
	// The wire limits (limit.go) do not bound this: JSON numbers grow in
	// structpb, and stdio and SSE lines are only cut at lineLimit.
	limit, source := s.limitOf(req.GetToolId())
	if cut != nil {
		limit, source = cut.limit, cut.source
	}
	if cut = cutResponse(out, limit, source, cut); cut != nil {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(CutTrailer, strconv.Itoa(cut.limit)))
		s.cutLog.Log(ctx, slog.LevelInfo, "tool result cut to its limit", "tool", req.GetToolId(), "limit", cut.limit, "setting", cut.source,
			"size", cut.size, "size_at_least", cut.over)
	}
	out.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	return out, nil
}

// limitOf is the result limit of the tool id and the setting it comes from.
func (s *Service) limitOf(id string) (int, string) {
	server, name, _ := toolid.Split(id)
	if sess, ok := s.set.Load().sessions[server]; ok {
		return resultLimit(server, sess.srv, s.cfg, name)
	}
	return s.cfg.MaxResultBytes, "executor.max-result-bytes"
}

// WatchTools sends a SNAPSHOT, then CHANGED events. A subscriber that falls
// more than watchBuffer events behind loses its backlog and gets a fresh
// SNAPSHOT (with the current revision) instead; publishing never waits for it.
func (s *Service) WatchTools(_ *toolmeshv1.WatchToolsRequest, stream grpc.ServerStreamingServer[toolmeshv1.WatchToolsResponse]) error {
	ctx := stream.Context()
	sub, snap := s.cat.subscribe()
	defer s.cat.unsubscribe(sub)
	if err := stream.Send(snap); err != nil {
		return err
	}
	last := snap.GetRevision()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.stopped:
			return status.Error(codes.Unavailable, "executor stopped")
		case <-s.draining:
			return errreason.Error(codes.Unavailable, errreason.Stopping, "executor stopping")
		case ev := <-sub.ch:
			if ev.GetRevision() <= last {
				continue
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
			last = ev.GetRevision()
		case <-sub.kick:
			if !sub.resync.Load() {
				continue
			}
			snap := s.cat.resnapshot(sub)
			if err := stream.Send(snap); err != nil {
				return err
			}
			last = snap.GetRevision()
		}
	}
}

// toStatus maps the executor's errors to gRPC status; this is the only place
// that knows about codes.
func toStatus(err error) error {
	var nic *notInCatalogError
	if errors.As(err, &nic) {
		st := status.Convert(toStatus(nic.err))
		return errreason.Error(st.Code(), errreason.UnknownTool, st.Message())
	}
	var ve *ValidationError
	var se *ServerError
	var pd *policy.Denial
	var q *quarantinedError
	switch {
	case errors.As(err, &pd):
		return pd.GRPCStatus().Err()
	case errors.As(err, &q):
		return errreason.Error(codes.FailedPrecondition, errreason.ToolQuarantined, err.Error())
	case errors.As(err, &ve):
		st := status.New(codes.InvalidArgument, fmt.Sprintf("invalid arguments for %q: %s", ve.Tool, ve.Error()))
		br := &errdetails.BadRequest{}
		for _, v := range ve.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
		}
		if d, derr := st.WithDetails(br); derr == nil {
			st = d
		}
		return st.Err()
	case errors.Is(err, ErrUnknownTool):
		return errreason.Error(codes.NotFound, errreason.UnknownTool, err.Error())
	case errors.Is(err, ErrResultTooLarge):
		return errreason.Error(codes.ResourceExhausted, errreason.ToolResultTooLarge, err.Error())
	case errors.Is(err, ErrTimeout):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, ErrUnavailable):
		return errreason.Error(codes.Unavailable, errreason.BackendUnavailable, err.Error())
	case errors.Is(err, ErrStopped):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.As(err, &se):
		switch {
		case errors.Is(err, mcp.ErrInvalidParams):
			return status.Error(codes.InvalidArgument, err.Error())
		case errors.Is(err, mcp.ErrMethodNotFound):
			return status.Error(codes.Unimplemented, err.Error())
		}
		return status.Error(codes.Unknown, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// resultToProto is the response of res. With asJSON (the caller sent arguments_json), its
// structured content is the server's own JSON text, in structured_content_json; without, a
// Struct, as older callers read it.
func resultToProto(res *mcp.CallToolResult, asJSON bool) *toolmeshv1.ExecutorServiceCallToolResponse {
	out := &toolmeshv1.ExecutorServiceCallToolResponse{IsError: res.IsError}
	out.Content = make([]*toolmeshv1.Content, 0, len(res.Content))
	for _, c := range res.Content {
		if pc := contentToProto(c); pc != nil {
			out.Content = append(out.Content, pc)
		}
	}
	m, ok := res.StructuredContent.(map[string]any)
	switch {
	case !ok:
		// MCP's structured content is an object; anything else is left out, as before.
	case asJSON && len(res.RawStructuredContent) > 0:
		out.StructuredContentJson = res.RawStructuredContent
	case asJSON:
		// A result made here (a cut one) has no text of its own.
		if b, err := json.Marshal(m); err == nil {
			out.StructuredContentJson = b
		}
	default:
		if st, err := structpb.NewStruct(m); err == nil {
			out.StructuredContent = st
		}
	}
	return out
}

func contentToProto(c mcp.Content) *toolmeshv1.Content {
	switch v := c.(type) {
	case mcp.TextContent:
		return &toolmeshv1.Content{Type: "text", Text: proto.String(v.Text)}
	case *mcp.TextContent:
		return &toolmeshv1.Content{Type: "text", Text: proto.String(v.Text)}
	case mcp.ImageContent:
		return binaryContent("image", v.Data, v.MIMEType)
	case *mcp.ImageContent:
		return binaryContent("image", v.Data, v.MIMEType)
	case mcp.AudioContent:
		return binaryContent("audio", v.Data, v.MIMEType)
	case *mcp.AudioContent:
		return binaryContent("audio", v.Data, v.MIMEType)
	case mcp.ResourceLink:
		return resourceLink(&v)
	case *mcp.ResourceLink:
		return resourceLink(v)
	case mcp.EmbeddedResource:
		return resourceContent(v.Resource)
	case *mcp.EmbeddedResource:
		return resourceContent(v.Resource)
	}
	return nil
}

// optional leaves empty strings unset, so JSON clients do not see "mime_type": "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func resourceLink(v *mcp.ResourceLink) *toolmeshv1.Content {
	return &toolmeshv1.Content{Type: "resource_link", Uri: optional(v.URI), Name: optional(v.Name), MimeType: optional(v.MIMEType), Text: optional(v.Description)}
}

func binaryContent(typ, data, mime string) *toolmeshv1.Content {
	c := &toolmeshv1.Content{Type: typ, MimeType: optional(mime)}
	if b, err := base64.StdEncoding.DecodeString(data); err == nil {
		c.Data = b
	}
	return c
}

func resourceContent(r mcp.ResourceContents) *toolmeshv1.Content {
	switch v := r.(type) {
	case mcp.TextResourceContents:
		return &toolmeshv1.Content{Type: "resource", Uri: optional(v.URI), MimeType: optional(v.MIMEType), Text: proto.String(v.Text)}
	case *mcp.TextResourceContents:
		return &toolmeshv1.Content{Type: "resource", Uri: optional(v.URI), MimeType: optional(v.MIMEType), Text: proto.String(v.Text)}
	case mcp.BlobResourceContents:
		c := binaryContent("resource", v.Blob, v.MIMEType)
		c.Uri = optional(v.URI)
		return c
	case *mcp.BlobResourceContents:
		c := binaryContent("resource", v.Blob, v.MIMEType)
		c.Uri = optional(v.URI)
		return c
	}
	return &toolmeshv1.Content{Type: "resource"}
}
