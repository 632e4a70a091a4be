package app

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// envStdioServer re-executes the test binary as a stdio MCP server (TestMain), as a Claude
// Desktop config starts one with command, args and env.
const envStdioServer = "TOOLMESH_APP_TEST_STDIO_SERVER"

// serveStdioDouble serves a GitHub-like MCP server over stdin and stdout.
func serveStdioDouble() int {
	m := mcpserver.NewMCPServer("github-mcp-server", "0.1.0", mcpserver.WithToolCapabilities(false))
	m.AddTool(mcp.NewTool("search_repositories", mcp.WithDescription("Search GitHub repositories by name."),
		mcp.WithString("query", mcp.Required()), mcp.WithReadOnlyHintAnnotation(true)), constText("toolmesh/toolmesh"))
	m.AddTool(mcp.NewTool("delete_repository", mcp.WithDescription("Delete a GitHub repository."),
		mcp.WithString("name", mcp.Required())), constText("deleted"))
	if err := mcpserver.ServeStdio(m); err != nil {
		fmt.Fprintln(os.Stderr, "stdio server:", err)
		return 1
	}
	return 0
}

// claudeDesktopConfig is a claude_desktop_config.json as people write them: names with capitals
// and spaces, a stdio server started with npx-like command, args and env, a remote one, and keys
// of Claude Desktop's own beside mcpServers.
func claudeDesktopConfig(t *testing.T, braveURL, extra string) string {
	t.Helper()
	bin, err := json.Marshal(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{
  "globalShortcut": "Ctrl+Space",
  "mcpServers": {
    "GitHub": {
      "command": %s,
      "args": ["-test.run=^$"],
      "env": {"%s": "1", "GITHUB_PERSONAL_ACCESS_TOKEN": "not-a-real-token"},
      "allowedTools": ["search_*"]
    },
    "Brave Search": {"type": "http", "url": %q}%s
  }
}
`, bin, envStdioServer, braveURL, extra)
}

// TestClaudeDesktopNames (issue 31 item 7): a Claude Desktop config whose servers are named
// "GitHub" and "Brave Search" was refused whole ("name: must match [a-z0-9_-]+"). Now `up`
// serves them as github and brave-search: the tool ids, the server's allowedTools, a policy
// scope naming the served name, /v1/servers (with the name the config gives), the MCP face and
// the log's one warning per server agree, and a reload that leaves them as they are warns no
// more.
func TestClaudeDesktopNames(t *testing.T) {
	dir := t.TempDir()
	mcpFile := filepath.Join(dir, "claude_desktop_config.json")
	brave := serveTools(t, "brave", []mcpserver.ServerTool{{Tool: mcp.NewTool("brave_web_search",
		mcp.WithDescription("Search the web with Brave."), mcp.WithString("query", mcp.Required()), mcp.WithReadOnlyHintAnnotation(true)),
		Handler: constText("three results")}})
	if err := os.WriteFile(mcpFile, []byte(claudeDesktopConfig(t, brave, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "toolmesh.yaml")
	if err := os.WriteFile(cfgFile, []byte("policy:\n  default: {call: [github, calculator], list: ['*'], query: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncLog{}
	a, _, err := launch(t, meshArgs("--mcp-config", mcpFile, "--config", cfgFile), slog.New(slog.NewTextHandler(logs, nil)), nil, allTargets...)
	if err != nil {
		t.Fatal(err)
	}
	base := endpoint(a, "REST")
	waitReady(t, base, "")

	var tools struct{ Tools []struct{ ID string } }
	eventually.Check(t, 30*time.Second, "the servers' tools listed", func() string {
		code, body := do(t, "", http.MethodGet, base+"/v1/tools", "")
		tools.Tools = nil
		if code != http.StatusOK || json.Unmarshal(body, &tools) != nil {
			return fmt.Sprintf("%d %s", code, body)
		}
		var ids []string
		for _, tool := range tools.Tools {
			ids = append(ids, tool.ID)
		}
		if !slices.Contains(ids, "github.search_repositories") || !slices.Contains(ids, "brave-search.brave_web_search") {
			return fmt.Sprintf("tools %v", ids)
		}
		if slices.Contains(ids, "github.delete_repository") {
			return "github.delete_repository is listed: GitHub's allowedTools did not apply"
		}
		return ""
	})

	code, body := do(t, "", http.MethodPost, base+"/v1/tools/github/search_repositories:call", `{"arguments":{"query":"toolmesh"}}`)
	if code != http.StatusOK || !strings.Contains(string(body), "toolmesh/toolmesh") {
		t.Errorf("call github.search_repositories: %d %s", code, body)
	}
	// The scope names github (the served name); brave-search is outside it.
	if code, body := do(t, "", http.MethodPost, base+"/v1/tools/brave-search/brave_web_search:call", `{"arguments":{"query":"x"}}`); code != http.StatusForbidden {
		t.Errorf("call brave-search.brave_web_search outside the scope: %d %s; want 403", code, body)
	}

	var servers struct {
		Servers []struct {
			Name       string `json:"name"`
			ConfigName string `json:"config_name"`
		}
	}
	code, body = do(t, "", http.MethodGet, base+"/v1/servers", "")
	if code != http.StatusOK || json.Unmarshal(body, &servers) != nil {
		t.Fatalf("/v1/servers: %d %s", code, body)
	}
	given := map[string]string{}
	for _, s := range servers.Servers {
		given[s.Name] = s.ConfigName
	}
	if given["github"] != "GitHub" || given["brave-search"] != "Brave Search" || given["calculator"] != "" {
		t.Errorf("/v1/servers: %s; want github given as GitHub, brave-search as Brave Search", body)
	}

	waitMCPTools(t, base+"/mcp", "", "github__search_repositories")

	warned := func(given, served string) int {
		return strings.Count(logs.String(), fmt.Sprintf(`\"%s\" is served as \"%s\"`, given, served))
	}
	if n, m := warned("GitHub", "github"), warned("Brave Search", "brave-search"); n != 1 || m != 1 {
		t.Errorf("warned %d times of GitHub and %d of Brave Search; want once each. Log:\n%s", n, m, logs)
	}

	// A reload that adds a server leaves GitHub and Brave Search as they are: no new warning.
	notion := serveTools(t, "notion", []mcpserver.ServerTool{{Tool: mcp.NewTool("notion_search",
		mcp.WithDescription("Search Notion pages."), mcp.WithReadOnlyHintAnnotation(true)), Handler: constText("a page")}})
	extra := fmt.Sprintf(",\n    \"Notion (work)\": {\"url\": %q}", notion)
	if err := os.WriteFile(mcpFile+".new", []byte(claudeDesktopConfig(t, brave, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(mcpFile+".new", mcpFile); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, 30*time.Second, "notion-work.notion_search listed after the reload", func() string {
		code, body := do(t, "", http.MethodGet, base+"/v1/tools", "")
		if code != http.StatusOK || !strings.Contains(string(body), `"notion-work.notion_search"`) {
			return fmt.Sprintf("%d %s", code, body)
		}
		return ""
	})
	if n, m := warned("GitHub", "github"), warned("Notion (work)", "notion-work"); n != 1 || m != 1 {
		t.Errorf("after the reload, warned %d times of GitHub and %d of Notion (work); want once each. Log:\n%s", n, m, logs)
	}
}

// TestConfigNameClash: names that would be served as one are refused, naming both, within a
// file and across the two files.
func TestConfigNameClash(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	one := write("one.json", `{"mcpServers": {"GitHub": {"url": "https://a.example/mcp"}, "github": {"url": "https://b.example/mcp"}}}`)
	mcpFile := write("mcp.json", `{"mcpServers": {"GitHub": {"url": "https://a.example/mcp"}}}`)
	yamlFile := write("toolmesh.yaml", "mcpServers:\n  github: {url: 'https://b.example/mcp'}\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"in one file", []string{"--mcp-config", one}, `mcp servers "GitHub" and "github" are both served as "github"`},
		{"across the files", []string{"--config", yamlFile, "--mcp-config", mcpFile},
			fmt.Sprintf(`mcp servers "github" in %s and "GitHub" in %s are both served as "github"`, yamlFile, mcpFile)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}
