package app

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// Tool-name rules of the model APIs MCP clients forward tools to: OpenAI's function names
// (platform.openai.com/docs/api-reference/chat/create, tools[].function.name) and Anthropic's
// tool names (docs.anthropic.com/en/api/messages, tools[].name) are both ^[a-zA-Z0-9_-]{1,64}$.
var (
	openAIName    = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	anthropicName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

// mcpClient connects an mcp-go client to url at protocol version (modern or legacy) with token.
func mcpClient(t *testing.T, url, version, token string) *client.Client {
	t.Helper()
	var topts []transport.StreamableHTTPCOption
	if token != "" {
		topts = append(topts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	if version != mcp.LATEST_PROTOCOL_VERSION {
		topts = append(topts, transport.WithContinuousListening())
	}
	tr, err := transport.NewStreamableHTTP(url, topts...)
	if err != nil {
		t.Fatal(err)
	}
	var copts []client.ClientOption
	if version != mcp.LATEST_PROTOCOL_VERSION {
		copts = append(copts, client.WithProtocolVersion(version))
	}
	c := client.NewClient(tr, copts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The transport's streams (SSE, the GET stream) live as long as Start's context.
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = version
	req.Params.ClientInfo = mcp.Implementation{Name: "toolmesh-test", Version: "0"}
	res, err := c.Initialize(ctx, req)
	if err != nil {
		t.Fatalf("initialize %s at %s: %v", url, version, err)
	}
	if res.ProtocolVersion != version {
		t.Fatalf("negotiated %s, want %s", res.ProtocolVersion, version)
	}
	return c
}

// waitMCPTools waits until the MCP endpoint at url lists every tool of want to token: /readyz
// does not wait for every server's tools, and the MCP face publishes a change of the catalog a
// moment after the executor has it.
func waitMCPTools(t *testing.T, url, token string, want ...string) {
	t.Helper()
	c := mcpClient(t, url, mcp.LATEST_PROTOCOL_VERSION, token)
	eventually.Check(t, 30*time.Second, fmt.Sprintf("%v listed on %s", want, url), func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			return err.Error()
		}
		got := names(list.Tools)
		for _, w := range want {
			if !slices.Contains(got, w) {
				return fmt.Sprintf("listed %v, no %s", got, w)
			}
		}
		return ""
	})
}

// checkedIDs maps each tool's name to the toolmesh id in its _meta, checking the name against
// OpenAI's and Anthropic's rules.
func checkedIDs(t *testing.T, tools []mcp.Tool) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, tool := range tools {
		if !openAIName.MatchString(tool.Name) || !anthropicName.MatchString(tool.Name) {
			t.Errorf("tool name %q breaks OpenAI's or Anthropic's rule", tool.Name)
		}
		if tool.Meta != nil {
			ids[tool.Name], _ = tool.Meta.AdditionalFields["toolmesh/id"].(string)
		}
	}
	return ids
}

func callText(t *testing.T, c *client.Client, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPCatalog lists and calls the demo servers' tools through /mcp with mcp-go's client,
// at each protocol era.
func TestMCPCatalog(t *testing.T) {
	m := startMesh(t)
	waitMCPTools(t, m.base+"/mcp", "", "calculator__add")
	for _, version := range []string{mcp.LATEST_PROTOCOL_VERSION, "2025-11-25", "2025-06-18"} {
		t.Run(version, func(t *testing.T) {
			c := mcpClient(t, m.base+"/mcp", version, "")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			ids := checkedIDs(t, list.Tools)
			if ids["calculator__add"] != "calculator.add" {
				t.Fatalf("calculator__add has id %q; tools: %v", ids["calculator__add"], ids)
			}
			res := callText(t, c, "calculator__add", map[string]any{"a": 2, "b": 3})
			if res.IsError || textOf(res) != "5" {
				t.Errorf("calculator__add(2,3) = %q (isError %v), want 5", textOf(res), res.IsError)
			}
			// Arguments the schema refuses come back as a tool error the model can read.
			res = callText(t, c, "calculator__add", map[string]any{"a": "two"})
			if !res.IsError || !strings.Contains(textOf(res), "a") {
				t.Errorf("bad arguments: isError %v, %q", res.IsError, textOf(res))
			}
		})
	}
}

// TestMCPTokenScope: over MCP, a token scoped to one server sees and calls only that server's
// tools, in every view; a request without a token is told where the endpoint's resource
// metadata is.
func TestMCPTokenScope(t *testing.T) {
	const root, calc = "root-token-0123456789abcdef", "calc-token-0123456789abcdef"
	t.Setenv("TOOLMESH_API_TOKENS", "root:"+root+",calc:"+calc)
	cfg := policyConfig(t, &notes{}, `policy:
  tokens:
    root: {call: ["*"], query: true}
    calc: {call: [calculator]}
`)
	m := startMeshToken(t, root, "--config="+cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	waitMCPTools(t, m.base+"/mcp", root, "calculator__add", "sqlite__list_tables", "notes__fetch_article")

	for _, version := range []string{mcp.LATEST_PROTOCOL_VERSION, "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			c := mcpClient(t, m.base+"/mcp", version, calc)
			list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Tools) == 0 {
				t.Fatal("calc lists no tool")
			}
			for _, tool := range list.Tools {
				if !strings.HasPrefix(tool.Name, "calculator__") {
					t.Errorf("calc lists %s; want only calculator's tools", tool.Name)
				}
			}
			if res := callText(t, c, "calculator__add", map[string]any{"a": 2, "b": 3}); res.IsError || textOf(res) != "5" {
				t.Errorf("calc calls calculator__add: %q (isError %v)", textOf(res), res.IsError)
			}
			req := mcp.CallToolRequest{}
			req.Params.Name = "sqlite__list_tables"
			if res, err := c.CallTool(ctx, req); err == nil && !res.IsError {
				t.Errorf("calc called sqlite__list_tables: %q", textOf(res))
			}

			s := mcpClient(t, m.base+"/mcp/search", version, calc)
			res := callText(t, s, "search_tools", map[string]any{"query": "list the database tables", "k": 50})
			if strings.Contains(textOf(res), "sqlite.") {
				t.Errorf("calc's search_tools found sqlite's tools: %.300s", textOf(res))
			}
			res = callText(t, s, "call_tool", map[string]any{"tool": "sqlite.list_tables", "arguments": map[string]any{}})
			if !res.IsError || strings.Contains(textOf(res), "employees") {
				t.Errorf("calc's call_tool sqlite.list_tables: %q (isError %v); want a refusal", textOf(res), res.IsError)
			}
		})
	}

	code, body := do(t, calc, http.MethodPost, m.base+"/mcp/servers/sqlite", `{}`)
	if code != http.StatusNotFound {
		t.Errorf("calc POST /mcp/servers/sqlite: %d %s; want 404", code, body)
	}
	one := mcpClient(t, m.base+"/mcp/servers/calculator", mcp.LATEST_PROTOCOL_VERSION, calc)
	if list, err := one.ListTools(ctx, mcp.ListToolsRequest{}); err != nil || !slices.Contains(names(list.Tools), "add") {
		t.Errorf("calc on /mcp/servers/calculator: %v %v; want its tools under their own names (add)", err, list)
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.base+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ch := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(ch, "resource_metadata=") {
		t.Errorf("POST /mcp without a token: %d, WWW-Authenticate %q; want 401 naming the resource metadata", resp.StatusCode, ch)
	}
}
