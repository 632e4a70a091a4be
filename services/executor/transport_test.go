package executor

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

func TestSlimToolsPage(t *testing.T) {
	plain := `{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}`
	annotated := `{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`
	escaped := `{"type":"object","properties":{"region":{"type":"string","x-mcp\u002dheader":"Region"}}}`
	tests := []struct {
		name string
		page string
		want map[string]string // tool name → input schema mcp-go gets; nil: page unchanged
	}{
		{"plain schema slimmed", `{"tools":[{"name":"add","inputSchema":` + plain + `}],"nextCursor":"c2"}`,
			map[string]string{"add": `{"type":"object"}`}},
		{"annotated schema kept", `{"tools":[{"name":"route","inputSchema":` + annotated + `},{"name":"add","inputSchema":` + plain + `}]}`,
			map[string]string{"route": annotated, "add": `{"type":"object"}`}},
		{"escaped keyword kept", `{"tools":[{"name":"route","inputSchema":` + escaped + `}]}`, nil},
		{"only annotated tools", `{"tools":[{"name":"route","inputSchema":` + annotated + `}]}`, nil},
		{"already slim", `{"tools":[{"name":"ping","inputSchema":{"type":"object"}}]}`, nil},
		{"no tools", `{"tools":[]}`, nil},
		{"not an object", `[1,2]`, nil},
		{"tools not a list", `{"tools":{"name":"add"}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := slimToolsPage(json.RawMessage(tt.page))
			if tt.want == nil {
				if ok {
					t.Fatalf("got a rewritten page %s, want the page unchanged", got)
				}
				return
			}
			if !ok {
				t.Fatal("got the page unchanged, want it rewritten")
			}
			var page struct {
				Tools []struct {
					Name        string          `json:"name"`
					InputSchema json.RawMessage `json:"inputSchema"`
				} `json:"tools"`
				NextCursor string `json:"nextCursor"`
			}
			if err := json.Unmarshal(got, &page); err != nil {
				t.Fatalf("rewritten page does not decode: %v", err)
			}
			var orig struct {
				NextCursor string `json:"nextCursor"`
			}
			_ = json.Unmarshal([]byte(tt.page), &orig)
			if page.NextCursor != orig.NextCursor {
				t.Errorf("nextCursor: got %q, want %q", page.NextCursor, orig.NextCursor)
			}
			if len(page.Tools) != len(tt.want) {
				t.Fatalf("got %d tools, want %d", len(page.Tools), len(tt.want))
			}
			for _, tool := range page.Tools {
				if string(tool.InputSchema) != tt.want[tool.Name] {
					t.Errorf("%s: got input schema %s, want %s", tool.Name, tool.InputSchema, tt.want[tool.Name])
				}
			}
		})
	}
}

// A tool that declares an x-mcp-header parameter still gets the header
// mirrored (the test server rejects a 2026-07-28 call without it), and the
// catalog still carries every tool's full schema.
func TestHeaderAnnotatedTool(t *testing.T) {
	for _, tr := range []mcpconfig.Transport{mcpconfig.TransportStreamableHTTP, mcpconfig.TransportSSE} {
		t.Run(string(tr), func(t *testing.T) {
			ts := newTestMCP("hdr", 0)
			ts.srv.AddTool(mcp.NewToolWithRawSchema("route", "Routes by region",
				json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}},"required":["region"]}`)),
				func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return mcp.NewToolResultText("routed " + r.GetString("region", "")), nil
				})
			var srv mcpconfig.Server
			if tr == mcpconfig.TransportSSE {
				hh := newHTTPHarness(t, sseHandler(fixed(ts)))
				srv = mcpconfig.Server{Transport: tr, URL: "http://" + hh.addr + "/sse"}
			} else {
				hh := newHTTPHarness(t, streamableHandler(fixed(ts)))
				srv = mcpconfig.Server{Transport: tr, URL: "http://" + hh.addr + "/mcp"}
			}
			h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"hdr": srv}})
			h.waitReady(t)

			resp, err := call(t, h, "hdr.route", map[string]any{"region": "eu"})
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if got := text(resp); got != "routed eu" {
				t.Errorf("got %q, want %q", got, "routed eu")
			}
			if resp, err := call(t, h, "hdr.add", map[string]any{"a": 2, "b": 3}); err != nil || text(resp) != "5" {
				t.Errorf("add: got %q, %v; want 5", text(resp), err)
			}
			// The catalog keeps the full schemas, whatever mcp-go was given.
			for _, tool := range h.svc.cat.list("hdr") {
				props := tool.GetInputSchema().GetFields()["properties"].GetStructValue().GetFields()
				switch tool.GetName() {
				case "add":
					if props["a"] == nil || props["b"] == nil {
						t.Errorf("add: catalog schema lost its properties: %v", tool.GetInputSchema())
					}
				case "route":
					if props["region"].GetStructValue().GetFields()["x-mcp-header"].GetStringValue() != "Region" {
						t.Errorf("route: catalog schema lost its annotation: %v", tool.GetInputSchema())
					}
				}
			}
			// Validation still uses the full schema.
			if _, err := call(t, h, "hdr.add", map[string]any{"a": "two", "b": 3}); status.Code(err) != codes.InvalidArgument {
				t.Errorf("add with a string: got %v, want InvalidArgument", err)
			}
		})
	}
}
