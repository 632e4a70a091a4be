package chartcheck

import (
	"strings"
	"testing"
)

// TestAPIGetsMCPConfig: the api decides what the model may be offered and called by the MCP
// servers' rules (allowedTools, excludedTools, and allowDestructive, by which only the api
// decides what the model is offered), so its container reads the same mcp.json as the executor's: --mcp-config names
// a file mounted from the same ConfigMap key. Without it a server's allowDestructive: true in
// the values would reach the executor only, and the api would go on refusing those tools.
func TestAPIGetsMCPConfig(t *testing.T) {
	for _, name := range cases {
		t.Run(name, func(t *testing.T) {
			r := render(t, valuesFile(t, name))
			exeKey, exeData := mcpConfigOf(t, r, "executor")
			apiKey, apiData := mcpConfigOf(t, r, "api")
			if apiKey != exeKey || apiData != exeData {
				t.Errorf("api reads %s, executor reads %s: want the same MCP server config", apiKey, exeKey)
			}
			if name != "options" {
				return
			}
			// The values' rules are in the file both read.
			gh := r.mcpServers(t)["github"]
			if gh["allowDestructive"] != true {
				t.Errorf("mcpServers.github = %v, want allowDestructive: true from the values", gh)
			}
			// The api is given none of the executor's secrets to read the rules.
			api := container(t, r.deployments["api"], "api")
			if envVar(api, "GITHUB_TOKEN") != nil {
				t.Error("the api gets GITHUB_TOKEN: it reads only the rules and needs none of the servers' secrets")
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
