package app

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// syntaxCases are config files with a mistake in them, each with what its error must say: the
// file, the line and column, and what was expected there (a truncated mcp.json used to say only
// "unexpected EOF"; YAML errors named a line, often the wrong one, and no column).
type syntaxCase struct {
	name     string
	config   string // the --config file under testdata/syntax, or ""
	mcp      string // the --mcp-config file under testdata/syntax, or ""
	wantErrs []string
}

var syntaxCases = []syntaxCase{
	{"mcp.json cut short", "", "truncated-mcp.json", []string{
		"testdata/syntax/truncated-mcp.json: mcp config: line 6, column 62: unexpected end of file (was it cut short?)",
		`expected the closing '"' of the string that starts at line 6, column 47`}},
	{"YAML cut short in a quoted string", "truncated-quote.yaml", "", []string{
		"config testdata/syntax/truncated-quote.yaml: line 3, column 1: the file ends inside the quoted string that starts at line 2, column 14 (was it cut short?): expected its closing quote"}},
	{"YAML cut short in a list", "flow-unclosed.yaml", "", []string{
		"config testdata/syntax/flow-unclosed.yaml: line 5, column 1: the file ends inside the list that starts at line 4, column 11 (was it cut short?): expected ',' or ']'"}},
	{"YAML indented wrong", "bad-indent.yaml", "", []string{
		"config testdata/syntax/bad-indent.yaml: line 3, column 2: did not find expected key (in the map that starts at line 1, column 1)",
		"is this line indented as the keys above it?"}},
	{"YAML indented with a tab", "tab.yaml", "", []string{
		"config testdata/syntax/tab.yaml: line 2, column 1: found character that cannot start any token: YAML indents with spaces, not tabs"}},
	{"YAML that is a list", "a-list.yaml", "", []string{
		"config testdata/syntax/a-list.yaml: line 1, column 1: the file is a list: expected a map of settings (keys are flag names, plus mcpServers and policy)"}},
	{"mcpServers that is a list", "servers-list.yaml", "", []string{
		"config testdata/syntax/servers-list.yaml: line 4, column 3: mcpServers is a list: expected a map of server name to server"}},
	{"an unknown key", "unknown-key.yaml", "", []string{
		`config testdata/syntax/unknown-key.yaml: line 3, column 3: unknown key "api.htp-addr"`}},
	{"a bad value", "bad-value.yaml", "", []string{
		`config testdata/syntax/bad-value.yaml: line 2, column 17: api.call-timeout: parse error: expected a duration like "30s" or "2m"`}},
	{"a bad policy key", "bad-policy.yaml", "", []string{
		"config testdata/syntax/bad-policy.yaml: line 4, column 7: policy.tokens.ci-bot.cal: unknown key"}},
}

func (tc syntaxCase) paths() (config, mcp string) {
	if tc.config != "" {
		config = filepath.Join("testdata", "syntax", tc.config)
	}
	if tc.mcp != "" {
		mcp = filepath.Join("testdata", "syntax", tc.mcp)
	}
	return config, mcp
}

func checkSyntaxErr(t *testing.T, what string, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error = %q\nwant it to contain %q", what, err, w)
		}
	}
}

// TestConfigSyntaxErrors: at start.
func TestConfigSyntaxErrors(t *testing.T) {
	for _, tc := range syntaxCases {
		t.Run(tc.name, func(t *testing.T) {
			config, mcp := tc.paths()
			var args []string
			if config != "" {
				args = append(args, "--config", config)
			}
			if mcp != "" {
				args = append(args, "--mcp-config", mcp)
			}
			_, err := load(t, args...)
			checkSyntaxErr(t, "Load", err, tc.wantErrs)
		})
	}
}

// TestReloadSyntaxErrors: a reload reads the files as the start does, and its refusal says the
// same.
func TestReloadSyntaxErrors(t *testing.T) {
	for _, tc := range syntaxCases {
		if strings.Contains(tc.name, "unknown key") || strings.Contains(tc.name, "bad value") || strings.Contains(tc.name, "policy") {
			continue // a reload reads only the mcp servers of the YAML file
		}
		t.Run(tc.name, func(t *testing.T) {
			config, mcp := tc.paths()
			r := newReloader(Config{ConfigFile: config, MCPConfig: mcp}, nil, nil, slog.New(slog.DiscardHandler))
			r.settle = func() {}
			checkSyntaxErr(t, "reload", r.reload(true), tc.wantErrs)
		})
	}
}
