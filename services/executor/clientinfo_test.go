package executor

import (
	"context"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/buildinfo"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// TestClientInfo: an MCP server is told the same version `toolmesh version` prints (it was a
// constant "0.1.0" whatever the build).
func TestClientInfo(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []mcp.Implementation
	)
	hooks := &server.Hooks{}
	hooks.AddAfterInitialize(func(_ context.Context, _ any, req *mcp.InitializeRequest, _ *mcp.InitializeResult) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req.Params.ClientInfo)
	})
	ts := newTestMCP("info", 0, server.WithHooks(hooks))
	h := newHTTPHarness(t, streamableHandler(fixed(ts), legacyOnly))
	ex := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"info": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h.addr + "/mcp"},
	}})
	ex.waitReady(t)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the server saw no initialize")
	}
	want := mcp.Implementation{Name: "toolmesh", Version: buildinfo.Version()}
	for _, got := range seen {
		if got.Name != want.Name || got.Version != want.Version {
			t.Errorf("clientInfo = %s %s, want %s %s", got.Name, got.Version, want.Name, want.Version)
		}
	}
}
