package mcpface

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"

	"github.com/mark3labs/mcp-go/server"
)

type viewKind int

const (
	viewCatalog viewKind = iota
	viewSearch
	viewServer
)

// view is one MCP endpoint: an mcp-go server and its streamable HTTP handler.
type view struct {
	kind   viewKind
	server string // the server of a viewServer
	path   string
	mcp    *server.MCPServer
	http   *server.StreamableHTTPServer

	mu        sync.Mutex
	published [sha256.Size]byte // fingerprint of the tools last set; zero before
}

const instructions = "toolmesh serves the tools of many MCP servers. A tool's name is SERVER__TOOL " +
	"(its toolmesh id SERVER.TOOL is in the tool's _meta, under toolmesh/id)."

const searchInstructions = "toolmesh serves the tools of many MCP servers, too many to list. Find the " +
	"ones a task needs with search_tools (it returns their definitions), then call one with call_tool."

func (f *Face) newView(kind viewKind, srv string) *view {
	v := &view{kind: kind, server: srv}
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
	reg := newRegistry(maxSessions)
	hooks := &server.Hooks{}
	f.ins.install(hooks, v.path)
	reg.hooks(hooks)
	if kind == viewCatalog {
		// The catalog also serves the SSE transport, whose sessions end here.
		hooks.AddOnUnregisterSession(func(_ context.Context, s server.ClientSession) { f.owners.Delete(s.SessionID()) })
	}
	opts := []server.ServerOption{
		server.WithToolCapabilities(kind != viewSearch),
		server.WithPaginationLimit(f.cfg.PageSize),
		server.WithHooks(hooks),
		server.WithMetaPropagator(metaPropagator{tel: f.ins.tel}),
		server.WithInstructions(instr),
		server.WithRecovery(),
	}
	if kind != viewSearch {
		opts = append(opts, server.WithToolFilter(f.visible))
	}
	v.mcp = server.NewMCPServer(name, f.cfg.Version, opts...)
	reg.srv = v.mcp
	v.http = server.NewStreamableHTTPServer(v.mcp,
		server.WithSessionIdManager(statelessIDs{}),
		server.WithSessionIdleTTL(f.cfg.SessionIdle),
		server.WithStreamableHTTPLogger(f.log),
	)
	return v
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
	v.mcp.SetTools(tools...)
}
