// Package mcptesting holds test helpers shared by the MCP server packages:
// connecting an mcp-go client and calling tools with got/want friendly
// results.
package mcptesting

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Timeout bounds every helper call.
const Timeout = 10 * time.Second

// InProcess returns an initialized in-process client for s, closed when the
// test ends.
func InProcess(t testing.TB, s *server.MCPServer) *client.Client {
	t.Helper()
	c, err := client.NewInProcessClient(s)
	if err != nil {
		t.Fatalf("NewInProcessClient: %v", err)
	}
	Init(t, c)
	return c
}

// Init starts and initializes c and closes it when the test ends.
func Init(t testing.TB, c *client.Client) *mcp.InitializeResult {
	t.Helper()
	// The SSE transport ties its event stream to the context given to Start,
	// so that context must live as long as the client, not just the call.
	life, stop := context.WithCancel(context.Background())
	t.Cleanup(func() {
		_ = c.Close()
		stop()
	})
	ctx, cancel := context.WithTimeout(life, Timeout)
	defer cancel()
	if err := c.Start(life); err != nil {
		t.Fatalf("client Start: %v", err)
	}
	req := mcp.InitializeRequest{}
	// No ProtocolVersion: it would override client.WithProtocolVersion; when
	// empty the client offers the newest version unless pinned.
	req.Params.ClientInfo = mcp.Implementation{Name: "toolmesh-test", Version: "0.0.0"}
	res, err := c.Initialize(ctx, req)
	if err != nil {
		t.Fatalf("client Initialize: %v", err)
	}
	return res
}

// ToolNames lists the tools of the server c is connected to.
func ToolNames(t testing.TB, c *client.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	names := make([]string, 0, len(res.Tools))
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// Call calls tool name with args; a protocol error fails the test.
func Call(t testing.TB, c *client.Client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("CallTool(%s, %v): %v", name, args, err)
	}
	return res
}

// Text joins the text content of res.
func Text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := mcp.AsTextContent(c); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
