package mcpface

import (
	"net/http"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/policy"
)

// TestUnknownServerView: /mcp/servers/S for a server that does not exist (a typo in `toolmesh
// connect --server`) is a 404 naming the servers there are, closest first, and only those the
// token may list: a server it may not list reads exactly as one that does not exist (issue 31
// item 6).
func TestUnknownServerView(t *testing.T) {
	exec := newExecutorDouble(testTool(t, "one.x"), testTool(t, "two.z"), testTool(t, "three.w"))
	exec.servers = []string{"one", "two", "three"}
	h := newHarness(t, exec, harnessOptions{
		tokens: "narrow:narrow-token-0123456789,wide:wide-token-0123456789",
		policy: policy.Config{Tokens: map[string]policy.Scope{"narrow": {Call: []string{"one"}}, "wide": {Call: []string{"*"}}}},
	})
	const list = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	for _, tc := range []struct {
		token, server, want string
	}{
		{"wide-token-0123456789", "thre", `no MCP server \"thre\" (the servers: three, one, two)`},
		{"narrow-token-0123456789", "two", `no MCP server \"two\" (the servers: one)`},
		{"narrow-token-0123456789", "nosuch", `no MCP server \"nosuch\" (the servers: one)`},
		{"narrow-token-0123456789", "Bad.Name", `no MCP server \"Bad.Name\" (the servers: one)`},
	} {
		code, body := post(t, h.url+ServersPath+tc.server, tc.token, list)
		if code != http.StatusNotFound || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s as %s: %d %s; want 404 with %s", ServersPath+tc.server, tc.token[:6], code, body, tc.want)
		}
	}
}
