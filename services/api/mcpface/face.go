// Package mcpface is the api's MCP face: toolmesh's tools served over MCP on the REST port, so
// that MCP clients (Claude Desktop and Code, Cursor, VS Code, agents on the MCP SDKs) use the
// mesh as one MCP server. It is built with mcp-go's server and serves three views:
//
//   - /mcp, the catalog: every tool the caller's token may list and call, under a name every
//     popular client and model API accepts (toolname: SERVER__TOOL, shortened with a hash when
//     too long), with the toolmesh id in the tool's _meta ("toolmesh/id"); tools/list is
//     paginated and notifications/tools/list_changed follows the executor's catalog (debounced);
//   - /mcp/search, for clients whose model must not see a thousand tools: two tools only,
//     search_tools(query, k) (the retriever's top k, with their definitions) and
//     call_tool(tool, arguments);
//   - /mcp/servers/{server}: one server's tools under their own names.
//
// Each is streamable HTTP in both protocol eras (2026-07-28, stateless; 2025-11-25 and before,
// with sessions), and the catalog is also served over the legacy HTTP+SSE transport at /sse.
//
// A call goes where a REST call goes: the api's tools handler (Tools), which asks the policy,
// bounds the call's time and calls the executor, which validates the arguments against the
// tool's schema and calls the server. A client that closes a call's response, or (with a
// session: the 2025 era, legacy SSE) sends its session's notifications/cancelled, cancels the
// call's context, and the executor cancels the upstream call; a notifications/cancelled of
// 2026-07-28 is dropped (cancel.go). The token and its scope are those of the request: the REST
// port's guard checks the bearer token of every request before it gets here, and the policy
// (internal/policy) decides what the token sees and may call.
//
// Sessions of the 2025 era are stateless on purpose: their ids are random and checked for form
// only (as mcp-go's default manager does), because a session holds no authority and no state
// toolmesh needs (each request is authenticated and authorized on its own, and every replica
// serves the same catalog). So a legacy client keeps its session across an api restart and
// across replicas behind a load balancer without sticky sessions. DELETE is answered 405: there
// is nothing to end. The legacy SSE transport at /sse cannot be stateless (a session is an open
// stream, and its responses travel on it): its session ids live in one process, are bound to the
// token that opened the stream, and end with it, and so do its calls, which are held to the
// limits a streamable HTTP call is held to (sse.go).
package mcpface

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/buildinfo"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/webguard"
)

// Tools is the api's tools handler, called in-process with the caller's token name in the
// context (auth.Name): the same code, policy and limits as a REST or gRPC call.
type Tools interface {
	// CallToolProgress passes the tool's progress reports to progress as they come (none when
	// progress is nil).
	CallToolProgress(ctx context.Context, req *toolmeshv1.CallToolRequest, progress func(*toolmeshv1.CallProgress)) (*toolmeshv1.CallToolResponse, error)
	SearchTools(ctx context.Context, req *toolmeshv1.SearchToolsRequest) (*toolmeshv1.SearchToolsResponse, error)
}

// Executor is the part of the executor the face needs: its catalog as it changes, and the
// servers it is configured with.
type Executor interface {
	WatchTools(ctx context.Context, in *toolmeshv1.WatchToolsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.WatchToolsResponse], error)
	ListServers(ctx context.Context, in *toolmeshv1.ExecutorServiceListServersRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListServersResponse, error)
}

// Config tunes the face.
type Config struct {
	// PageSize is how many tools one tools/list page holds.
	PageSize int
	// ListChangedDelay is how long after a change of the catalog notifications/tools/list_changed
	// goes out: the changes in between (a server reconnecting drops and re-adds all its tools)
	// make one notification.
	ListChangedDelay time.Duration
	// SessionIdle is how long a 2025-era session may stay unused before its state (its
	// registration for notifications) is dropped; the client may go on using its id.
	SessionIdle time.Duration
	// SSEMaxCalls is how many calls one legacy SSE session may have running or waiting for
	// their result to be written to its stream; more are refused with 429.
	SSEMaxCalls int
	// RPCTimeout bounds the executor calls the face makes itself (ListServers).
	RPCTimeout time.Duration
	// Version is what the face reports as its server version; "" means the build's
	// (buildinfo.Version, what `toolmesh version` says).
	Version string
	// HostAllowed is the Host rule, the REST port's web guard's (webguard.Guard.HostAllowed);
	// nil is webguard.DefaultHostAllowed.
	HostAllowed func(hostport string) bool

	prefix string // of the flag names (RegisterFlags), for messages naming a limit
	// noShortPath leaves every tools/call to mcp-go's server (shortcall.go), for the tests
	// that compare the short path's answers with mcp-go's.
	noShortPath bool
}

// Defaults and bounds of Config.
const (
	DefaultPageSize         = 500
	DefaultListChangedDelay = 500 * time.Millisecond
	DefaultSessionIdle      = 30 * time.Minute
	maxPageSize             = 10000
	// maxSessions bounds the 2025-era sessions registered for notifications at once; past it
	// the least recently opened is dropped (its client keeps working, and gets notifications
	// again on its GET stream, which registers it anew).
	maxSessions = 4096

	// DefaultSSEMaxCalls is what a token may have in flight by default (auth.DefaultMaxInFlight):
	// with tokens that limit is met first (the stream itself holds one place); without them, one
	// session still cannot take all of an MCP server's 16 slots.
	DefaultSSEMaxCalls = 8
	maxSSEMaxCalls     = 10000
)

// RegisterFlags sets the defaults and binds them to prefix+"page-size" and so on (the api
// passes "api.mcp-").
func (c *Config) RegisterFlags(fs *flag.FlagSet, prefix string) {
	c.prefix = prefix
	fs.IntVar(&c.PageSize, prefix+"page-size", DefaultPageSize, "tools in one page of the MCP endpoint's tools/list")
	fs.DurationVar(&c.ListChangedDelay, prefix+"list-changed-delay", DefaultListChangedDelay,
		"how long after the tool catalog changes MCP clients get notifications/tools/list_changed; the changes in between make one notification")
	fs.DurationVar(&c.SessionIdle, prefix+"session-idle", DefaultSessionIdle,
		"how long an MCP session (protocol 2025-11-25 and older) may stay unused before the api forgets it; the client may still use its id")
	fs.IntVar(&c.SSEMaxCalls, prefix+"sse-max-calls", DefaultSSEMaxCalls,
		"calls one legacy SSE session (/sse) may have running or with a result not yet written to its stream; more are refused with 429. A call also holds its token's place in flight (--api.max-in-flight) until then")
}

// Validate reports the first bad value, naming its flag (prefix as given to RegisterFlags).
func (c *Config) Validate(prefix string) error {
	switch {
	case c.PageSize < 1 || c.PageSize > maxPageSize:
		return fmt.Errorf("%spage-size: %d must be between 1 and %d", prefix, c.PageSize, maxPageSize)
	case c.ListChangedDelay < 0 || c.ListChangedDelay > time.Minute:
		return fmt.Errorf("%slist-changed-delay: %s must be between 0 and 1m", prefix, c.ListChangedDelay)
	case c.SessionIdle < time.Second:
		return fmt.Errorf("%ssession-idle: %s must be at least 1s", prefix, c.SessionIdle)
	case c.SSEMaxCalls < 1 || c.SSEMaxCalls > maxSSEMaxCalls:
		return fmt.Errorf("%ssse-max-calls: %d must be between 1 and %d", prefix, c.SSEMaxCalls, maxSSEMaxCalls)
	}
	return nil
}

func (c *Config) defaults() {
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.SessionIdle == 0 {
		c.SessionIdle = DefaultSessionIdle
	}
	if c.SSEMaxCalls == 0 {
		c.SSEMaxCalls = DefaultSSEMaxCalls
	}
	if c.prefix == "" {
		c.prefix = "api.mcp-" // the api's, when the flags were not registered (tests)
	}
	if c.RPCTimeout == 0 {
		c.RPCTimeout = 10 * time.Second
	}
	if c.Version == "" {
		c.Version = buildinfo.Version()
	}
}

// Face serves the MCP views. Create it with New, serve it (it is an http.Handler), run Run
// until the api stops, Drain when the HTTP server starts draining and Close at the end.
type Face struct {
	cfg    Config
	log    *slog.Logger
	tools  Tools
	exec   Executor
	policy *policy.Policy
	ins    *instruments

	catalog *view
	search  *view
	sse     *server.SSEServer
	streams sync.Map // SSE session id → *sseStream, while the stream is open

	mu      sync.Mutex
	servers map[string]*view // one server's view, made the first time it is asked for or seen
	closed  bool

	state   *catalogState
	changed chan struct{} // a change of the catalog waits to be published (capacity 1)

	// The MCP servers' prompts and resources (prompts.go): where they are got and listed
	// from (nil: none served), and the last lists, for a server view made later.
	ctxAPI   ContextAPI
	ctxExec  ContextExecutor
	ctxMu    sync.Mutex
	ctxLists *contextLists
	ctxSet   map[*view][sha256.Size]byte // fingerprint of what each view was given last
	// ctxFiltered: the views filter prompts and resources by token (contextFilters).
	ctxFiltered atomic.Bool

	// shortCalls counts the calls the short path answered (shortcall.go).
	shortCalls atomic.Uint64
}

// New builds the face; nothing is served until its handler is mounted and nothing is listed
// until Run has the executor's catalog.
func New(cfg Config, tools Tools, exec Executor, pol *policy.Policy, logger *slog.Logger, tel *telemetry.Service) *Face {
	cfg.defaults()
	if cfg.HostAllowed == nil {
		cfg.HostAllowed = webguard.DefaultHostAllowed
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := &Face{cfg: cfg, log: logger, tools: tools, exec: exec, policy: pol, ins: newInstruments(tel),
		servers: map[string]*view{}, state: newCatalogState(), changed: make(chan struct{}, 1),
		ctxSet: map[*view][sha256.Size]byte{}}
	f.catalog = f.newView(viewCatalog, "")
	f.search = f.newView(viewSearch, "")
	f.search.mcp.AddTools(f.searchTools()...)
	f.sse = server.NewSSEServer(f.catalog.mcp,
		server.WithSSEEndpoint(SSEPath),
		server.WithMessageEndpoint(SSEMessagePath),
		// A relative endpoint event is right for whatever host and port the client used.
		server.WithUseFullURLForMessageEndpoint(false),
		server.WithKeepAlive(true),
		server.WithSessionIDGenerator(f.newSSESession),
		// The Host rule is the face's (ServeHTTP), as for the streamable HTTP views.
		server.WithSSEDisableLocalhostProtection(true),
	)
	return f
}

// Run follows the executor's catalog until ctx ends, publishing its changes.
func (f *Face) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		f.publishLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		f.followContext(ctx)
	}()
	go func() {
		defer wg.Done()
		f.waitForCatalog(ctx)
	}()
	f.follow(ctx)
	wg.Wait()
	return nil
}

// Drain ends the open streams (SSE sessions, GET and listen streams), so that the HTTP server's
// graceful stop waits only for calls in flight.
func (f *Face) Drain() {
	f.sse.CloseSessions()
	for _, v := range f.views() {
		for _, h := range v.handlers() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			h.CloseSessions(ctx)
			cancel()
		}
	}
}

// Close stops the face's background work (the idle-session sweepers). It is safe to call more
// than once.
func (f *Face) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.mu.Unlock()
	f.sse.CloseSessions()
	for _, v := range f.views() {
		for _, h := range v.handlers() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := h.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				f.log.Warn("mcp: stopping a view", "view", v.path, "err", err)
			}
			cancel()
		}
	}
}

func (f *Face) views() []*view {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []*view{f.catalog, f.search}
	for _, v := range f.servers {
		out = append(out, v)
	}
	return out
}
