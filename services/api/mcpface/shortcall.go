package mcpface

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// The short path for tools/call.
//
// A tools/call through mcp-go's streamable HTTP server cost 33-89 µs of CPU around the face's
// own 1 µs (bench/NOTES.md, issue 28): mcp-go decodes the body five or six times (the envelope,
// the protocol era, _meta with the client's capabilities re-encoded and decoded again, the
// standard headers, the call's params), decodes the tool's input schema for x-mcp-header
// parameters on every call, and starts a goroutine with channels per POST to forward
// notifications. The short path answers a plain tools/call on the catalog and server views
// itself: one decode of the envelope (the name, _meta and the arguments as text), the checks
// mcp-go makes of that request in its protocol era, the view's handler for the tool made once
// per catalog behind the same policy filter, the telemetry the hooks give, and the JSON mcp-go
// would write.
//
// It answers only what it knows it answers as mcp-go would. Everything else goes to mcp-go
// untouched, with its body put back: a batch, a notification or a response; a field it does not
// know (a task, multi round-trip input); a progress token (progress goes out as SSE
// notifications on the call's response); a tool with x-mcp-header parameters; a body or header
// that fails any of mcp-go's checks (mcp-go writes that error); a 2025-era request without the
// protocol version header, with a session id of the wrong form, or whose session mcp-go has not
// seen lately (sessionClock).
//
// What it does differently: a notification mcp-go queued for a 2025-era session while the call
// ran (tools/list_changed) is not written into the call's response, which mcp-go would have
// turned into an SSE stream for it; it waits for the session's GET stream or its next request
// that mcp-go answers. (A 2026-07-28 call is cancelled by closing its response, here and through
// mcp-go alike: see cancel.go.)

// callTarget is a tool of a view as the short path calls it.
type callTarget struct {
	tool    mcp.Tool // as the view serves it; the policy filter reads its id
	handler server.ToolHandlerFunc
	// paramHeaders: the input schema may have x-mcp-header annotations, whose Mcp-Param-*
	// headers mcp-go checks against the arguments of a 2026-07-28 call; those go to mcp-go.
	paramHeaders bool
}

// callTargets are the view's tools by name, made once per change of the catalog.
func callTargets(tools []server.ServerTool) map[string]callTarget {
	m := make(map[string]callTarget, len(tools))
	for _, st := range tools {
		m[st.Tool.Name] = callTarget{tool: st.Tool, handler: st.Handler,
			paramHeaders: bytes.Contains(st.Tool.RawInputSchema, []byte("x-mcp-header"))}
	}
	return m
}

// callEnvelope is a tools/call request as the short path reads it. It is decoded refusing
// fields it does not name, so that a request with anything more (a result or an error, a task,
// multi round-trip input) goes to mcp-go.
type callEnvelope struct {
	JSONRPC string      `json:"jsonrpc"`
	ID      any         `json:"id"`
	Method  string      `json:"method"`
	Params  *callParams `json:"params"`
}

type callParams struct {
	Name      string                     `json:"name"`
	Arguments json.RawMessage            `json:"arguments"`
	Meta      map[string]json.RawMessage `json:"_meta"` // by key, as mcp-go's Meta holds it
}

// callMeta is what the short path reads of a call's params._meta.
type callMeta struct {
	version string         // io.modelcontextprotocol/protocolVersion
	caps    bool           // io.modelcontextprotocol/clientCapabilities is there and well formed
	trace   map[string]any // traceparent, tracestate and baggage, when traceparent is there
}

// traceKeys are the _meta keys the meta propagator reads.
var traceKeys = []string{"traceparent", "tracestate", "baggage"}

// readMeta reads the fields of a call's _meta; false when the call is not one for the short
// path (a progress token, or a value of the wrong type where mcp-go would read it).
func readMeta(fields map[string]json.RawMessage) (callMeta, bool) {
	var m callMeta
	if _, ok := fields["progressToken"]; ok {
		return m, false
	}
	if v, ok := fields[mcp.MetaKeyProtocolVersion]; ok && json.Unmarshal(v, &m.version) != nil {
		return m, false
	}
	if v, ok := fields[mcp.MetaKeyClientCapabilities]; ok && string(v) != "null" {
		// "{}" (what mcp-go's client sends) needs no decoding to know it is well formed.
		if string(v) != "{}" {
			var caps mcp.ClientCapabilities
			if json.Unmarshal(v, &caps) != nil {
				return m, false
			}
		}
		m.caps = true
	}
	if _, ok := fields["traceparent"]; ok {
		m.trace = make(map[string]any, len(traceKeys))
		for _, k := range traceKeys {
			if v, ok := fields[k]; ok {
				var x any
				if json.Unmarshal(v, &x) != nil {
					return m, false
				}
				m.trace[k] = x
			}
		}
	}
	return m, true
}

// callError is a JSON-RPC error of a call, as mcp-go's hooks and the span see one.
type callError struct {
	code int
	msg  string
}

func (e *callError) Error() string { return "request error: " + e.msg }

func (e *callError) ToJSONRPCError() mcp.JSONRPCError {
	return mcp.JSONRPCError{JSONRPC: mcp.JSONRPC_VERSION, Error: mcp.NewJSONRPCErrorDetails(e.code, e.msg, nil)}
}

// shortCall answers r, a POST to v with body, if it is a tools/call the short path answers as
// mcp-go would (see above), and reports whether it did; when it did not, it wrote nothing.
func (f *Face) shortCall(v *view, w http.ResponseWriter, r *http.Request, body []byte) bool {
	c, ok := f.readShortCall(v, r, body)
	if ok {
		f.answerShortCall(v, w, r, c)
	}
	return ok
}

// shortRequest is a tools/call the short path answers.
type shortRequest struct {
	id      any // a string or a number (float64), as mcp-go decodes it
	params  *callParams
	meta    callMeta
	modern  bool   // protocol 2026-07-28 or later
	session string // the 2025-era session id
	version string // the protocol version on the span
	target  callTarget
	found   bool // the view has a tool of the name
}

// readShortCall reads a request for the short path: false when it is not one (see above).
func (f *Face) readShortCall(v *view, r *http.Request, body []byte) (shortRequest, bool) {
	var c shortRequest
	if f.cfg.noShortPath || v.kind == viewSearch || !bytes.Contains(body, []byte(`"tools/call"`)) || !jsonContent(r.Header.Get("Content-Type")) {
		return c, false
	}
	var env callEnvelope
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(&env) != nil || len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) != 0 {
		return c, false
	}
	if env.JSONRPC != mcp.JSONRPC_VERSION || env.Method != string(mcp.MethodToolsCall) || env.Params == nil {
		return c, false
	}
	switch env.ID.(type) {
	case string, float64:
	default:
		return c, false // none: a notification; an object or a list: mcp-go's answer
	}
	c.id, c.params = env.ID, env.Params
	var ok bool
	if c.meta, ok = readMeta(env.Params.Meta); !ok {
		return c, false
	}
	header := r.Header.Get(mcp.HeaderProtocolVersion)
	c.modern = mcp.IsModernProtocol(c.meta.version) || mcp.IsModernProtocol(header)
	c.version = c.meta.version
	if c.modern {
		if !modernCall(r.Header, header, c.meta, c.params.Name) {
			return c, false
		}
	} else {
		c.session = r.Header.Get(mcp.HeaderSessionID)
		if !f.legacyCall(v, header, c.session) {
			return c, false
		}
		if c.version == "" {
			c.version = header
		}
	}
	if calls := v.calls.Load(); calls != nil {
		c.target, c.found = (*calls)[c.params.Name]
	}
	return c, !(c.modern && c.found && c.target.paramHeaders)
}

// answerShortCall calls the tool of c and writes the answer mcp-go would write, with the
// telemetry its hooks would give.
func (f *Face) answerShortCall(v *view, w http.ResponseWriter, r *http.Request, c shortRequest) {
	// mcp-go reads the trace context in _meta first, so that the request's span is the client's
	// span's child.
	ctx := r.Context()
	if c.meta.trace != nil {
		ctx = metaPropagator{tel: f.ins.tel}.ExtractMeta(ctx, &mcp.Meta{AdditionalFields: c.meta.trace})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !c.modern {
		key := inflightKey(c.session, c.id)
		v.cancels.Store(key, cancel)
		defer v.cancels.Delete(key)
	}
	req := mcp.CallToolRequest{Header: r.Header}
	req.Method = string(mcp.MethodToolsCall)
	req.Params.Name = c.params.Name
	req.Params.RawArguments = c.params.Arguments
	f.ins.start(ctx, v.path, c.id, mcp.MethodToolsCall, c.params.Name, c.session, c.version)
	res, cerr := f.callShort(ctx, c.target, c.found, req)
	var msg any
	status := http.StatusOK
	if cerr != nil {
		f.ins.end(ctx, nil, cerr)
		e := cerr.ToJSONRPCError()
		e.ID = mcp.NewRequestId(c.id)
		msg = e
		if c.modern && cerr.code == mcp.INVALID_PARAMS {
			// Protocol 2026-07-28 maps JSON-RPC errors onto HTTP statuses: invalid params is
			// 400, an internal error 200.
			status = http.StatusBadRequest
		}
	} else {
		f.ins.end(ctx, res, nil)
		msg = v.response(c, res)
	}
	f.shortCalls.Add(1)
	if r.Context().Err() != nil {
		return // the client has gone: mcp-go writes nothing either
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(msg); err != nil {
		f.log.Debug("mcp: writing a tools/call response", "err", err)
	}
}

// response is the JSON-RPC response carrying res, as mcp-go writes it: mcp-go marks a
// 2026-07-28 result complete and names the server in its _meta. mcp-go encodes a result through
// a map of its fields, which costs more than the rest of the short path; the result the face's
// handler makes (no _meta, no multi round-trip fields) is written from a struct of the same
// fields instead.
func (v *view) response(c shortRequest, res *mcp.CallToolResult) any {
	if res.Meta != nil || res.ResultType != "" || len(res.InputRequests) > 0 || res.RequestState != "" {
		if c.modern {
			if res.GetResultType() == "" {
				res.SetResultType(mcp.ResultTypeComplete)
			}
			if m := res.EnsureResultMeta(); m.ServerInfo() == nil {
				m.SetServerInfo(v.impl)
			}
		}
		return mcp.NewJSONRPCResultResponse(mcp.NewRequestId(c.id), res)
	}
	out := shortResult{Content: res.Content, IsError: res.IsError}
	if out.Content == nil {
		out.Content = []mcp.Content{}
	}
	switch {
	case len(res.RawStructuredContent) > 0:
		out.StructuredContent = res.RawStructuredContent
	case res.StructuredContent != nil:
		out.StructuredContent = res.StructuredContent
	}
	if c.modern {
		out.Meta = &v.serverMeta
		out.ResultType = mcp.ResultTypeComplete
	}
	return shortResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: c.id, Result: out}
}

// shortResponse and shortResult are the JSON of mcp-go's JSONRPCResponse and CallToolResult.
type shortResponse struct {
	JSONRPC string      `json:"jsonrpc"`
	ID      any         `json:"id"`
	Result  shortResult `json:"result"`
}

type shortResult struct {
	Meta              *resultMeta    `json:"_meta,omitempty"`
	ResultType        mcp.ResultType `json:"resultType,omitempty"`
	Content           []mcp.Content  `json:"content"`
	StructuredContent any            `json:"structuredContent,omitempty"`
	IsError           bool           `json:"isError,omitempty"`
}

// resultMeta is the _meta mcp-go gives a 2026-07-28 result.
type resultMeta struct {
	ServerInfo mcp.Implementation `json:"io.modelcontextprotocol/serverInfo"`
}

// callShort calls target (found: the view has a tool of the name) as mcp-go calls a tool: a
// tool the view does not have, or the caller may not see, is not found.
func (f *Face) callShort(ctx context.Context, target callTarget, found bool, req mcp.CallToolRequest) (*mcp.CallToolResult, *callError) {
	if !found || !f.mayUse(ctx, target.tool) {
		return nil, &callError{code: mcp.INVALID_PARAMS, msg: fmt.Sprintf("tool '%s' not found: %v", req.Params.Name, server.ErrToolNotFound)}
	}
	res, err := target.handler(ctx, req)
	switch {
	case err != nil:
		return nil, &callError{code: mcp.INTERNAL_ERROR, msg: err.Error()}
	case res == nil:
		return nil, &callError{code: mcp.INTERNAL_ERROR, msg: fmt.Sprintf("tool '%s' handler returned no result", req.Params.Name)}
	}
	return res, nil
}

// jsonContent reports whether a Content-Type is JSON, as mcp-go decides it.
func jsonContent(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// modernCall reports whether a 2026-07-28 call passes mcp-go's checks of its headers: the
// protocol version in the header and in _meta the same and known, the client's capabilities in
// _meta, no Last-Event-ID, and Mcp-Method and Mcp-Name saying what the body says.
func modernCall(h http.Header, version string, meta callMeta, name string) bool {
	if h.Get(mcp.HeaderLastEventID) != "" || version == "" || meta.version != version ||
		!mcp.IsValidProtocolVersion(version) || !meta.caps || h.Get(mcp.HeaderMethod) != string(mcp.MethodToolsCall) {
		return false
	}
	hn := h.Get(mcp.HeaderName)
	if hn == "" {
		return false
	}
	decoded, ok := mcp.DecodeHeaderValue(hn)
	return ok && decoded == name
}

// legacyCall reports whether a 2025-era call goes on the short path: its protocol version header
// one mcp-go knows (without one, mcp-go names the version the session negotiated on its span,
// which only mcp-go knows), its session id of the form the face hands out, and its session seen
// by mcp-go lately (sessionClock).
func (f *Face) legacyCall(v *view, version, session string) bool {
	if version == "" || !mcp.IsValidProtocolVersion(version) {
		return false
	}
	if _, err := (statelessIDs{}).Validate(session); err != nil {
		return false
	}
	return v.seen.fresh(session, time.Now())
}

// sessionClock is when mcp-go last saw each 2025-era session of a view. mcp-go forgets a
// session's state (its registration for notifications, a GET stream's too) Config.SessionIdle
// after it last saw the session, and it does not see the calls the short path answers: a session
// it has not seen for a quarter of that has its next call answered by mcp-go, so that a session
// in use never looks idle to it. Bounded: past max sessions the stale ones, then any, are
// forgotten (their next call goes to mcp-go).
type sessionClock struct {
	mu     sync.Mutex
	seen   map[string]time.Time
	max    int
	within time.Duration
}

func newSessionClock(max int, within time.Duration) *sessionClock {
	return &sessionClock{seen: map[string]time.Time{}, max: max, within: within}
}

// hooks makes c see every request mcp-go answers for a session: mcp-go has marked the session
// used before its hooks run.
func (c *sessionClock) hooks(h *server.Hooks) {
	h.AddBeforeAny(func(ctx context.Context, _ any, _ mcp.MCPMethod, _ any) {
		if s := server.ClientSessionFromContext(ctx); s != nil && s.SessionID() != "" {
			c.saw(s.SessionID(), time.Now())
		}
	})
}

func (c *sessionClock) saw(id string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[id]; !ok && len(c.seen) >= c.max {
		for k, t := range c.seen {
			if now.Sub(t) >= c.within {
				delete(c.seen, k)
			}
		}
		for k := range c.seen {
			if len(c.seen) < c.max*3/4 {
				break
			}
			delete(c.seen, k)
		}
	}
	c.seen[id] = now
}

func (c *sessionClock) fresh(id string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.seen[id]
	return ok && now.Sub(t) < c.within
}
