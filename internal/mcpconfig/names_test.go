package mcpconfig

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestServedName: the one rule that turns the names Claude Desktop, Cursor and VS Code accept
// (any JSON string) into server names tool ids can hold.
func TestServedName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"github", "github"},
		{"my_server-2", "my_server-2"},
		{"-x-", "-x-"}, // already valid: kept as it is
		{"GitHub", "github"},
		{"Azure MCP Server", "azure-mcp-server"},
		{"microsoft.docs.mcp", "microsoft-docs-mcp"},
		{"io.github.user/weather", "io-github-user-weather"},
		{"@modelcontextprotocol/server-github", "modelcontextprotocol-server-github"},
		{" Notion ", "notion"},
		{"Brave  Search", "brave-search"},
		{"a -- b", "a----b"}, // each run of other characters is one "-"; a "-" of the name is kept
		{"Café Tools", "caf-tools"},
		{"日本語", ""},
		{"!!!", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := ServedName(tt.in); got != tt.want {
			t.Errorf("ServedName(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestParseConfigNames: a Claude Desktop config with the names people give servers there loads,
// each server under its served name with the name it was given kept beside it and a warning
// (which the executor logs once, at start) saying what it is served as; a valid name is
// untouched and silent. A disabled entry does not clash.
func TestParseConfigNames(t *testing.T) {
	servers, err := Parse(readFixture(t, "claude_desktop_names.json"), lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"github":                                 "GitHub",
		"azure-mcp-server":                       "Azure MCP Server",
		"microsoft-docs-mcp":                     "microsoft.docs.mcp",
		"modelcontextprotocol-server-filesystem": "@modelcontextprotocol/server-filesystem",
		"calculator":                             "",
		"old-server":                             "",
	}
	if got := Names(servers); !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("servers %v; want %v", got, want)
	}
	for name, configName := range want {
		s := servers[name]
		if s.Name != name || s.ConfigName != configName {
			t.Errorf("servers[%q]: Name %q, ConfigName %q; want %q, %q", name, s.Name, s.ConfigName, name, configName)
		}
		note := slices.ContainsFunc(s.Warnings, func(w string) bool { return strings.Contains(w, "is served as") })
		switch {
		case configName != "" && !slices.Contains(s.Warnings, servedNote(configName, name)):
			t.Errorf("servers[%q].Warnings = %q; want %q", name, s.Warnings, servedNote(configName, name))
		case configName == "" && note:
			t.Errorf("servers[%q].Warnings = %q; a valid name needs no note", name, s.Warnings)
		}
	}
	if gh := servers["github"]; !slices.Equal(gh.AllowedTools, []string{"search_*"}) || gh.Env["GITHUB_PERSONAL_ACCESS_TOKEN"] != secretToken {
		t.Errorf("github lost its settings: %s", fields(gh))
	}
	if s := servers["github"].String(); !strings.Contains(s, `"GitHub"`) {
		t.Errorf("String() = %q; want the name the config gives", s)
	}

	// The api reads the rules alone, under the same names.
	rules, err := ParseRules(readFixture(t, "claude_desktop_names.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := rules["github"]; r.ConfigName != "GitHub" || !slices.Equal(r.AllowedTools, []string{"search_*"}) {
		t.Errorf("rules[github] = %s; want ConfigName GitHub and its allowedTools", fields(r))
	}

	// Inline YAML too.
	yml, err := FromYAML(map[string]any{"Brave Search": map[string]any{"url": "https://example.com/mcp"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := yml["brave-search"]; !ok || s.ConfigName != "Brave Search" {
		t.Errorf("FromYAML = %v; want brave-search given as Brave Search", yml)
	}
}

// TestParseNameClash: only names that cannot be served without a clash are refused, naming
// both; an entry's other errors name it as the config does.
func TestParseNameClash(t *testing.T) {
	path := filepath.Join("testdata", "bad_name_clash.json")
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load: no error")
	}
	msg := err.Error()
	for _, w := range []string{
		path + ": ",
		`mcp servers "GitHub" and "github" are both served as "github"`,
		`mcp servers "My.Notes" and "my notes" are both served as "my-notes"`,
		`mcp server "Brave Search": url: must be an absolute http or https URL`,
		`mcp server "日本語": name: leaves nothing to serve it as`,
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("error = %q\nwant it to contain %q", msg, w)
		}
	}
	if strings.Contains(msg, `"brave-search"`) {
		t.Errorf("error = %q; an entry's errors name it as the config does", msg)
	}
}
