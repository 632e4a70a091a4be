package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/attribute"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/buildinfo"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/oauth"
	"github.com/toolmesh/toolmesh/internal/redact"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// clientInfo is how toolmesh introduces itself to MCP servers: with the version every other
// report of the build gives, so a server's logs name the build that called it.
var clientInfo = mcp.Implementation{Name: "toolmesh", Version: buildinfo.Version()}

// Reconnect backoff: capped exponential with full jitter.
var (
	backoffMin = 200 * time.Millisecond
	backoffMax = 30 * time.Second
)

// session is the one long-lived MCP client of one configured server. Its run
// loop owns the connection: it connects, watches the connection, and
// reconnects with backoff when it breaks. Calls use whatever connection is
// current and never open one themselves.
type session struct {
	name     string
	srv      mcpconfig.Server
	cfg      Config
	log      *slog.Logger
	cat      *catalog
	dial     *dialer
	endpoint string
	timeout  time.Duration
	sem      chan struct{}

	ins          *instruments
	netTransport string               // network.transport: tcp, or pipe for stdio
	peerAttrs    []attribute.KeyValue // carried by every span to this server
	ops          sync.Map             // opKey → metric.RecordOption, see opAttrs
	opsLen       atomic.Int64         // entries of ops, about

	// legacyHTTP: a streamable HTTP server spoke a legacy protocol version
	// last time. Only run's goroutine uses it.
	legacyHTTP bool

	cur atomic.Pointer[conn] // the READY connection, nil otherwise; changed under mu

	mu      sync.Mutex
	state   toolmeshv1.ServerState // READY while connected, even when degraded (see healthLocked)
	lastErr string
	// Why the READY connection is degraded: its notification stream is down,
	// or its last tools/list failed or broke a limit.
	streamErr, listErr string
	protocol           string
	info               mcp.Implementation
	toolCount          int
	refused            []*toolmeshv1.RefusedTool // immutable once set
	connectedAt        time.Time
	reconnecting       bool          // an expired session is being re-initialized: calls wait
	changed            chan struct{} // closed and replaced on every state change

	// A reload retires the session of a server it removes or changes: the session then
	// publishes no more tools (pubMu orders that with publish), takes no more calls, and
	// closes once the calls it has are done (inMu guards the count).
	pubMu    sync.Mutex
	inMu     sync.Mutex
	retired  bool // written under both pubMu and inMu
	inflight int
	idle     chan struct{} // closed when a retired session's last call leaves
	stop     context.CancelFunc

	// pins judge each listing (pins.go); listed is the last one, for judging again when a pin
	// changes (under pubMu).
	pins   *pinBook
	listed []*tool

	progress progressRoutes
}

func newSession(name string, srv mcpconfig.Server, cfg Config, log *slog.Logger, cat *catalog, ins *instruments) *session {
	log = log.With("server", name, "transport", string(srv.Transport))
	s := &session{
		name:     name,
		srv:      srv,
		cfg:      cfg,
		log:      log,
		cat:      cat,
		endpoint: endpointOf(srv),
		timeout:  cfg.CallTimeout,
		state:    toolmeshv1.ServerState_SERVER_STATE_CONNECTING,
		changed:  make(chan struct{}),
		ins:      ins,
	}
	s.netTransport, s.peerAttrs = peerAttrs(name, srv)
	if srv.Timeout > 0 {
		s.timeout = srv.Timeout
	}
	limit := cfg.MaxConcurrency
	if srv.MaxConcurrency > 0 {
		limit = srv.MaxConcurrency
	}
	s.sem = make(chan struct{}, limit)
	s.dial = newDialer(srv, cfg, limit, log, ins.tel)
	return s
}

// conn is one connection (one initialized mcp-go client) of a session. What
// it starts (the listen stream, the refresher, the stdio watcher) runs in wg
// and ends with ctx.
type conn struct {
	client    *client.Client
	hooks     *hooks
	proc      *childProcess // stdio only
	ctx       context.Context
	cancel    context.CancelFunc
	protocol  string
	sessionID string // mcp.session.id: the Mcp-Session-Id, or the SSE sessionId; "" for none
	info      mcp.Implementation
	listen    bool                   // the server announced tools.listChanged
	filter    mcp.SubscriptionFilter // what the notification stream asks for (2026-07-28)
	refresh   chan struct{}          // cap 1: a tools/list refresh is wanted

	broken    chan struct{}
	breakOnce sync.Once
	breakErr  error
	expired   bool
	closeOnce sync.Once
	wg        sync.WaitGroup
}

func (c *conn) isBroken() bool {
	select {
	case <-c.broken:
		return true
	default:
		return false
	}
}

func (c *conn) requestRefresh() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

// close ends the connection and waits for everything it started: the
// client's transport, our watcher goroutines, and the child process.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		// Cancel first and let the cancellations (of the listen stream, of
		// calls) reach the server while the transport is still open.
		c.cancel()
		c.wg.Wait()
		if c.hooks != nil {
			c.hooks.wg.Wait()
		}
		if c.client != nil {
			_ = c.client.Close()
		}
		if c.proc != nil {
			c.proc.stop()
		}
	})
}

// markBroken records that cn no longer works; the run loop reconnects.
// expired: the server forgot the session; re-initialize at once, and let
// calls wait for it instead of failing.
func (s *session) markBroken(cn *conn, err error, expired bool) {
	cn.breakOnce.Do(func() {
		cn.breakErr = err
		cn.expired = expired
		s.mu.Lock()
		// A connection whose context has ended is being closed on purpose
		// (a stop): its streams end with it, which is not a loss.
		if cn.ctx.Err() == nil && s.cur.CompareAndSwap(cn, nil) {
			if expired {
				s.reconnecting = true
				s.log.Info("mcp session expired; re-initializing")
			} else {
				s.state = toolmeshv1.ServerState_SERVER_STATE_UNHEALTHY
				s.lastErr = err.Error()
				s.log.Warn("mcp connection lost; reconnecting", "err", err)
			}
			s.notifyLocked()
		}
		s.mu.Unlock()
		close(cn.broken)
	})
}

func (s *session) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// run keeps the session connected until ctx ends.
func (s *session) run(ctx context.Context) {
	defer func() {
		s.mu.Lock()
		s.state = toolmeshv1.ServerState_SERVER_STATE_STOPPED
		s.reconnecting = false
		s.notifyLocked()
		s.mu.Unlock()
		s.dial.close()
	}()

	attempt := 0
	for {
		cn, tools, err := s.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			s.state = toolmeshv1.ServerState_SERVER_STATE_UNHEALTHY
			s.lastErr = err.Error()
			s.reconnecting = false
			s.notifyLocked()
			s.mu.Unlock()
			delay := backoff(attempt)
			attempt++
			s.log.Warn("mcp connect failed", "err", err, "retry_in", delay.Round(time.Millisecond))
			if !sleepCtx(ctx, delay) {
				return
			}
			continue
		}
		up := time.Now()
		s.mu.Lock()
		s.streamErr, s.listErr = "", ""
		s.mu.Unlock()
		s.publish(tools)
		s.mu.Lock()
		s.state = toolmeshv1.ServerState_SERVER_STATE_READY
		s.lastErr = ""
		s.protocol = cn.protocol
		s.info = cn.info
		s.connectedAt = up
		s.reconnecting = false
		s.cur.Store(cn)
		s.notifyLocked()
		s.mu.Unlock()
		// What the server lists may differ from what it listed before it went away.
		s.cat.changes.publish(s.name, toolmeshv1.ListKind_LIST_KIND_PROMPTS, toolmeshv1.ListKind_LIST_KIND_RESOURCES)
		s.log.Info("mcp server connected", "protocol", cn.protocol, "server_name", cn.info.Name,
			"server_version", cn.info.Version, "tools", len(tools.tools), "refused", len(tools.refused))
		s.live(cn)

		select {
		case <-ctx.Done():
			s.cur.CompareAndSwap(cn, nil)
			cn.close()
			s.recordSession(context.WithoutCancel(ctx), cn, up, "")
			return
		case <-cn.broken:
		}
		cn.close()
		// Closing broken made cn's break fields safe to read.
		if cn.expired {
			s.recordSession(ctx, cn, up, errTypeExpired)
		} else {
			s.recordSession(ctx, cn, up, errTypeUnavailable)
		}
		if time.Since(up) > 10*time.Second {
			attempt = 0
		}
		if cn.expired {
			continue // re-initialize at once
		}
		delay := backoff(attempt)
		attempt++
		if !sleepCtx(ctx, delay) {
			return
		}
	}
}

func backoff(attempt int) time.Duration {
	d := backoffMin << min(attempt, 20)
	if d > backoffMax || d <= 0 {
		d = backoffMax
	}
	// Full jitter in [d/2, d).
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// connect opens a connection and lists its tools, as the MCP Go SDK's
// Client.Connect does over a Transport: open the transport (dialer.open),
// start it, initialize (server/discover first, then the legacy handshake,
// unless a version is pinned), tools/list. The whole attempt is bounded by
// ConnectTimeout.
func (s *session) connect(ctx context.Context) (*conn, *listing, error) {
	cn, tools, err := s.connectOnce(ctx)
	if err != nil {
		return nil, nil, err
	}
	if s.srv.Transport == mcpconfig.TransportStreamableHTTP && !mcp.IsModernProtocol(cn.protocol) && !s.legacyHTTP {
		// A legacy streamable HTTP server only sends notifications on the
		// standalone GET stream, which mcp-go opens only when the transport
		// is built with continuous listening (and that pins the legacy
		// handshake). Reconnect that way; remembered for later reconnects.
		s.legacyHTTP = true
		s.log.Debug("legacy streamable HTTP server; reconnecting with the GET notification stream", "protocol", cn.protocol)
		cn.close()
		return s.connectOnce(ctx)
	}
	return cn, tools, nil
}

func (s *session) connectOnce(ctx context.Context) (_ *conn, _ *listing, err error) {
	cctx, cancel := context.WithCancel(ctx)
	cn := &conn{ctx: cctx, cancel: cancel, refresh: make(chan struct{}, 1), broken: make(chan struct{})}
	// One timer bounds the exchange with the server below, including a server that accepts
	// the TCP connection and then says nothing. It stops once the tool list is in: checking the
	// tools is this process's own work, bounded by the list's limits, and under a timer a
	// server with thousands of tools on a busy machine timed out after it had answered, every
	// attempt (1,951 tools, 4 attempts of 10 s under -race beside 5 busy loops on 2 cores).
	timedOut := atomic.Bool{}
	answered := atomic.Bool{}
	timer := time.AfterFunc(s.cfg.ConnectTimeout, func() {
		timedOut.Store(true)
		cancel()
	})
	stopTimer := func() {
		if timer.Stop() {
			answered.Store(true)
		}
	}
	defer func() {
		if !answered.Load() && !timer.Stop() && err == nil {
			err = fmt.Errorf("connect: timed out after %s", s.cfg.ConnectTimeout)
		}
		if err != nil {
			if timedOut.Load() && ctx.Err() == nil {
				err = fmt.Errorf("connect timed out after %s: %w", s.cfg.ConnectTimeout, err)
			}
			cn.close()
		}
	}()

	legacyHTTP := s.srv.Transport == mcpconfig.TransportStreamableHTTP && s.legacyHTTP
	ln, err := s.dial.open(legacyHTTP)
	if err != nil {
		return nil, nil, err
	}
	cn.hooks, cn.proc = ln.hooks, ln.proc
	if p := ln.proc; p != nil {
		cn.wg.Add(1)
		go func() {
			defer cn.wg.Done()
			select {
			case <-p.done:
				s.markBroken(cn, p.exitError(), false)
			case <-cctx.Done():
			}
		}()
	}

	pinned := s.srv.ProtocolVersion
	var opts []client.ClientOption
	if pinned != "" {
		opts = append(opts, client.WithProtocolVersion(pinned))
	}
	if s.ins.tel != nil && s.srv.Transport != mcpconfig.TransportStdio {
		opts = append(opts, client.WithPropagator(headerPropagator{s.ins.tel}))
	}
	c := client.NewClient(ln.tr, opts...)
	cn.client = c
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		switch n.Method {
		case mcp.MethodNotificationToolsListChanged:
			s.streamUp(cn)
			cn.requestRefresh()
		case mcp.MethodNotificationSubscriptionsAcknowledged:
			// The first message of a subscriptions/listen stream. The stream opens after the
			// tools/list at connect: a change in between was sent to no listener, so re-list
			// once it is up (a busy machine lost a removal that way, for good).
			s.streamUp(cn)
			cn.requestRefresh()
		case string(mcp.MethodNotificationProgress):
			s.progress.deliver(n)
		case mcp.MethodNotificationPromptsListChanged:
			s.cat.changes.publish(s.name, toolmeshv1.ListKind_LIST_KIND_PROMPTS)
		case mcp.MethodNotificationResourcesListChanged:
			s.cat.changes.publish(s.name, toolmeshv1.ListKind_LIST_KIND_RESOURCES)
		}
	})
	c.OnConnectionLost(func(err error) {
		if err == nil {
			err = errors.New("stream closed")
		}
		s.markBroken(cn, fmt.Errorf("sse stream lost: %w", err), false)
	})
	if err := c.Start(ln.startContext(cctx)); err != nil {
		return nil, nil, fmt.Errorf("start: %w", err)
	}
	if err := s.initialize(cctx, cn, ln.tr, legacyHTTP); err != nil {
		return nil, nil, fmt.Errorf("initialize: %w", err)
	}
	tools, err := s.listTools(cctx, cn, stopTimer)
	var over *listLimitError
	switch {
	case errors.As(err, &over):
		// The connection works; the tool list is what is wrong.
		tools = &listing{over: over}
	case err != nil:
		return nil, nil, fmt.Errorf("tools/list: %w", err)
	}
	return cn, tools, nil
}

// live starts what a current connection runs until it closes: the refresher
// and, where the server announced tools/list_changed on 2026-07-28, the
// notification stream.
func (s *session) live(cn *conn) {
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		s.refreshLoop(cn)
	}()
	if mcp.IsModernProtocol(cn.protocol) && !cn.filter.IsEmpty() {
		cn.wg.Add(1)
		go func() {
			defer cn.wg.Done()
			s.listenLoop(cn)
		}()
	}
}

// initialize does the MCP handshake on a started client.
func (s *session) initialize(ctx context.Context, cn *conn, tr transport.Interface, legacyHTTP bool) error {
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = s.srv.ProtocolVersion
	if legacyHTTP && req.Params.ProtocolVersion == "" {
		req.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	}
	req.Params.ClientInfo = clientInfo
	ictx, rc := s.startRPC(ctx, string(mcp.MethodInitialize), "")
	res, err := cn.client.Initialize(ictx, req)
	if err == nil {
		cn.protocol = cn.client.ProtocolVersion()
		cn.sessionID = sessionIDOf(tr)
		rc.connected(cn)
	}
	rc.end(ictx, nil, err)
	if err != nil {
		return err
	}
	cn.info = res.ServerInfo
	cn.hooks.modern.Store(mcp.IsModernProtocol(cn.protocol))
	cn.listen = res.Capabilities.Tools != nil && res.Capabilities.Tools.ListChanged
	cn.filter = mcp.SubscriptionFilter{ToolsListChanged: cn.listen,
		PromptsListChanged:   res.Capabilities.Prompts != nil && res.Capabilities.Prompts.ListChanged,
		ResourcesListChanged: res.Capabilities.Resources != nil && res.Capabilities.Resources.ListChanged}
	return nil
}

// listenLoop keeps a 2026-07-28 subscriptions/listen stream open for
// tools/list_changed for as long as cn lives (legacy sessions get
// notifications without it). A stream that fails is opened again with capped
// backoff; meanwhile the server is DEGRADED, and the periodic re-list keeps
// its tools true.
func (s *session) listenLoop(cn *conn) {
	ctx := cn.ctx
	attempt := 0
	for {
		started := time.Now()
		err := cn.client.Listen(ctx, cn.filter)
		if ctx.Err() != nil || cn.isBroken() {
			return
		}
		var te *transport.Error
		switch {
		case err == nil:
			// The server ended the stream: the stream was up.
			s.streamUp(cn)
		case errors.As(err, &te) && isConnError(err):
			s.markBroken(cn, fmt.Errorf("notification stream: %w", err), false)
			return
		default:
			s.streamDown(cn, err)
		}
		if time.Since(started) > time.Minute {
			attempt = 0
		}
		delay := backoff(attempt)
		attempt++
		if err != nil {
			s.log.Warn("notification stream failed; listening again", "err", err, "retry_in", delay.Round(time.Millisecond))
		}
		if !sleepCtx(ctx, delay) {
			return
		}
		if err == nil {
			// A change may have happened while we were not listening.
			cn.requestRefresh()
		}
	}
}

// streamDown marks cn's server DEGRADED: its notification stream failed.
func (s *session) streamDown(cn *conn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Load() == cn {
		s.streamErr = fmt.Sprintf("notification stream: %s (listening again with backoff; tools re-listed every %s meanwhile)",
			shorten(err.Error(), maxReason), s.cfg.RelistInterval)
	}
}

// streamUp clears streamDown, and re-lists: a change may have been missed.
func (s *session) streamUp(cn *conn) {
	s.mu.Lock()
	was := s.streamErr != "" && s.cur.Load() == cn
	if was {
		s.streamErr = ""
	}
	s.mu.Unlock()
	if was {
		s.log.Info("notification stream back")
		cn.requestRefresh()
	}
}

// listTools lists every page of the server's tools, within the listing
// limits, calls answered once every page is in, and builds catalog entries (its
// own work: ctx bounds the requests, not the checks). Its errors: a *listLimitError (the
// listing broke a limit; nothing is wrong with the connection), a *lostError
// (the connection is gone), or the request failing otherwise.
func (s *session) listTools(ctx context.Context, cn *conn, answered func()) (_ *listing, err error) {
	ctx, rc := s.startRPC(ctx, string(mcp.MethodToolsList), "")
	rc.connected(cn)
	defer func() { rc.end(ctx, nil, err) }()
	ctx, pages := withRawPages(ctx, s.cfg.MaxToolsPerServer, s.cfg.MaxListBytes)
	var listed []mcp.Tool
	req := mcp.ListToolsRequest{}
	cursors := map[mcp.Cursor]bool{}
	for {
		// One page's body may take what the listing has left.
		pctx, probe := withAnswerProbe(ctx, pages.remaining())
		res, err := cn.client.ListToolsByPage(pctx, req)
		var over *listLimitError
		switch {
		case errors.As(err, &over):
			return nil, over
		case err != nil && probe.tripped.Load():
			pages.mu.Lock()
			read := int64(pages.bytes) + max(probe.size.Load(), probe.cut.Load(), probe.limit)
			pages.mu.Unlock()
			return nil, &listLimitError{bytes: read, over: probe.size.Load() == 0, maxBytes: s.cfg.MaxListBytes}
		case err != nil && probe.brokenBy(err):
			return nil, &lostError{err}
		case err != nil:
			return nil, err
		}
		listed = append(listed, res.Tools...)
		if res.NextCursor == "" {
			break
		}
		if cursors[res.NextCursor] {
			return nil, fmt.Errorf("the server sent cursor %q twice", shorten(string(res.NextCursor), 64))
		}
		cursors[res.NextCursor] = true
		req.Params.Cursor = res.NextCursor
	}
	answered()
	raw := map[string]*rawTool{}
	pages.mu.Lock()
	for _, p := range pages.pages {
		var page struct {
			Tools []*rawTool `json:"tools"`
		}
		if json.Unmarshal(p, &page) == nil {
			for _, t := range page.Tools {
				if t != nil {
					raw[t.Name] = t
				}
			}
		}
	}
	pages.mu.Unlock()
	prev := s.cat.serverTools(s.name)
	lim := s.cfg.schemaLimits()
	l := &listing{tools: make([]*tool, 0, len(listed))}
	seen := map[string]bool{}
	for _, t := range listed {
		// The rules, the ids and the views know the name without hidden characters.
		name := shownName(t.Name)
		if t.Name == "" || seen[name] || (name != "" && !s.cat.admits(s.name, name)) {
			continue
		}
		seen[name] = true
		id := toolid.Join(s.name, name)
		entry, err := buildTool(s.name, t, raw[t.Name], prev[id], lim)
		var refused *refusedError
		switch {
		case errors.As(err, &refused):
			shown := name
			if shown == "" {
				shown = strconv.QuoteToASCII(t.Name)
			}
			l.refused = append(l.refused, &toolmeshv1.RefusedTool{Name: shown, Reason: refused.reason})
			s.log.Warn("tool refused", "tool", id, "reason", refused.reason)
		case err != nil:
			s.log.Warn("tool input schema does not compile; calling it without validation", "tool", id, "err", err)
		}
		if entry != nil {
			l.tools = append(l.tools, entry)
		}
	}
	return l, nil
}

// listing is the outcome of one tools/list: the tools for the catalog, and
// those refused, by name, with the reason; or, when over is set, a listing
// that broke a limit, which leaves the catalog as it was.
type listing struct {
	tools   []*tool
	refused []*toolmeshv1.RefusedTool
	over    *listLimitError
}

// publish puts the server's tools in the catalog. Only run's goroutine and
// the current connection's refresher call it, one after the other. A retired
// session publishes nothing: its server is gone, or another session has it.
func (s *session) publish(l *listing) {
	if l.over != nil {
		s.listFailed(l.over)
		return
	}
	s.pubMu.Lock()
	if s.retired {
		s.pubMu.Unlock()
		return
	}
	// The pins decide what of the listing is served (pins.go); republish judges it again.
	s.listed = l.tools
	tools := s.pins.judge(s.name, s.srv.PinningMode(), l.tools)
	// The server's count first: replaceServer tells the watchers, and one that then asks
	// for the server must read the count of the tools it was just told about.
	s.mu.Lock()
	s.toolCount = len(tools)
	s.refused = l.refused
	s.listErr = ""
	s.mu.Unlock()
	up, rm := s.cat.replaceServer(s.name, tools)
	s.pubMu.Unlock()
	if up > 0 || rm > 0 {
		s.log.Info("tools changed", "upserted", up, "removed", rm, "total", len(l.tools))
	}
}

// listFailed marks the server DEGRADED: its tools could not be listed, and
// the catalog keeps the last good ones.
func (s *session) listFailed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := "keeping the last good tool list"
	if s.toolCount == 0 {
		keep = "no tools are served from it"
	}
	s.listErr = fmt.Sprintf("tools/list: %s; %s", shorten(err.Error(), maxReason), keep)
	s.log.Warn("tool list refused or failed", "err", err, "tools", s.toolCount)
}

// refusal returns why tool name was refused at the last listing, if it was.
func (s *session) refusal(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.refused {
		if r.GetName() == name {
			return r.GetReason(), true
		}
	}
	return "", false
}

// refreshLoop re-lists cn's tools after tools/list_changed, debounced, and
// every RelistInterval (with jitter) in case a notification was lost.
func (s *session) refreshLoop(cn *conn) {
	ctx := cn.ctx
	relist := time.NewTimer(jitter(s.cfg.RelistInterval))
	defer relist.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-relist.C:
		case <-cn.refresh:
			if !sleepCtx(ctx, s.cfg.ListChangedDebounce) {
				return
			}
			// Requests that arrived during the debounce are covered by this refresh.
			select {
			case <-cn.refresh:
			default:
			}
		}
		relist.Reset(jitter(s.cfg.RelistInterval))
		if s.cur.Load() != cn {
			continue // the reconnect lists tools anyway
		}
		lctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
		tools, err := s.listTools(lctx, cn, func() {})
		cancel()
		var lost *lostError
		var over *listLimitError
		var needs *oauth.NeedsSignIn
		switch {
		case err == nil:
			if s.cur.Load() == cn {
				s.publish(tools)
			}
		case ctx.Err() != nil:
			return
		case errors.As(err, &needs):
			s.markBroken(cn, needs, false)
		case errors.Is(err, transport.ErrSessionTerminated):
			s.markBroken(cn, ErrSessionExpired, true)
		case errors.As(err, &lost):
			s.markBroken(cn, lost.err, false)
		case errors.As(err, &over):
			s.listFailed(over)
		default:
			s.listFailed(err)
		}
	}
}

// jitter spreads d over ±20%, so servers are not all listed at once.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + rand.N(d*2/5+1)
}

// enter counts a call in; false when the session is retired (its server was removed or
// changed by a reload) and takes no more calls. Every true is matched by a leave.
func (s *session) enter() bool {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	if s.retired {
		return false
	}
	s.inflight++
	return true
}

func (s *session) leave() {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	s.inflight--
	if s.retired && s.inflight == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// retire stops the session publishing tools and taking calls; the channel closes once the
// calls it has are done.
func (s *session) retire() <-chan struct{} {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.inMu.Lock()
	defer s.inMu.Unlock()
	s.retired = true
	idle := make(chan struct{})
	if s.inflight == 0 {
		close(idle)
	} else {
		s.idle = idle
	}
	return idle
}

// awaitFirst makes calls wait for the session's first connection (bounded by their
// deadline, and failing if that attempt fails) instead of failing at once: the session
// replaces one of a changed server, whose tools are still in the catalog and still called.
func (s *session) awaitFirst() {
	s.mu.Lock()
	s.reconnecting = true
	s.mu.Unlock()
}

// current returns the READY connection. While an expired session is being
// re-initialized it waits (bounded by ctx); otherwise it fails fast.
func (s *session) current(ctx context.Context) (*conn, error) {
	for {
		if cn := s.cur.Load(); cn != nil {
			return cn, nil
		}
		s.mu.Lock()
		if cn := s.cur.Load(); cn != nil {
			s.mu.Unlock()
			return cn, nil
		}
		// Wait while an expired session is re-initialized, and while the first connection
		// is being made (bounded by the connect timeout, then the state says why it failed):
		// a restarted executor gets calls as soon as its port answers.
		firstAttempt := s.state == toolmeshv1.ServerState_SERVER_STATE_CONNECTING && s.lastErr == ""
		if !s.reconnecting && !firstAttempt {
			err := &unavailableError{server: s.name, reason: s.reasonLocked()}
			s.mu.Unlock()
			return nil, err
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *session) reasonLocked() string {
	switch s.state {
	case toolmeshv1.ServerState_SERVER_STATE_CONNECTING:
		if s.lastErr == "" {
			return "connecting"
		}
	case toolmeshv1.ServerState_SERVER_STATE_STOPPED:
		return "executor stopped"
	}
	return s.lastErr
}

// call runs one tools/call with the session's timeout (or the shorter
// requested one) and concurrency limit. Its span covers waiting for a slot
// and for a connection too: that is the time the caller sees. With a sink,
// the call asks the server for progress reports and they go to the sink.
//
// A result over the tool's limit (resultLimit) is read only up to it and comes back cut,
// noted in ctx (withCutNote) for the handler, which adds the marker (cutResponse).
//
// args is what goes in the request's params.arguments: the map of the arguments, or their
// JSON text (json.RawMessage) as the caller sent it.
func (s *session) call(ctx context.Context, t *tool, args any, reqTimeout time.Duration, sink *progressSink) (res *mcp.CallToolResult, err error) {
	timeout := s.timeout
	if reqTimeout > 0 && reqTimeout < timeout {
		timeout = reqTimeout
	}
	parent := ctx
	ctx, rc := s.startRPC(ctx, string(mcp.MethodToolsCall), t.name)
	defer func() { rc.end(ctx, res, err) }()
	rc.recordArguments(args)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctxErr := func() error {
		if parent.Err() != nil {
			return parent.Err()
		}
		return &timeoutError{tool: t.id, timeout: timeout}
	}

	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctxErr()
	}
	defer func() { <-s.sem }()

	limit, source := resultLimit(s.name, s.srv, s.cfg, t.name)
	ctx, probe := withAnswerProbe(ctx, limit)
	req := mcp.CallToolRequest{}
	req.Params.Name = t.name
	req.Params.Arguments = args
	req.Params.Meta = rc.injectMeta(ctx)
	if sink != nil {
		token := s.progress.add(sink)
		defer s.progress.remove(token)
		if req.Params.Meta == nil {
			req.Params.Meta = &mcp.Meta{}
		}
		req.Params.Meta.ProgressToken = token
	}
	for attempt := 0; ; attempt++ {
		cn, err := s.current(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctxErr()
			}
			return nil, err
		}
		rc.connected(cn)
		res, err := cn.client.CallTool(ctx, req)
		if err == nil {
			return res, nil
		}
		if res, cut, ok := probe.cutResult(); ok {
			cut.limit, cut.source = limit, source
			noteCut(ctx, cut)
			return res, nil
		}
		if err := probe.err(t.id); err != nil {
			if tl, ok := err.(*resultTooLargeError); ok {
				tl.source = source
			}
			return nil, err
		}
		if ctxEnded(ctx) {
			return nil, ctxErr()
		}
		if errors.Is(err, transport.ErrSessionTerminated) {
			s.markBroken(cn, ErrSessionExpired, true)
			if attempt == 0 {
				continue // current() waits for the new session
			}
			return nil, &unavailableError{server: s.name, reason: "mcp session expired again after re-initializing"}
		}
		var needs *oauth.NeedsSignIn
		if errors.As(err, &needs) {
			// The tokens were revoked or refused: the connection is of no use until someone
			// signs in again.
			s.markBroken(cn, needs, false)
			return nil, &unavailableError{server: s.name, reason: needs.Error()}
		}
		var te *transport.Error
		if !errors.As(err, &te) {
			if badResult(err) {
				return nil, &unavailableError{server: s.name, reason: shorten("malformed tools/call result: "+err.Error(), maxReason)}
			}
			return nil, &ServerError{Server: s.name, Err: err}
		}
		if probe.brokenBy(err) || cn.isBroken() {
			s.markBroken(cn, err, false)
			if cn.breakErr != nil {
				err = cn.breakErr
			}
		}
		return nil, &unavailableError{server: s.name, reason: shorten(err.Error(), maxReason)}
	}
}

// badResult reports whether err is mcp.ParseCallToolResult's: the server
// answered with a result that is not a CallToolResult. That is a malformed
// answer like any other (UNAVAILABLE), not the tool failing (a JSON-RPC
// error, UNKNOWN). mcp-go has no type for it; faults_test.go pins the wording.
func badResult(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "failed to unmarshal response: ") ||
		msg == "content is missing" || msg == "response is nil"
}

// maxReason bounds the server's words in an error: a proxy's HTML error page
// or a garbage body is quoted by mcp-go in full.
const maxReason = 512

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes cut)", s[:cut], len(s)-cut)
}

// isConnError reports whether err means the connection itself is gone (as
// opposed to one request failing).
func isConnError(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, transport.ErrTransportClosed),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection has been closed") ||
		strings.Contains(msg, "transport has been closed") ||
		strings.Contains(msg, "transport not started")
}

// status is the session's entry for ListServers.
func (s *session) status() *toolmeshv1.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	state, lastErr := s.healthLocked()
	out := &toolmeshv1.Server{
		Name:            s.name,
		ConfigName:      s.srv.ConfigName,
		Transport:       transportEnum(s.srv.Transport),
		Endpoint:        redact.Text(s.endpoint),
		State:           state,
		ProtocolVersion: s.protocol,
		ServerName:      s.info.Name,
		ServerVersion:   s.info.Version,
		ToolCount:       int32(s.toolCount),
		// The executor's own API (the api masks them too) never shows a credential in a URL.
		LastError:    redact.Text(lastErr),
		RefusedTools: s.refused,
	}
	if !s.connectedAt.IsZero() {
		out.ConnectedAt = timestampOf(s.connectedAt)
	}
	return out
}

// healthLocked is the state and error ListServers reports: a READY server
// whose catalog may be stale is DEGRADED, saying why.
func (s *session) healthLocked() (toolmeshv1.ServerState, string) {
	if s.state != toolmeshv1.ServerState_SERVER_STATE_READY || (s.streamErr == "" && s.listErr == "") {
		return s.state, s.lastErr
	}
	why := s.streamErr
	if s.listErr != "" {
		if why != "" {
			why += "; "
		}
		why += s.listErr
	}
	return toolmeshv1.ServerState_SERVER_STATE_DEGRADED, why
}

// ready: connected, degraded or not (its tools are callable).
func (s *session) ready() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == toolmeshv1.ServerState_SERVER_STATE_READY && s.cur.Load() != nil {
		return true, ""
	}
	switch s.state {
	case toolmeshv1.ServerState_SERVER_STATE_CONNECTING:
		if s.lastErr == "" {
			return false, "connecting"
		}
		return false, "connecting: " + s.lastErr
	case toolmeshv1.ServerState_SERVER_STATE_STOPPED:
		return false, "stopped"
	}
	return false, "unhealthy: " + s.lastErr
}
