package mcpface

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
)

// A client's notifications/cancelled, by protocol era.
//
// mcp-go's server keys a call in flight by its session id and request id, and cancels the call a
// notifications/cancelled of the same session names. A call of protocol 2026-07-28 has no
// session (mcp-go gives each request an ephemeral one with id ""), so it was keyed by its request
// id alone: any client's notification naming that id, another token's included, cancelled it.
// Request ids collide all the time (every client counts from 0 or 1), so two clients cancelled
// each other's calls without meaning to. The 2026-07-28 spec has no use for the notification over
// streamable HTTP: closing the response stream is the cancellation, and a server need not expect
// anything else. So the face answers such a notification as mcp-go answers one it accepts (202,
// no body) and drops it; the call it named runs on until its own client closes its response.
//
// A 2025-era client's notification names its session (Mcp-Session-Id, random and unguessable)
// and cancels only that session's call, as mcp-go does: the face also cancels the session's call
// on the short path (shortcall.go), which mcp-go does not know of. The legacy SSE transport's
// sessions are bound to the token that opened their stream, and keyed likewise.

// cancelledMethod is how a notifications/cancelled names its method: a body without it is none.
var cancelledMethod = []byte(`"` + string(mcp.MethodNotificationCancelled) + `"`)

// dropCancelled answers r, a POST with body, itself if it is a notifications/cancelled mcp-go
// would take as one of protocol 2026-07-28, and reports whether it did. One mcp-go would refuse
// (headers or _meta that do not agree, a bad JSON-RPC version) goes to mcp-go, which writes its
// error and cancels nothing; one of the 2025 era goes to mcp-go, which cancels by session.
func (f *Face) dropCancelled(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if !bytes.Contains(body, cancelledMethod) {
		return false
	}
	// The fields mcp-go reads, decoded as it decodes them: where this fails, mcp-go fails too
	// before it cancels anything.
	var n struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"` // null is no id to mcp-go: a notification
		Method  string `json:"method"`
		Params  struct {
			Meta *mcp.Meta `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &n) != nil || n.Method != string(mcp.MethodNotificationCancelled) || n.ID != nil {
		return false
	}
	meta, header := n.Params.Meta.ProtocolVersion(), r.Header.Get(mcp.HeaderProtocolVersion)
	if !mcp.IsModernProtocol(meta) && !mcp.IsModernProtocol(header) {
		return false
	}
	// mcp-go's checks before it handles a 2026-07-28 message (streamable_http.go handlePost,
	// validateModernRequest; HandleMessage's JSON-RPC version).
	if !jsonContent(r.Header.Get("Content-Type")) || r.Header.Get(mcp.HeaderLastEventID) != "" ||
		header == "" || meta != header || !mcp.IsValidProtocolVersion(meta) || n.JSONRPC != mcp.JSONRPC_VERSION {
		return false
	}
	f.log.Debug("mcp: dropped a notifications/cancelled of protocol 2026-07-28: a call is cancelled by closing its response",
		"path", r.URL.Path, "remote", r.RemoteAddr)
	w.WriteHeader(http.StatusAccepted)
	return true
}

// inflightKey is how mcp-go keys a call in flight for the client's notifications/cancelled.
func inflightKey(session string, id any) string { return fmt.Sprintf("%s:%v", session, id) }

// cancelled cancels the short path's call that a 2025-era client's notifications/cancelled in
// body names, as mcp-go does for the calls it runs; mcp-go gets the notification as well.
func (v *view) cancelled(r *http.Request, body []byte) {
	if !bytes.Contains(body, cancelledMethod) {
		return
	}
	var n struct {
		Method string `json:"method"`
		Params struct {
			RequestID any `json:"requestId"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &n) != nil || n.Method != string(mcp.MethodNotificationCancelled) || n.Params.RequestID == nil {
		return
	}
	if c, ok := v.cancels.LoadAndDelete(inflightKey(r.Header.Get(mcp.HeaderSessionID), n.Params.RequestID)); ok {
		c.(context.CancelFunc)()
	}
}
