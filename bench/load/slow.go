package main

import (
	"context"
	"net/http/httptest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/mcpservers/serve"
)

// slowWait is how long a call of the slow server's tool takes: long enough that calls are in
// flight in the executor whenever it is stopped, far shorter than its drain timeout.
const slowWait = 250 * time.Millisecond

// serveSlow serves the bench's own MCP server "slow" (streamable HTTP at /mcp, as the shipped
// servers are served): one tool, wait, that answers "waited" after slowWait. It is not a
// double of anything: it only makes tool calls take a while.
func serveSlow() *httptest.Server {
	s := server.NewMCPServer("slow", "0.1.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("wait", mcp.WithDescription("Wait a quarter of a second, then answer waited.")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(slowWait):
				return mcp.NewToolResultText("waited"), nil
			}
		})
	return httptest.NewServer(serve.Handler(s, serve.Options{}))
}
