package mcpface

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

type viewKind int

const (
	viewCatalog viewKind = iota
	viewSearch
	viewServer
)

// view is one MCP endpoint: an mcp-go server and its streamable HTTP handler.
//
// A view of the catalog or of one server answers tools/list with a second mcp-go server, its
// lister, that holds no tools: its tool filter hands mcp-go the view's tools as one slice,
// sorted by name once per change of the catalog, and mcp-go cuts the page out of it. The view's
// own server, which holds the tools for tools/call, would sort and copy the whole catalog (and
// merge it with the session's tools) for every page: with 10,000 tools that was 17 ms a page,
// against 4 ms for the page alone. Both list the same tools in the same order with the same
// cursors (the last name of the page, as mcp-go makes them); the view's own server still
// answers tools/list where the lister is not used (the legacy SSE transport).
type view struct {
	kind   viewKind
	server string // the server of a viewServer
	path   string
	mcp    *server.MCPServer
	http   *server.StreamableHTTPServer
	lister *server.StreamableHTTPServer // nil for the search view
	listed atomic.Pointer[[]mcp.Tool]   // the tools set last, sorted by name; nil before

	// What the short path for tools/call (shortcall.go) needs: the tools set last by name, the
	// serverInfo mcp-go puts in a 2026-07-28 result, when mcp-go last saw each 2025-era
	// session, and the cancel of each 2025-era call the short path runs (for the client's
	// notifications/cancelled).
	calls      atomic.Pointer[map[string]callTarget]
	impl       mcp.Implementation
	serverMeta resultMeta // impl as a result's _meta
	seen       *sessionClock
	cancels    sync.Map // inflightKey → context.CancelFunc

	mu        sync.Mutex
	published [sha256.Size]byte // fingerprint of the tools last set; zero before
}

const instructions = "toolmesh serves the tools of many MCP servers. A tool's name is SERVER__TOOL " +
	"(its toolmesh id SERVER.TOOL is in the tool's _meta, under toolmesh/id)."

const searchInstructions = "toolmesh serves the tools of many MCP servers, too many to list. Find the " +
	"ones a task needs with search_tools (it returns their definitions), then call one with call_tool."

func (f *Face) newView(kind viewKind, srv string) *view {
	v := &view{kind: kind, server: srv, seen: newSessionClock(2*maxSessions, f.cfg.SessionIdle/4)}
	name, instr := "toolmesh", instructions
	switch kind {
	case viewCatalog:
		v.path = CatalogPath
	case viewSearch:
		v.path, name, instr = SearchPath, "toolmesh-search", searchInstructions
	case viewServer:
		v.path, name = ServersPath+srv, "toolmesh-"+srv
		instr = fmt.Sprintf("The tools of the MCP server %s, through toolmesh.", srv)
	}
	v.impl = mcp.Implementation{Name: name, Version: f.cfg.Version}
	v.serverMeta = resultMeta{ServerInfo: v.impl}
	reg := newRegistry(maxSessions)
	hooks := &server.Hooks{}
	f.ins.install(hooks, v.path)
	reg.hooks(hooks)
	v.seen.hooks(hooks)
	opts := []server.ServerOption{
		server.WithToolCapabilities(kind != viewSearch),
		server.WithPaginationLimit(f.cfg.PageSize),
		server.WithHooks(hooks),
		server.WithMetaPropagator(metaPropagator{tel: f.ins.tel}),
		server.WithInstructions(instr),
	}
	if kind != viewSearch {
		opts = append(opts, server.WithToolFilter(f.visible),
			// The MCP servers' prompts and resources (prompts.go).
			server.WithPromptCapabilities(true), server.WithResourceCapabilities(false, true), f.contextFilters(hooks))
	} else {
		// The catalog's and the servers' tools recover in their handler (callHandler), made
		// once per catalog rather than wrapped anew for every call. The catalog also serves
		// the legacy SSE transport, whose calls run detached from their POST: callHandler ends
		// them with their stream (see sse.go).
		opts = append(opts, server.WithRecovery())
	}
	v.mcp = server.NewMCPServer(name, f.cfg.Version, opts...)
	reg.srv = v.mcp
	httpOpts := []server.StreamableHTTPOption{
		server.WithSessionIdManager(statelessIDs{}),
		server.WithSessionIdleTTL(f.cfg.SessionIdle),
		server.WithStreamableHTTPLogger(f.log),
		// mcp-go refuses, on a loopback connection, any Host but localhost and loopback IPs:
		// "foo.localhost" and an --api.allowed-hosts name behind a local proxy got 403 on /mcp
		// while every other REST path took them. Face.ServeHTTP applies the web guard's rule
		// (Config.HostAllowed) instead, one rule for the whole port.
		server.WithDisableLocalhostProtection(true),
	}
	v.http = server.NewStreamableHTTPServer(v.mcp, httpOpts...)
	if kind != viewSearch {
		// The lister answers tools/list only (ServeHTTP routes it there), traced as the view's
		// own requests are. It registers no session: a 2025-era client's session is the view's.
		lh := &server.Hooks{}
		f.ins.install(lh, v.path)
		lister := server.NewMCPServer(name, f.cfg.Version,
			server.WithToolCapabilities(true),
			server.WithPaginationLimit(f.cfg.PageSize),
			server.WithHooks(lh),
			server.WithMetaPropagator(metaPropagator{tel: f.ins.tel}),
			server.WithRecovery(),
			server.WithToolFilter(func(ctx context.Context, _ []mcp.Tool) []mcp.Tool { return f.visible(ctx, v.listing()) }),
		)
		v.lister = server.NewStreamableHTTPServer(lister, httpOpts...)
	}
	return v
}

// listing is what the view lists, sorted by name. The slice is shared: mcp-go only reads the
// page it cuts from it, and visible copies what it keeps.
func (v *view) listing() []mcp.Tool {
	if l := v.listed.Load(); l != nil {
		return *l
	}
	return []mcp.Tool{}
}

// handlers are the view's streamable HTTP servers, to drain and close.
func (v *view) handlers() []*server.StreamableHTTPServer {
	if v.lister == nil {
		return []*server.StreamableHTTPServer{v.http}
	}
	return []*server.StreamableHTTPServer{v.http, v.lister}
}

// set makes the tools of ids (def gives each one's definition and handler; false leaves it
// out) what v serves, unless they are what it serves already. mcp-go then sends
// notifications/tools/list_changed to v's clients.
func (v *view) set(ids []string, def func(id string) (server.ServerTool, bool), pub *published) {
	tools := make([]server.ServerTool, 0, len(ids))
	h := sha256.New()
	for _, id := range ids {
		st, ok := def(id)
		if !ok {
			continue
		}
		tools = append(tools, st)
		t := pub.tools[id]
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s\n", id, st.Tool.Name, t.GetHash(), t.GetTitle(), annotationsKey(t.GetAnnotations()))
	}
	var fp [sha256.Size]byte
	h.Sum(fp[:0])
	v.mu.Lock()
	defer v.mu.Unlock()
	if fp == v.published {
		return
	}
	v.published = fp
	// mcp-go's order: by name, bytewise (sort.Strings).
	listed := make([]mcp.Tool, len(tools))
	for i, st := range tools {
		listed[i] = st.Tool
	}
	slices.SortFunc(listed, func(a, b mcp.Tool) int { return cmp.Compare(a.Name, b.Name) })
	v.listed.Store(&listed)
	calls := callTargets(tools)
	v.calls.Store(&calls)
	v.mcp.SetTools(tools...)
}
