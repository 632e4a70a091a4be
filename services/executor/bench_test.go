package executor

import (
	"context"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// BenchmarkCallTool compares a direct held mcp-go call with the same call
// through the executor's gRPC API (bufconn), on one streamable HTTP server.
func BenchmarkCallTool(b *testing.B) {
	for _, era := range []struct{ name, version string }{{"legacy", mcp.ProtocolVersion20251125}, {"modern", ""}} {
		ts := newTestMCP("bench", 0)
		hh := newHTTPHarness(b, streamableHandler(fixed(ts)))
		url := "http://" + hh.addr + "/mcp"

		b.Run(era.name+"/direct", func(b *testing.B) {
			opts := []client.ClientOption{}
			if era.version != "" {
				opts = append(opts, client.WithProtocolVersion(era.version))
			}
			c, err := client.NewStreamableHttpClient(url)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range opts {
				o(c)
			}
			defer c.Close()
			ctx := context.Background()
			if err := c.Start(ctx); err != nil {
				b.Fatal(err)
			}
			req := mcp.InitializeRequest{}
			req.Params.ProtocolVersion = era.version
			req.Params.ClientInfo = clientInfo
			if _, err := c.Initialize(ctx, req); err != nil {
				b.Fatal(err)
			}
			call := mcp.CallToolRequest{}
			call.Params.Name = "add"
			call.Params.Arguments = map[string]any{"a": 1.0, "b": 2.0}
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.CallTool(ctx, call); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(era.name+"/executor", func(b *testing.B) {
			h := startExecutor(b, Config{Servers: map[string]mcpconfig.Server{
				"calc": {Transport: mcpconfig.TransportStreamableHTTP, URL: url, ProtocolVersion: era.version},
			}})
			h.waitReady(b)
			args, _ := structpb.NewStruct(map[string]any{"a": 1, "b": 2})
			req := &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "calc.add", Arguments: args}
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				if _, err := h.client.CallTool(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
		hh.kill()
	}
}
