package executor

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// The wrappers below embed mcp-go's concrete transports, so every optional
// interface mcp-go's client probes for (HTTPConnection, BidirectionalInterface,
// SetConnectionLostHandler, RequiresLegacyProtocol, Stderr) is still promoted,
// and override SendRequest only, to
//   - capture the raw tools/list pages: mcp-go decodes inputSchema into a
//     struct that drops keywords it does not model (anyOf, $schema, ...), and
//     the catalog must carry the schema as the server declared it;
//   - send notifications/cancelled for a cancelled tools/call over HTTP, which
//     mcp-go's client only does for non-HTTP transports.

type rawPagesKey struct{}

// rawPages collects the raw results of the tools/list requests sent with a
// context made by withRawPages.
type rawPages struct {
	mu    sync.Mutex
	pages []json.RawMessage
}

func withRawPages(ctx context.Context) (context.Context, *rawPages) {
	p := &rawPages{}
	return context.WithValue(ctx, rawPagesKey{}, p), p
}

// hooks is the shared part of the transport wrappers.
type hooks struct {
	// cancelOverHTTP: send notifications/cancelled ourselves.
	cancelOverHTTP bool
	// onlyLegacyCancel: on 2026-07-28, ending the HTTP request is the
	// cancellation (streamable HTTP), so only legacy sessions need the notification.
	onlyLegacyCancel bool
	modern           atomic.Bool
	notify           func(context.Context, mcp.JSONRPCNotification) error
	wg               sync.WaitGroup
}

func (h *hooks) after(ctx context.Context, req transport.JSONRPCRequest, resp *transport.JSONRPCResponse, err error) {
	switch req.Method {
	case string(mcp.MethodToolsList):
		if err == nil && resp != nil && resp.Error == nil {
			if p, ok := ctx.Value(rawPagesKey{}).(*rawPages); ok {
				p.mu.Lock()
				p.pages = append(p.pages, resp.Result)
				p.mu.Unlock()
			}
		}
	case string(mcp.MethodToolsCall), string(mcp.MethodSubscriptionsListen):
		// A listen stream we stop is cancelled the same way, or an SSE
		// server keeps its handler waiting forever.
		if err != nil && ctxEnded(ctx) && h.cancelOverHTTP && !(h.onlyLegacyCancel && h.modern.Load()) {
			h.sendCancelled(ctx, req.ID)
		}
	}
}

// sendCancelled tells the server to stop working on request id, off the caller's path.
func (h *hooks) sendCancelled(ctx context.Context, id mcp.RequestId) {
	n := mcp.JSONRPCNotification{
		JSONRPC: mcp.JSONRPC_VERSION,
		Notification: mcp.Notification{
			Method: string(mcp.MethodNotificationCancelled),
			Params: mcp.NotificationParams{
				AdditionalFields: map[string]any{"requestId": id, "reason": "request cancelled by the client"},
			},
		},
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.notify(ctx, n)
	}()
}

type sseTransport struct {
	*transport.SSE
	h *hooks
}

func (t *sseTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.SSE.SendRequest(ctx, req)
	t.h.after(ctx, req, resp, err)
	return resp, err
}

type streamableTransport struct {
	*transport.StreamableHTTP
	h *hooks
}

func (t *streamableTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.StreamableHTTP.SendRequest(ctx, req)
	t.h.after(ctx, req, resp, err)
	return resp, err
}

type stdioTransport struct {
	*transport.Stdio
	h *hooks
}

func (t *stdioTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.Stdio.SendRequest(ctx, req)
	t.h.after(ctx, req, resp, err)
	return resp, err
}

// ctxEnded reports whether ctx is done or (nearly) past its deadline: mcp-go's
// SSE transport arms its own timer for the context's deadline and may return
// a moment before the context itself ends.
func ctxEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < 50*time.Millisecond
}
