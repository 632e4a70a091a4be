package chartcheck

import (
	"strings"
	"testing"
)

// TestAPIWithoutMCPConfig: the executor owns the MCP servers' rules (allowedTools,
// excludedTools, allowDestructive, rateLimit) and publishes them with its catalog; the api
// decides by what it publishes. So only the executor reads mcp.json: the api is given no
// --mcp-config, mounts no mcp.json and none of the servers' secrets, and the values' rules are
// in the file the executor reads.
func TestAPIWithoutMCPConfig(t *testing.T) {
	for _, name := range cases {
		t.Run(name, func(t *testing.T) {
			r := render(t, valuesFile(t, name))
			mcpConfigOf(t, r, "executor")
			api := container(t, r.deployments["api"], "api")
			for _, a := range api.Args {
				if strings.HasPrefix(a, "--mcp-config") {
					t.Errorf("the api is given %s; the servers' rules come from the executor", a)
				}
			}
			for path, f := range configMapFiles(t, r, "api") {
				if strings.HasSuffix(f.key, "/mcp.json") {
					t.Errorf("the api mounts %s at %s; it reads no MCP server config", f.key, path)
				}
			}
			if name != "options" {
				return
			}
			// The values' rules are in the file the executor reads.
			gh := r.mcpServers(t)["github"]
			if gh["allowDestructive"] != true {
				t.Errorf("mcpServers.github = %v, want allowDestructive: true from the values", gh)
			}
			if envVar(api, "GITHUB_TOKEN") != nil {
				t.Error("the api gets GITHUB_TOKEN: it needs none of the servers' secrets")
			}
		})
	}
}

// mcpConfigOf is the ConfigMap key (ConfigMap/key) and content of the file component's
// --mcp-config names, as its container has it mounted.
func mcpConfigOf(t *testing.T, r *rendered, component string) (key, data string) {
	t.Helper()
	c := container(t, r.deployments[component], component)
	var path string
	for _, a := range c.Args {
		if p, ok := strings.CutPrefix(a, "--mcp-config="); ok {
			path = p
		}
	}
	if path == "" {
		t.Fatalf("%s: args %v have no --mcp-config", component, c.Args)
	}
	f, ok := configMapFiles(t, r, component)[path]
	if !ok {
		t.Fatalf("%s: --mcp-config=%s, but no ConfigMap file is mounted there", component, path)
	}
	return f.key, f.data
}
