package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/oauth"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// A dialer is how the executor reaches one configured server, as a Transport
// is in the MCP Go SDK: built once from the server's config, it makes a fresh
// transport for each connection (open), and the session (session.go) does the
// rest: start, handshake, tools/list, and the connection's life.
type dialer struct {
	srv            mcpconfig.Server
	connectTimeout time.Duration
	maxLine        int
	keepHead       int // the largest result limit of the server's tools
	log            *slog.Logger

	// httpTransport is shared by every connection of this server, so the
	// pool survives reconnects; nil for stdio.
	httpTransport *http.Transport
	httpClient    *http.Client
	// auth gives the server's OAuth token (internal/oauth); nil for stdio. A server without
	// auth: oauth sends none until someone signs in to it after it asked for it with a 401.
	auth *oauth.Source
}

// newDialer sizes the HTTP pool for concurrency in-flight calls.
func newDialer(srv mcpconfig.Server, cfg Config, concurrency int, log *slog.Logger, tel *telemetry.Service) *dialer {
	keep := largestResultLimit(srv, cfg)
	d := &dialer{srv: srv, connectTimeout: cfg.ConnectTimeout, maxLine: max(lineLimit(cfg), keep), keepHead: keep,
		log: slog.New(canceledQuiet{log.Handler()})}
	if srv.Transport != mcpconfig.TransportStdio {
		// mcp-go's default client keeps 2 idle connections per host; under
		// load that opens a new TCP connection per call. Size the pool for
		// the concurrency limit plus the long-lived streams.
		d.httpTransport = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          0,
			MaxIdleConnsPerHost:   concurrency + 4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   cfg.ConnectTimeout,
			ExpectContinueTimeout: time.Second,
		}
		traced := tracedWithinSpans(tel, d.httpTransport)
		// The authorization server is reached on its own client: its requests are not the MCP
		// server's (no result limits, no MCP spans), and they carry no tokens of the server.
		d.auth = oauth.NewSource(srv, cfg.OAuthStore(), &http.Client{Timeout: 30 * time.Second, Transport: d.httpTransport})
		d.httpClient = &http.Client{Transport: limitBodies{next: &oauth.Transport{Source: d.auth, Next: traced}}}
	}
	return d
}

// withSignIn marks st, a server that is not connected, as waiting for a person to sign in when
// its last request failed for want of tokens, and says only that as its error (not how mcp-go
// wrapped it).
func withSignIn(st *toolmeshv1.Server, auth *oauth.Source) *toolmeshv1.Server {
	if auth == nil || st.GetState() == toolmeshv1.ServerState_SERVER_STATE_READY || st.GetState() == toolmeshv1.ServerState_SERVER_STATE_DEGRADED {
		return st
	}
	if n := auth.SignInNeeded(); n != nil {
		st.NeedsSignIn = true
		st.LastError = n.Error()
	}
	return st
}

// signInError is the *oauth.NeedsSignIn inside err, so a server's state says what to do
// ("needs sign-in: toolmesh login SERVER") rather than how mcp-go wrapped it; other errors are
// kept.
func signInError(err error) error {
	var n *oauth.NeedsSignIn
	if errors.As(err, &n) {
		return n
	}
	return err
}

// link is the transport of one connection, built but not started.
type link struct {
	tr    transport.Interface
	hooks *hooks
	proc  *childProcess // stdio only: the server process, already running
	// lineCapped: the transport reads its event stream with the context
	// given to Start; see startContext.
	lineCapped bool
}

// startContext is the context to start the link's transport with: the
// legacy SSE event stream is read through a lineCap (limitBodies finds it
// in the context).
func (l *link) startContext(ctx context.Context) context.Context {
	if l.lineCapped {
		return context.WithValue(ctx, lineCapKey{}, l.hooks)
	}
	return ctx
}

// open builds the transport of a new connection; for stdio it starts the
// server process. legacyHTTP: a streamable HTTP server spoke a legacy
// protocol version last time (see session.connect).
func (d *dialer) open(legacyHTTP bool) (*link, error) {
	switch d.srv.Transport {
	case mcpconfig.TransportSSE:
		sse, err := transport.NewSSE(d.srv.URL,
			transport.WithHTTPClient(d.httpClient),
			transport.WithHeaders(d.srv.Headers),
			transport.WithEndpointTimeout(d.connectTimeout),
			// Calls carry their own deadline; mcp-go's 60 s default would cut longer ones.
			transport.WithResponseTimeout(24*time.Hour),
			transport.WithSSELogger(d.log),
		)
		if err != nil {
			return nil, fmt.Errorf("sse transport: %w", err)
		}
		h := &hooks{cancelOverHTTP: true, notify: sse.SendNotification, maxLine: d.maxLine, keepHead: d.keepHead}
		return &link{tr: &sseTransport{SSE: sse, h: h}, hooks: h, lineCapped: true}, nil
	case mcpconfig.TransportStreamableHTTP:
		opts := []transport.StreamableHTTPCOption{
			transport.WithHTTPBasicClient(d.httpClient),
			transport.WithHTTPHeaders(d.srv.Headers),
			transport.WithHTTPLogger(d.log),
		}
		if pinned := d.srv.ProtocolVersion; legacyHTTP || (pinned != "" && !mcp.IsModernProtocol(pinned)) {
			// A legacy server sends notifications on the standalone GET stream only.
			opts = append(opts, transport.WithContinuousListening())
		}
		st, err := transport.NewStreamableHTTP(d.srv.URL, opts...)
		if err != nil {
			return nil, fmt.Errorf("streamable http transport: %w", err)
		}
		h := &hooks{cancelOverHTTP: true, onlyLegacyCancel: true, notify: st.SendNotification}
		return &link{tr: &streamableTransport{StreamableHTTP: st, h: h}, hooks: h}, nil
	case mcpconfig.TransportStdio:
		p, err := startChild(d.srv)
		if err != nil {
			return nil, err
		}
		h := &hooks{maxLine: d.maxLine, keepHead: d.keepHead}
		stdio := transport.NewIO(newLineCap(p.stdout, h.maxLine, h), p.stdin, nil)
		return &link{tr: &stdioTransport{Stdio: stdio, h: h}, hooks: h, proc: p}, nil
	}
	return nil, fmt.Errorf("unknown transport %q", d.srv.Transport)
}

// close lets the idle HTTP connections go once no connection is left.
func (d *dialer) close() {
	if d.httpTransport != nil {
		d.httpTransport.CloseIdleConnections()
	}
}

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

// rawPages collects the raw results of one listing's tools/list requests
// (sent with a context made by withRawPages), and stops the listing at its
// limits: a page that takes it past them is refused before mcp-go decodes it.
type rawPages struct {
	maxTools, maxBytes int

	mu    sync.Mutex
	pages []json.RawMessage
	tools int // in the pages so far
	bytes int
}

func withRawPages(ctx context.Context, maxTools, maxBytes int) (context.Context, *rawPages) {
	p := &rawPages{maxTools: maxTools, maxBytes: maxBytes}
	return context.WithValue(ctx, rawPagesKey{}, p), p
}

// add records one page, or says which limit it breaks.
func (p *rawPages) add(page json.RawMessage) error {
	// Counted without decoding: a page of 50,000 tools costs no more here
	// than reading it. A page of another shape is mcp-go's to refuse, with
	// its own words.
	var v struct {
		Tools []struct{} `json:"tools"`
	}
	_ = json.Unmarshal(page, &v)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tools += len(v.Tools)
	p.bytes += len(page)
	switch {
	case p.tools > p.maxTools:
		return &listLimitError{tools: p.tools, pages: len(p.pages) + 1, maxTools: p.maxTools}
	case p.bytes > p.maxBytes:
		return &listLimitError{bytes: int64(p.bytes), maxBytes: p.maxBytes}
	}
	p.pages = append(p.pages, page)
	return nil
}

// remaining is how many bytes the listing's next page may have.
func (p *rawPages) remaining() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.maxBytes-p.bytes, 1)
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
	// maxLine, keepHead and oversized: see lineCap; oversized holds the
	// heads (keepHead bytes) of the answers it replaced, by their JSON id.
	maxLine   int
	keepHead  int
	oversized droppedHeads
}

func (h *hooks) after(ctx context.Context, req transport.JSONRPCRequest, resp *transport.JSONRPCResponse, err error) (*transport.JSONRPCResponse, error) {
	if r := rpcFrom(ctx); r != nil {
		r.answered(req, resp)
	}
	if resp != nil && resp.Error != nil && resp.Error.Message == oversizedMessage {
		if id, err := json.Marshal(req.ID); err == nil {
			if head, ok := h.oversized.LoadAndDelete(string(id)); ok {
				if p, ok := ctx.Value(answerProbeKey{}).(*answerProbe); ok {
					p.tripped.Store(true)
					p.cut.Store(int64(h.maxLine))
					p.setHead(head[:min(len(head), int(p.limit))])
				}
			}
		}
	}
	switch req.Method {
	case string(mcp.MethodToolsList):
		if err == nil && resp != nil && resp.Error == nil {
			if p, ok := ctx.Value(rawPagesKey{}).(*rawPages); ok {
				if err := p.add(resp.Result); err != nil {
					return nil, err
				}
			}
			if slim, ok := slimToolsPage(resp.Result); ok {
				out := *resp
				out.Result = slim
				return &out, nil
			}
		}
	case string(mcp.MethodToolsCall), string(mcp.MethodSubscriptionsListen):
		// A listen stream we stop is cancelled the same way, or an SSE
		// server keeps its handler waiting forever.
		if err != nil && ctxEnded(ctx) && h.cancelOverHTTP && !(h.onlyLegacyCancel && h.modern.Load()) {
			h.sendCancelled(ctx, req.ID)
		}
	}
	return resp, err
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

func (t *sseTransport) Start(ctx context.Context) error {
	return signInError(t.SSE.Start(ctx))
}

func (t *sseTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.SSE.SendRequest(ctx, req)
	err = signInError(err)
	if err == nil {
		err = checkResponse(req, resp)
	}
	return t.h.after(ctx, req, resp, err)
}

type streamableTransport struct {
	*transport.StreamableHTTP
	h *hooks
}

func (t *streamableTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.StreamableHTTP.SendRequest(ctx, req)
	err = signInError(err)
	if err == nil {
		err = checkResponse(req, resp)
	}
	return t.h.after(ctx, req, resp, err)
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
	return t.h.after(ctx, req, resp, err)
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

// canceledQuiet is the handler of the logger mcp-go's transports write to. A stream that ends
// because we cancelled it (a stop, a reconnect) is reported there as an ERROR with "context
// canceled"; it is routine, so it goes to DEBUG. Real stream failures are reported by the
// session (markBroken) in words an operator can act on.
type canceledQuiet struct{ next slog.Handler }

func (h canceledQuiet) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h canceledQuiet) Handle(ctx context.Context, r slog.Record) error {
	canceled := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, context.Canceled) {
			canceled = true
			return false
		}
		return true
	})
	if !canceled {
		return h.next.Handle(ctx, r)
	}
	if !h.next.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	q := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool { q.AddAttrs(a); return true })
	return h.next.Handle(ctx, q)
}

func (h canceledQuiet) WithAttrs(as []slog.Attr) slog.Handler {
	return canceledQuiet{h.next.WithAttrs(as)}
}
func (h canceledQuiet) WithGroup(name string) slog.Handler {
	return canceledQuiet{h.next.WithGroup(name)}
}
