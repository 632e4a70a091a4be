package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
//     mcp-go's client only does for non-HTTP transports;
//   - hand mcp-go a slimmed tools/list page (see slimToolsPage), so that it
//     does not re-read every tool's input schema on every tools/call;
//   - tell the request's span (telemetry.go) its JSON-RPC id and error code,
//     which only the wire shows.

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
	// maxLine and oversized: see lineCap; oversized holds the JSON ids of
	// the answers it replaced.
	maxLine   int
	oversized sync.Map
}

func (h *hooks) after(ctx context.Context, req transport.JSONRPCRequest, resp *transport.JSONRPCResponse, err error) *transport.JSONRPCResponse {
	if r := rpcFrom(ctx); r != nil {
		r.answered(req, resp)
	}
	if resp != nil && resp.Error != nil && resp.Error.Message == oversizedMessage {
		if id, err := json.Marshal(req.ID); err == nil {
			if _, ok := h.oversized.LoadAndDelete(string(id)); ok {
				if p, ok := ctx.Value(answerProbeKey{}).(*answerProbe); ok {
					p.tripped.Store(true)
					p.cut.Store(int64(h.maxLine))
				}
			}
		}
	}
	switch req.Method {
	case string(mcp.MethodToolsList):
		if err == nil && resp != nil && resp.Error == nil {
			if p, ok := ctx.Value(rawPagesKey{}).(*rawPages); ok {
				p.mu.Lock()
				p.pages = append(p.pages, resp.Result)
				p.mu.Unlock()
			}
			if slim, ok := slimToolsPage(resp.Result); ok {
				out := *resp
				out.Result = slim
				return &out
			}
		}
	case string(mcp.MethodToolsCall), string(mcp.MethodSubscriptionsListen):
		// A listen stream we stop is cancelled the same way, or an SSE
		// server keeps its handler waiting forever.
		if err != nil && ctxEnded(ctx) && h.cancelOverHTTP && !(h.onlyLegacyCancel && h.modern.Load()) {
			h.sendCancelled(ctx, req.ID)
		}
	}
	return resp
}

// slimSchema is the input schema mcp-go is given for a tool whose schema has no
// x-mcp-header annotation.
var slimSchema = json.RawMessage(`{"type":"object"}`)

// slimToolsPage returns a tools/list result in which every tool whose input
// schema cannot carry an x-mcp-header annotation has the input schema
// {"type":"object"}; tools that may carry one, and every other field, are left
// as they are. ok is false when nothing was replaced or the page is not the
// expected shape (mcp-go then gets the page unchanged).
//
// Why: on protocol 2026-07-28, mcp-go caches the listed tools and, on every
// tools/call, re-encodes and re-decodes the called tool's whole input schema
// to look for x-mcp-header parameters to mirror into Mcp-Param-* headers
// (SEP-2243); that was ~12 µs of CPU per call for a two-parameter tool, ~5%
// of a whole call through the executor. The cache is only used for that
// mirroring, and the executor's catalog and validation use the raw pages
// captured above, so a tool without annotations loses nothing; a tool with
// them keeps its full schema and mcp-go mirrors (and validates) them as before.
func slimToolsPage(result json.RawMessage) (json.RawMessage, bool) {
	var page map[string]json.RawMessage
	if json.Unmarshal(result, &page) != nil {
		return nil, false
	}
	var tools []map[string]json.RawMessage
	if json.Unmarshal(page["tools"], &tools) != nil {
		return nil, false
	}
	changed := false
	for _, t := range tools {
		in, ok := t["inputSchema"]
		if !ok || mayCarryHeaderAnnotation(in) || bytes.Equal(in, slimSchema) {
			continue
		}
		t["inputSchema"] = slimSchema
		changed = true
	}
	if !changed {
		return nil, false
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return nil, false
	}
	page["tools"] = b
	out, err := json.Marshal(page)
	if err != nil {
		return nil, false
	}
	return out, true
}

// mayCarryHeaderAnnotation is deliberately coarse: any mention of the keyword,
// or any \u escape that could spell it, keeps the schema as it is.
func mayCarryHeaderAnnotation(schema json.RawMessage) bool {
	return bytes.Contains(schema, []byte("x-mcp-header")) || bytes.Contains(schema, []byte(`\u`))
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

// checkResponse rejects an answer that is not a JSON-RPC response to req.
// mcp-go hands back whatever a streamable HTTP server put in the POST's body:
// one with another id would be taken as this call's result, and one with
// neither result nor error would fail later as a bare "unexpected end of
// JSON input" that does not say the server is at fault. SSE and stdio route
// answers by id, so there a wrong id never gets here (the call times out).
func checkResponse(req transport.JSONRPCRequest, resp *transport.JSONRPCResponse) error {
	switch {
	case resp == nil:
		return errors.New("malformed JSON-RPC response: no response")
	case resp.ID.Value() != req.ID.Value(): // int64, float64, string or nil: comparable
		return fmt.Errorf("malformed JSON-RPC response: id %v does not match request id %v", resp.ID.Value(), req.ID.Value())
	case resp.Error == nil && len(resp.Result) == 0:
		return errors.New("malformed JSON-RPC response: neither result nor error")
	}
	return nil
}

type sseTransport struct {
	*transport.SSE
	h *hooks
}

func (t *sseTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.SSE.SendRequest(ctx, req)
	if err == nil {
		err = checkResponse(req, resp)
	}
	return t.h.after(ctx, req, resp, err), err
}

type streamableTransport struct {
	*transport.StreamableHTTP
	h *hooks
}

func (t *streamableTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.StreamableHTTP.SendRequest(ctx, req)
	if err == nil {
		err = checkResponse(req, resp)
	}
	return t.h.after(ctx, req, resp, err), err
}

type stdioTransport struct {
	*transport.Stdio
	h *hooks
}

func (t *stdioTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.Stdio.SendRequest(ctx, req)
	if err == nil {
		err = checkResponse(req, resp)
	}
	return t.h.after(ctx, req, resp, err), err
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
