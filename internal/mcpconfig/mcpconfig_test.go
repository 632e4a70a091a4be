package mcpconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	secretToken   = "ghp_s3cr3tT0kenValue"
	secretSession = "sess-s3cr3t-9f8e"
	secretKey     = "fs-key-s3cr3t-42"
)

var testEnv = map[string]string{
	"GITHUB_TOKEN":   secretToken,
	"GITHUB_SESSION": secretSession,
	"FS_API_KEY":     secretKey,
	"EMPTY":          "",
}

func lookup(name string) (string, bool) {
	v, ok := testEnv[name]
	return v, ok
}

var secrets = []string{secretToken, secretSession, secretKey}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseFixtures(t *testing.T) {
	tests := []struct {
		file string
		want map[string]Server
	}{
		{
			file: "claude_desktop.json",
			want: map[string]Server{
				"calculator": {Name: "calculator", Transport: TransportSSE, URL: "http://127.0.0.1:7801/sse"},
				"converter": {Name: "converter", Transport: TransportSSE, URL: "http://127.0.0.1:7802/mcp",
					Timeout: 15 * time.Second, MaxConcurrency: 4},
				"github": {Name: "github", Transport: TransportStreamableHTTP,
					URL:             "https://api.example.com/mcp?session=" + secretSession,
					Headers:         map[string]string{"Authorization": "Bearer " + secretToken},
					Timeout:         45 * time.Second,
					ProtocolVersion: "2025-06-18"},
				"filesystem": {Name: "filesystem", Transport: TransportStdio, Command: "/usr/local/bin/npx",
					Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/tmp"},
					Env:  map[string]string{"API_KEY": secretKey, "LOG_LEVEL": "info"}},
			},
		},
		{
			file: "vscode.json",
			want: map[string]Server{
				"remote-api": {Name: "remote-api", Transport: TransportStreamableHTTP, URL: "https://mcp.example.com/v1/mcp",
					Headers: map[string]string{"X-Api-Key": secretToken}},
				"py_tools": {Name: "py_tools", Transport: TransportStdio, Command: "python3",
					Args: []string{"-m", "tools", "--url=https://example.com/a,b"}},
				"events": {Name: "events", Transport: TransportStreamableHTTP, URL: "https://events.example.com/sse"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Parse(readFixture(t, tt.file), lookup)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				for _, n := range Names(tt.want) {
					if !reflect.DeepEqual(got[n], tt.want[n]) {
						t.Errorf("server %s:\n got %#v\nwant %#v", n, fields(got[n]), fields(tt.want[n]))
					}
				}
				t.Errorf("got servers %v, want %v", Names(got), Names(tt.want))
			}
		})
	}
}

// fields prints every field, bypassing the redacting GoString, for test diffs only.
func fields(s Server) string {
	type plain Server
	return fmt.Sprintf("%+v", plain(s))
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string // substrings the error must contain
	}{
		{"name with nothing to serve", `{"mcpServers":{"..":{"url":"http://h/sse"}}}`,
			[]string{`mcp server "..": name: leaves nothing to serve it as`, "SERVER.TOOL"}},
		{"relative url", `{"mcpServers":{"calc":{"url":"/sse"}}}`,
			[]string{`mcp server "calc": url: must be an absolute http or https URL`}},
		{"ftp url", `{"mcpServers":{"calc":{"url":"ftp://h/x"}}}`,
			[]string{`mcp server "calc": url: must be an absolute http or https URL`}},
		{"no host", `{"mcpServers":{"calc":{"url":"http:///mcp"}}}`,
			[]string{`mcp server "calc": url: must be an absolute http or https URL`}},
		{"stdio without command", `{"mcpServers":{"calc":{"type":"stdio"}}}`,
			[]string{`mcp server "calc": command: required for stdio servers`}},
		{"url and command", `{"mcpServers":{"calc":{"url":"http://h/mcp","command":"calc"}}}`,
			[]string{`mcp server "calc": url: cannot be combined with command`}},
		{"neither", `{"mcpServers":{"calc":{}}}`,
			[]string{`mcp server "calc": url: a server needs a url`}},
		{"remote with command", `{"mcpServers":{"calc":{"transport":"sse","command":"calc"}}}`,
			[]string{`mcp server "calc": url: required for transport sse`, `mcp server "calc": command: not allowed for transport sse`}},
		{"stdio with url", `{"mcpServers":{"calc":{"type":"stdio","url":"http://h/mcp"}}}`,
			[]string{`mcp server "calc": url: not allowed for stdio servers`}},
		{"unknown transport", `{"mcpServers":{"calc":{"transport":"websocket","url":"http://h/"}}}`,
			[]string{`mcp server "calc": transport: unknown transport "websocket"`}},
		{"conflicting transports", `{"mcpServers":{"calc":{"transport":"sse","type":"http","url":"http://h/"}}}`,
			[]string{`mcp server "calc": type: streamable-http conflicts with transport sse`}},
		{"zero timeout", `{"mcpServers":{"calc":{"url":"http://h/","timeout":0}}}`,
			[]string{`mcp server "calc": timeout: must be > 0`}},
		{"negative timeout", `{"mcpServers":{"calc":{"url":"http://h/","timeout":"-3s"}}}`,
			[]string{`mcp server "calc": timeout: must be > 0`}},
		{"bad timeout string", `{"mcpServers":{"calc":{"url":"http://h/","timeout":"soon"}}}`,
			[]string{`mcp server "calc": timeout: must be a duration like "30s"`}},
		{"timeout wrong type", `{"mcpServers":{"calc":{"url":"http://h/","timeout":true}}}`,
			[]string{`mcp server "calc": timeout: must be a duration`, "a boolean"}},
		{"huge timeout", `{"mcpServers":{"calc":{"url":"http://h/","timeout":1e300}}}`,
			[]string{`mcp server "calc": timeout: must be a reasonable number of seconds`}},
		{"negative maxConcurrency", `{"mcpServers":{"calc":{"url":"http://h/","maxConcurrency":-1}}}`,
			[]string{`mcp server "calc": maxConcurrency: must be >= 0`}},
		{"fractional maxConcurrency", `{"mcpServers":{"calc":{"url":"http://h/","maxConcurrency":1.5}}}`,
			[]string{`mcp server "calc": maxConcurrency: must be an integer`}},
		{"string maxConcurrency", `{"mcpServers":{"calc":{"url":"http://h/","maxConcurrency":"4"}}}`,
			[]string{`mcp server "calc": maxConcurrency: must be an integer, not a string`}},
		{"bad protocolVersion", `{"mcpServers":{"calc":{"url":"http://h/","protocolVersion":"latest"}}}`,
			[]string{`mcp server "calc": protocolVersion: must be an MCP protocol version`}},
		{"unknown pinning", `{"mcpServers":{"calc":{"url":"http://h/","pinning":"strict"}}}`,
			[]string{`mcp server "calc": pinning: "strict" is not off, warn or enforce`}},
		{"pinning without a value", `{"mcpServers":{"calc":{"url":"http://h/","pinning":null}}}`,
			[]string{`mcp server "calc": pinning: has no value`}},
		{"maxResultBytes zero", `{"mcpServers":{"calc":{"url":"http://h/","maxResultBytes":0}}}`,
			[]string{`mcp server "calc": maxResultBytes: must be a whole number of bytes`}},
		{"maxResultBytes a string", `{"mcpServers":{"calc":{"url":"http://h/","maxResultBytes":"1MB"}}}`,
			[]string{`mcp server "calc": maxResultBytes: must be a whole number of bytes`}},
		{"rateLimit not an object", `{"mcpServers":{"calc":{"url":"http://h/","rateLimit":10}}}`,
			[]string{`mcp server "calc": rateLimit: must be {"calls": N, "per": "1m"}, not a number`}},
		{"rateLimit without calls", `{"mcpServers":{"calc":{"url":"http://h/","rateLimit":{"per":"1m"}}}}`,
			[]string{`mcp server "calc": rateLimit.calls: must be at least 1`}},
		{"rateLimit with a bad per", `{"mcpServers":{"calc":{"url":"http://h/","rateLimit":{"calls":5,"per":"soon"}}}}`,
			[]string{`mcp server "calc": rateLimit.per: must be a duration`}},
		{"rateLimit with a typo", `{"mcpServers":{"calc":{"url":"http://h/","rateLimit":{"calls":5,"per":"1m","burst":2}}}}`,
			[]string{`mcp server "calc": rateLimit.burst: unknown key`}},
		{"a tool's settings with a typo", `{"mcpServers":{"calc":{"url":"http://h/","tools":{"add":{"maxResultByte":5}}}}}`,
			[]string{`mcp server "calc": tools.add.maxResultByte: unknown key`}},
		{"a tool's bad rate limit", `{"mcpServers":{"calc":{"url":"http://h/","tools":{"add":{"rateLimit":{"calls":0,"per":"1s"}}}}}}`,
			[]string{`mcp server "calc": tools.add.rateLimit.calls: must be at least 1`}},
		{"excludedTools without a value", `{"mcpServers":{"calc":{"url":"http://h/","excludedTools":null}}}`,
			[]string{`mcp server "calc": excludedTools: has no value`}},
		{"allowedTools without a value", `{"mcpServers":{"calc":{"url":"http://h/","allowedTools":null}}}`,
			[]string{`mcp server "calc": allowedTools: has no value`}},
		{"allowDestructive without a value", `{"mcpServers":{"calc":{"url":"http://h/","allowDestructive":null}}}`,
			[]string{`mcp server "calc": allowDestructive: has no value`}},
		{"excludedTools not a list", `{"mcpServers":{"calc":{"url":"http://h/","excludedTools":"divide"}}}`,
			[]string{`mcp server "calc": excludedTools: must be a list of strings, not a string`}},
		{"empty allowedTools pattern", `{"mcpServers":{"calc":{"url":"http://h/","allowedTools":["add",""]}}}`,
			[]string{`mcp server "calc": allowedTools[1]: must not be empty`}},
		{"excludedTools pattern with a space", `{"mcpServers":{"calc":{"url":"http://h/","excludedTools":["a b"]}}}`,
			[]string{`mcp server "calc": excludedTools[0]: "a b" has a space or control character`}},
		{"allowDestructive wrong type", `{"mcpServers":{"calc":{"url":"http://h/","allowDestructive":"yes"}}}`,
			[]string{`mcp server "calc": allowDestructive: must be true or false, not a string`}},
		{"protocolVersion wrong type", `{"mcpServers":{"calc":{"url":"http://h/","protocolVersion":20250618}}}`,
			[]string{`mcp server "calc": protocolVersion: must be a string, not a number`}},
		{"url wrong type", `{"mcpServers":{"calc":{"url":7801}}}`,
			[]string{`mcp server "calc": url: must be a string, not a number`}},
		{"args wrong type", `{"mcpServers":{"calc":{"command":"calc","args":"-v"}}}`,
			[]string{`mcp server "calc": args: must be a list of strings, not a string`}},
		{"arg wrong type", `{"mcpServers":{"calc":{"command":"calc","args":["-p",8080]}}}`,
			[]string{`mcp server "calc": args[1]: must be a string, not a number`}},
		{"env wrong type", `{"mcpServers":{"calc":{"command":"calc","env":["A=1"]}}}`,
			[]string{`mcp server "calc": env: must be an object of strings, not a list`}},
		{"env value wrong type", `{"mcpServers":{"calc":{"command":"calc","env":{"DEBUG":true}}}}`,
			[]string{`mcp server "calc": env.DEBUG: must be a string, not a boolean`}},
		{"headers wrong type", `{"mcpServers":{"calc":{"url":"http://h/","headers":"x"}}}`,
			[]string{`mcp server "calc": headers: must be an object of strings`}},
		{"bad header name", `{"mcpServers":{"calc":{"url":"http://h/","headers":{"X Key":"v"}}}}`,
			[]string{`mcp server "calc": headers.X Key: header name must be an HTTP token`}},
		{"headers on stdio", `{"mcpServers":{"calc":{"command":"calc","headers":{"A":"b"}}}}`,
			[]string{`mcp server "calc": headers: only applies to remote`}},
		{"env on remote", `{"mcpServers":{"calc":{"url":"http://h/","env":{"A":"b"}}}}`,
			[]string{`mcp server "calc": env: only applies to stdio servers`}},
		{"disabled wrong type", `{"mcpServers":{"calc":{"url":"http://h/","disabled":"yes"}}}`,
			[]string{`mcp server "calc": disabled: must be true or false, not a string`}},
		{"entry not object", `{"mcpServers":{"calc":"http://h/sse"}}`,
			[]string{`mcp server "calc": must be an object`}},
		{"missing env var", `{"mcpServers":{"calc":{"url":"http://h/","headers":{"Authorization":"Bearer ${CALC_TOKEN}"}}}}`,
			[]string{`mcp server "calc": headers.Authorization: environment variable "CALC_TOKEN" is not set`}},
		{"missing env var in url", `{"mcpServers":{"calc":{"url":"${CALC_URL}"}}}`,
			[]string{`mcp server "calc": url: environment variable "CALC_URL" is not set`}},
		{"missing env var in command", `{"mcpServers":{"calc":{"command":"${CALC_BIN}"}}}`,
			[]string{`mcp server "calc": command: environment variable "CALC_BIN" is not set`}},
		{"missing env var in args", `{"mcpServers":{"calc":{"command":"calc","args":["--key","${CALC_KEY}"]}}}`,
			[]string{`mcp server "calc": args[1]: environment variable "CALC_KEY" is not set`}},
		{"missing env var in env", `{"mcpServers":{"calc":{"command":"calc","env":{"KEY":"${CALC_KEY}"}}}}`,
			[]string{`mcp server "calc": env.KEY: environment variable "CALC_KEY" is not set`}},
		{"unterminated var", `{"mcpServers":{"calc":{"url":"http://h/${HOST"}}}`,
			[]string{`mcp server "calc": url: unterminated "${"`}},
		{"invalid var name", `{"mcpServers":{"calc":{"url":"http://h/${1HOST}"}}}`,
			[]string{`mcp server "calc": url: invalid variable reference "${1HOST}"`}},
		{"vscode input", `{"servers":{"calc":{"url":"http://h/","headers":{"A":"${input:token}"}}}}`,
			[]string{`mcp server "calc": headers.A: ${input:token}: VS Code input prompts are not supported`}},
		{"both keys", `{"mcpServers":{},"servers":{}}`, []string{`both "mcpServers" and "servers"`}},
		{"no key", `{"tools":{}}`, []string{`no "mcpServers"`}},
		{"servers not object", `{"servers":[]}`, []string{`line 1, column 12: "servers" is a list: expected an object`}},
		{"top level array", `[]`, []string{"line 1, column 1: the top level is a list: expected a JSON object"}},
		{"empty", ``, []string{"line 1, column 1: the file is empty"}},
		{"trailing data", `{"servers":{}} {}`, []string{"line 1, column 16: '{' after the end of the top-level object"}},
		{"syntax", "{\n \"servers\": {\n  \"a\": {} \"b\": {}\n }\n}", []string{"line 3, column"}},
		{"unterminated comment", "{\"servers\": {}} /* x", []string{"line 1, column 17: unterminated /* comment"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.input), lookup)
			if err == nil {
				t.Fatalf("Parse = %v, nil; want an error containing %q", got, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error = %q\nwant it to contain %q", err, w)
				}
			}
			if got != nil {
				t.Errorf("got servers %v with error; want nil", got)
			}
		})
	}
}

// TestParseBadFiles checks that every problem in a file is reported, in name order, and that
// Load names the file. The files under syntax/ do not parse: each error names the line and
// column, and what was expected there (a file cut short used to say only "unexpected EOF").
func TestParseBadFiles(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"bad_both_keys.json", []string{`both "mcpServers" and "servers"`}},
		{"bad_syntax.json", []string{"line 4, column 5", "invalid character"}},
		{"bad_entries.json", []string{
			`mcp server "***": name: leaves nothing to serve it as`,
			`mcp server "nocmd": command: required for stdio servers`,
			`mcp server "nourl": url: must be an absolute http or https URL`,
			`mcp server "secret": headers.Authorization: environment variable "MISSING_TOKEN" is not set`,
			`mcp server "slow": timeout: must be > 0`,
		}},
		{"syntax/truncated_after_value.json", []string{"line 9, column 1: unexpected end of file (was it cut short?)",
			`expected ',' or '}' to close the object "github" opened at line 6, column 15`,
			`still open: "mcpServers" at line 2, column 17, the top level at line 1, column 1`}},
		{"syntax/truncated_in_string.json", []string{"line 4, column 30: unexpected end of file",
			`expected the closing '"' of the string that starts at line 4, column 14`}},
		{"syntax/truncated_after_key.json", []string{"line 4, column 12: unexpected end of file", `expected ':' after the key "url"`}},
		{"syntax/truncated_after_colon.json", []string{"line 4, column 14: unexpected end of file", `expected the value of "url"`}},
		{"syntax/truncated_in_list.json", []string{"line 5, column 30: unexpected end of file",
			`expected ',' or ']' to close the list "args" opened at line 5, column 15`}},
		{"syntax/empty.json", []string{`line 1, column 1: the file is empty: expected a JSON object like {"mcpServers": {...}}`}},
		{"syntax/only_comment.json", []string{`line 2, column 1: the file holds no JSON value, only comments: expected a JSON object like {"mcpServers": {...}}`}},
		{"syntax/extra_data.json", []string{"line 6, column 1: '}' after the end of the top-level object: expected the end of the file"}},
		{"syntax/top_level_list.json", []string{"line 1, column 1: the top level is a list: expected a JSON object"}},
		{"syntax/servers_not_object.json", []string{`line 3, column 17: "mcpServers" is a list: expected an object mapping server names to servers`}},
		{"syntax/misspelt_key.json", []string{`line 2, column 3: no "mcpServers" (Claude Desktop, Cursor) or "servers" (VS Code) key`,
			`found "mcp_servers" (did you mean "mcpServers"?)`}},
		{"syntax/missing_comma.json", []string{"line 4, column 5: invalid character '\"' after object key:value pair: expected ',' or '}'"}},
		{"syntax/missing_colon.json", []string{"line 3, column 12: invalid character '{' after object key: expected ':'"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			_, err := Load(path)
			if err == nil {
				t.Fatal("Load: got nil error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+": ") {
				t.Errorf("error = %q; want it to start with the file name %q", msg, path)
			}
			last := -1
			for _, w := range tt.want {
				i := strings.Index(msg, w)
				if i < 0 {
					t.Errorf("error = %q\nwant it to contain %q", msg, w)
					continue
				}
				if i < last {
					t.Errorf("%q is out of name order in %q", w, msg)
				}
				last = i
			}
		})
	}
}

// TestTrustSettings: pinning, result bounds and rate limits, per server and per tool.
func TestTrustSettings(t *testing.T) {
	got, err := Parse([]byte(`{"mcpServers":{
		"calc": {"url": "http://h/", "pinning": "enforce", "maxResultBytes": 65536, "rateLimit": {"calls": 10, "per": "1m"},
			"tools": {"add": {"maxResultBytes": 1024}, "divide": {"rateLimit": {"calls": 2, "per": 30}}}},
		"plain": {"url": "http://h/"}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	calc, plain := got["calc"], got["plain"]
	if calc.PinningMode() != PinningEnforce || plain.PinningMode() != PinningWarn {
		t.Errorf("pinning %q and %q, want enforce and the default warn", calc.PinningMode(), plain.PinningMode())
	}
	for _, tc := range []struct {
		tool  string
		bytes int
		limit *RateLimit
	}{
		{"add", 1024, &RateLimit{10, time.Minute}},
		{"divide", 65536, &RateLimit{2, 30 * time.Second}},
		{"other", 65536, &RateLimit{10, time.Minute}},
	} {
		if b, l := calc.ResultLimit(tc.tool), calc.RateLimitOf(tc.tool); b != tc.bytes || *l != *tc.limit {
			t.Errorf("%s: result limit %d, rate limit %+v; want %d, %+v", tc.tool, b, l, tc.bytes, tc.limit)
		}
	}
	if plain.ResultLimit("x") != 0 || plain.RateLimitOf("x") != nil {
		t.Errorf("a server without settings has %d, %v", plain.ResultLimit("x"), plain.RateLimitOf("x"))
	}
	if len(calc.Warnings) != 0 {
		t.Errorf("warnings %v", calc.Warnings)
	}
}

// TestReadFileRefuses: only a regular file of a bounded size is read; a FIFO (which would
// block the reader until someone writes to it), a directory or a huge file is refused at once.
func TestReadFileRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, bytes.Repeat([]byte(" "), maxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"mcpServers":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifoLink := filepath.Join(dir, "fifo-link.json")
	if err := os.Symlink(fifo, fifoLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "not a regular file"}, {fifoLink, "not a regular file"}, {dir, "not a regular file"}, {big, "larger than"},
		{link, ""}, {good, ""},
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(tc.path); done <- err }()
		select {
		case err := <-done:
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("ReadFile(%s) = %v, want %q", filepath.Base(tc.path), err, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadFile(%s) hangs", filepath.Base(tc.path))
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.json")
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) error = %v; want it to name %s and wrap ErrNotExist", err, path)
	}
}

func TestLoadUsesEnvironment(t *testing.T) {
	t.Setenv("TOOLMESH_TEST_CALC_PORT", "7999")
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, []byte(`{"mcpServers":{"calc":{"url":"http://127.0.0.1:${TOOLMESH_TEST_CALC_PORT}/sse"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://127.0.0.1:7999/sse"; got["calc"].URL != want {
		t.Errorf("url = %q, want %q", got["calc"].URL, want)
	}
}

// TestLoadRules: the rules of a server whose secrets come from variables this process does
// not have (the api's, in microservices mode) load, and no variable but the rules' is looked
// up; a shape error is an error there as for the executor.
func TestLoadRules(t *testing.T) {
	t.Setenv("TOOLMESH_TEST_EXCLUDE", "delete_*")
	dir := t.TempDir()
	write := func(name, doc string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ok := write("mcp.json", `{"mcpServers": {
		"gh": {"url": "${TOOLMESH_TEST_GH_URL}", "headers": {"Authorization": "Bearer ${TOOLMESH_TEST_GH_TOKEN}"},
		       "allowDestructive": true, "allowedTools": ["*"], "excludedTools": ["${TOOLMESH_TEST_EXCLUDE}"]},
		"local": {"command": "${TOOLMESH_TEST_BIN}", "args": ["--key=${TOOLMESH_TEST_KEY}"], "env": {"K": "${TOOLMESH_TEST_KEY}"}},
		"off": {"disabled": true, "url": "${TOOLMESH_TEST_NOPE}"}
	}}`)
	if _, err := Load(ok); err == nil || !strings.Contains(err.Error(), "TOOLMESH_TEST_GH_TOKEN") {
		t.Fatalf("Load without the secrets: err = %v, want one naming TOOLMESH_TEST_GH_TOKEN (the executor needs them)", err)
	}
	got, err := LoadRules(ok)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Server{
		"gh":    {Name: "gh", AllowedTools: []string{"*"}, ExcludedTools: []string{"delete_*"}, AllowDestructive: true},
		"local": {Name: "local"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LoadRules = %+v, want %+v", got, want)
	}

	for name, doc := range map[string]string{
		"bad-type.json":      `{"mcpServers": {"gh": {"url": "https://x/mcp", "allowDestructive": "yes"}}}`,
		"unset-in-rule.json": `{"mcpServers": {"gh": {"url": "https://x/mcp", "allowedTools": ["${TOOLMESH_TEST_NOPE}"]}}}`,
		"not-json.json":      `{"mcpServers": {`,
	} {
		if _, err := LoadRules(write(name, doc)); err == nil {
			t.Errorf("LoadRules(%s): no error", name)
		}
	}
}

// TestRulesFromYAML: the inline mcpServers of the YAML config, read for the rules alone.
func TestRulesFromYAML(t *testing.T) {
	m := map[string]any{"gh": map[string]any{"url": "${GH_URL}", "headers": map[string]any{"A": "${GH_TOKEN}"}, "excludedTools": []any{"x_*"}}}
	var asked []string
	lookup := func(name string) (string, bool) { asked = append(asked, name); return "", false }
	got, err := RulesFromYAML(m, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Server{Name: "gh", ExcludedTools: []string{"x_*"}}); !reflect.DeepEqual(got["gh"], want) {
		t.Errorf("RulesFromYAML = %+v, want %+v", got["gh"], want)
	}
	if len(asked) > 0 {
		t.Errorf("looked up %v: reading the rules needs no variable", asked)
	}
}

// TestRulesKeepRateLimits: the api enforces the rate limits (it knows the tokens), and in
// microservices mode it reads the servers' rules alone: they must carry rateLimit, the server's
// and its tools'.
func TestRulesKeepRateLimits(t *testing.T) {
	got, err := ParseRules([]byte(`{"mcpServers": {"gh": {"url": "${GH_URL}", "rateLimit": {"calls": 10, "per": "1m"},
		"tools": {"search": {"rateLimit": {"calls": 2, "per": 30}, "maxResultBytes": 100}}}}}`), lookup)
	if err != nil {
		t.Fatal(err)
	}
	gh := got["gh"]
	if l := gh.RateLimitOf("search"); l == nil || *l != (RateLimit{2, 30 * time.Second}) {
		t.Errorf("the tool's rate limit = %v; want 2 per 30s", l)
	}
	if l := gh.RateLimitOf("other"); l == nil || *l != (RateLimit{10, time.Minute}) {
		t.Errorf("the server's rate limit = %v; want 10 per 1m", l)
	}
	if gh.URL != "" {
		t.Errorf("the rules carry the url %q", gh.URL)
	}
}

func TestExpand(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "plain", want: "plain"},
		{in: "${GITHUB_TOKEN}", want: secretToken},
		{in: "Bearer ${GITHUB_TOKEN}!", want: "Bearer " + secretToken + "!"},
		{in: "${UNSET:-fallback}", want: "fallback"},
		{in: "${UNSET:-}", want: ""},
		{in: "${EMPTY:-fallback}", want: "fallback"},
		{in: "${EMPTY}", want: ""},
		{in: "${GITHUB_TOKEN:-fallback}", want: secretToken},
		{in: "${env:GITHUB_TOKEN}", want: secretToken},
		{in: "${env://UNSET:-d}", want: "d"},
		{in: "${UNSET:-a:-b}", want: "a:-b"},
		{in: "$${GITHUB_TOKEN}", want: "${GITHUB_TOKEN}"},
		{in: "cost $5 {x}", want: "cost $5 {x}"},
		{in: "${A_}${UNSET:-x}", wantErr: `environment variable "A_" is not set`},
		{in: "${UNSET}", wantErr: `environment variable "UNSET" is not set (write ${UNSET:-default}`},
		{in: "${UNSET:-${GITHUB_TOKEN}}", wantErr: "nested variable references are not supported"},
		{in: "${}", wantErr: "invalid variable reference"},
		{in: "${GITHUB_TOKEN", wantErr: "unterminated"},
	}
	for _, tt := range tests {
		got, err := expand(tt.in, lookup)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("expand(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestTransportInference(t *testing.T) {
	tests := []struct {
		entry string
		want  Transport
	}{
		{`{"url":"http://h:7801/sse"}`, TransportSSE},
		{`{"url":"http://h:7801/sse/"}`, TransportSSE},
		{`{"url":"http://h:7801/v1/SSE?x=1"}`, TransportSSE},
		{`{"url":"http://h:7801/mcp"}`, TransportStreamableHTTP},
		{`{"url":"http://h:7801/ssex"}`, TransportStreamableHTTP},
		{`{"url":"http://h:7801/"}`, TransportStreamableHTTP},
		{`{"url":"http://h:7801/sse","type":"http"}`, TransportStreamableHTTP},
		{`{"url":"http://h:7801/mcp","type":"sse"}`, TransportSSE},
		{`{"url":"http://h:7801/mcp","transport":"streamable-http"}`, TransportStreamableHTTP},
		{`{"url":"http://h:7801/mcp","type":"streamableHttp"}`, TransportStreamableHTTP},
		{`{"url":"http://h:7801/mcp","transportType":"sse"}`, TransportSSE},
		{`{"url":"http://h:7801/mcp","transport":"sse","type":"sse"}`, TransportSSE},
		{`{"serverUrl":"http://h:7801/sse"}`, TransportSSE},
		{`{"command":"calc"}`, TransportStdio},
		{`{"command":"calc","type":"stdio"}`, TransportStdio},
	}
	for _, tt := range tests {
		got, err := Parse([]byte(`{"mcpServers":{"calc":`+tt.entry+`}}`), nil)
		if err != nil {
			t.Errorf("%s: %v", tt.entry, err)
			continue
		}
		if got["calc"].Transport != tt.want {
			t.Errorf("%s: transport = %q, want %q", tt.entry, got["calc"].Transport, tt.want)
		}
	}
}

func TestDisabled(t *testing.T) {
	got, err := Parse(readFixture(t, "claude_desktop.json"), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["legacy"]; ok {
		t.Error(`disabled server "legacy" was returned`)
	}
	got, err = Parse([]byte(`{"servers":{"a":{"url":"http://h/","disabled":false},"b":{"disabled":true}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a"}; !reflect.DeepEqual(Names(got), want) {
		t.Errorf("Names = %v, want %v", Names(got), want)
	}
}

func TestFromYAML(t *testing.T) {
	const doc = `
listen: 127.0.0.1:7700
mcpServers:
  calculator:
    url: http://127.0.0.1:7801/sse
    timeout: 2.5
    maxConcurrency: 8
    allowedTools: ["*"]
    excludedTools: [divide, "sq*"]
    allowDestructive: true
  github:
    type: http
    url: https://api.example.com/mcp
    headers:
      Authorization: Bearer ${GITHUB_TOKEN}
  files:
    command: npx
    args: [-y, server-filesystem, "${FS_ROOT:-/srv}"]
    timeout: 1m
  off:
    disabled: true
`
	var cfg struct {
		MCPServers map[string]any `yaml:"mcpServers"`
	}
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	got, err := FromYAML(cfg.MCPServers, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Server{
		"calculator": {Name: "calculator", Transport: TransportSSE, URL: "http://127.0.0.1:7801/sse",
			Timeout: 2500 * time.Millisecond, MaxConcurrency: 8,
			AllowedTools: []string{"*"}, ExcludedTools: []string{"divide", "sq*"}, AllowDestructive: true},
		"github": {Name: "github", Transport: TransportStreamableHTTP, URL: "https://api.example.com/mcp",
			Headers: map[string]string{"Authorization": "Bearer " + secretToken}},
		"files": {Name: "files", Transport: TransportStdio, Command: "npx",
			Args: []string{"-y", "server-filesystem", "/srv"}, Timeout: time.Minute},
	}
	for _, n := range Names(want) {
		if !reflect.DeepEqual(got[n], want[n]) {
			t.Errorf("server %s:\n got %s\nwant %s", n, fields(got[n]), fields(want[n]))
		}
	}
	if !reflect.DeepEqual(Names(got), Names(want)) {
		t.Errorf("Names = %v, want %v", Names(got), Names(want))
	}

	// Wrong types are errors in YAML too.
	var bad struct {
		MCPServers map[string]any `yaml:"mcpServers"`
	}
	if err := yaml.Unmarshal([]byte("mcpServers:\n  calc:\n    url: http://h/\n    maxConcurrency: many\n    disabled: no\n"), &bad); err != nil {
		t.Fatal(err)
	}
	_, err = FromYAML(bad.MCPServers, lookup)
	if err == nil || !strings.Contains(err.Error(), `mcp server "calc": disabled: must be true or false, not a string`) {
		t.Errorf("FromYAML error = %v; want disabled type error", err)
	}

	if got, err := FromYAML(nil, nil); err != nil || len(got) != 0 {
		t.Errorf("FromYAML(nil) = %v, %v; want empty, nil", got, err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		s    Server
		want string // empty: valid
	}{
		{"remote ok", Server{Name: "a", Transport: TransportSSE, URL: "https://h/sse"}, ""},
		{"stdio ok", Server{Name: "a", Transport: TransportStdio, Command: "a"}, ""},
		{"no transport", Server{Name: "a", URL: "https://h/"}, `mcp server "a": transport: required`},
		{"unknown transport", Server{Name: "a", Transport: "ws", URL: "https://h/"}, `mcp server "a": transport: unknown "ws"`},
		{"negative timeout", Server{Name: "a", Transport: TransportStdio, Command: "a", Timeout: -1}, `mcp server "a": timeout: must be > 0`},
		{"args on remote", Server{Name: "a", Transport: TransportSSE, URL: "https://h/", Args: []string{"x"}}, `mcp server "a": args: only applies to stdio`},
		{"bad env key", Server{Name: "a", Transport: TransportStdio, Command: "a", Env: map[string]string{"A=B": "c"}}, `mcp server "a": env: invalid variable name "A=B"`},
		{"header CRLF", Server{Name: "a", Transport: TransportSSE, URL: "https://h/", Headers: map[string]string{"X": secretToken + "\r\nEvil: 1"}},
			`mcp server "a": headers.X: header value must not contain CR, LF or NUL`},
		{"dot name", Server{Name: "calc.v2", Transport: TransportStdio, Command: "a"}, `mcp server "calc.v2": name:`},
		{"empty name", Server{Name: "", Transport: TransportStdio, Command: "a"}, `mcp server "": name:`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
			if err != nil {
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Errorf("Validate() = %v; want a *FieldError inside", err)
				}
				assertNoSecrets(t, "Validate error", err.Error())
			}
		})
	}
}

// TestSecretsNeverInErrors expands secrets into fields that then fail validation.
func TestSecretsNeverInErrors(t *testing.T) {
	testEnv := map[string]string{
		"BAD_URL":     "not a url " + secretToken,
		"CRLF_HEADER": secretToken + "\r\nX-Injected: 1",
		"NUL_ENV":     secretKey + "\x00",
		"FTP_URL":     "ftp://user:" + secretSession + "@h/x",
	}
	env := func(k string) (string, bool) { v, ok := testEnv[k]; return v, ok }
	inputs := []string{
		`{"mcpServers":{"a":{"url":"${BAD_URL}"}}}`,
		`{"mcpServers":{"a":{"url":"${FTP_URL}"}}}`,
		`{"mcpServers":{"a":{"url":"http://h/","headers":{"Authorization":"${CRLF_HEADER}"}}}}`,
		`{"mcpServers":{"a":{"command":"x","env":{"K":"${NUL_ENV}"}}}}`,
		`{"mcpServers":{"a":{"command":"x","args":["${NUL_ENV}"]}}}`,
		`{"mcpServers":{"a":{"url":"${BAD_URL}","command":"${BAD_URL}"}}}`,
	}
	for _, in := range inputs {
		_, err := Parse([]byte(in), env)
		if err == nil {
			t.Errorf("Parse(%s): want an error", in)
			continue
		}
		assertNoSecrets(t, "Parse error", err.Error())
	}
}

func TestRedaction(t *testing.T) {
	servers, err := Parse(readFixture(t, "claude_desktop.json"), lookup)
	if err != nil {
		t.Fatal(err)
	}
	gh := servers["github"]
	gh.URL = "https://user:" + secretToken + "@api.example.com/mcp?session=" + secretSession + "#" + secretKey
	servers["github"] = gh

	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	for _, n := range Names(servers) {
		logger.Info("mcp server", "server", servers[n])
	}
	logger.Info("all", "servers", servers)
	assertNoSecrets(t, "slog output", logs.String())
	for _, want := range []string{`"header_names":["Authorization"]`, `"env_keys":["API_KEY","LOG_LEVEL"]`, `"endpoint":"https://api.example.com/mcp"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("slog output lacks %s:\n%s", want, logs.String())
		}
	}

	js, err := json.Marshal(servers)
	if err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{
		"%v":   fmt.Sprintf("%v", servers),
		"%+v":  fmt.Sprintf("%+v", servers),
		"%#v":  fmt.Sprintf("%#v", servers),
		"%s":   fmt.Sprintf("%s", servers["github"]),
		"json": string(js),
	} {
		assertNoSecrets(t, what, out)
		if !strings.Contains(out, "github") {
			t.Errorf("%s output lacks the server name: %s", what, out)
		}
	}
}

func TestEndpoint(t *testing.T) {
	tests := []struct {
		s    Server
		want string
	}{
		{Server{Transport: TransportSSE, URL: "http://127.0.0.1:7801/sse"}, "http://127.0.0.1:7801/sse"},
		{Server{Transport: TransportStreamableHTTP, URL: "https://u:p@h.example.com:8443/a/mcp?key=k#frag"}, "https://h.example.com:8443/a/mcp"},
		{Server{Transport: TransportStdio, Command: "/usr/local/bin/npx"}, "npx"},
		{Server{Transport: TransportStdio, Command: `C:\tools\calc.exe`}, "calc.exe"},
		{Server{Transport: TransportStdio, Command: "uvx"}, "uvx"},
		{Server{Transport: TransportSSE, URL: "::bad"}, "(invalid url)"},
	}
	for _, tt := range tests {
		if got := tt.s.Endpoint(); got != tt.want {
			t.Errorf("Endpoint(%s) = %q, want %q", fields(tt.s), got, tt.want)
		}
	}
}

func TestNames(t *testing.T) {
	m := map[string]Server{"b": {}, "a": {}, "c-1": {}, "a_0": {}}
	if got, want := Names(m), []string{"a", "a_0", "b", "c-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
	if got := Names(nil); len(got) != 0 {
		t.Errorf("Names(nil) = %v, want empty", got)
	}
}

func TestParseTransport(t *testing.T) {
	for in, want := range map[string]Transport{
		"sse": TransportSSE, "SSE": TransportSSE, "http": TransportStreamableHTTP,
		"streamable-http": TransportStreamableHTTP, "streamableHttp": TransportStreamableHTTP, "stdio": TransportStdio,
	} {
		if got, err := ParseTransport(in); err != nil || got != want {
			t.Errorf("ParseTransport(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseTransport("ws"); err == nil {
		t.Error(`ParseTransport("ws"): want an error`)
	}
}

func assertNoSecrets(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%s contains secret %q:\n%s", what, s, out)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"claude_desktop.json", "vscode.json", "bad_both_keys.json", "bad_syntax.json", "bad_entries.json",
		"claude_desktop_names.json", "bad_name_clash.json", "syntax/truncated_after_value.json", "syntax/truncated_in_list.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"servers":{"a":{"url":"http://h/${X:-${Y}}","timeout":1e-12}}}`))
	f.Add([]byte("{\"servers\":{} /* \"x\" */,}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		servers, err := Parse(data, lookup)
		if err != nil {
			if servers != nil {
				t.Fatalf("servers %v returned with error %v", servers, err)
			}
			return
		}
		for name, s := range servers {
			if s.Name != name {
				t.Fatalf("server %q has Name %q", name, s.Name)
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("Parse accepted an invalid server: %v", err)
			}
			_ = s.String()
			_ = s.LogValue()
			_ = s.Endpoint()
		}
	})
}

// TestUnknownKeys: a misspelt key is named with the key it was probably meant to be, in the
// error when the entry fails because of it and as a warning otherwise; keys other hosts write
// pass quietly.
func TestUnknownKeys(t *testing.T) {
	cases := []struct {
		name, doc    string
		wantErr      string
		wantWarnings []string
	}{
		{"typo makes the entry fail", `{"mcpServers": {"fs": {"comand": "npx"}}}`, `unknown key "comand" (did you mean "command"?)`, nil},
		{"typo beside a working entry", `{"mcpServers": {"fs": {"command": "npx", "arg": ["x"]}}}`, "",
			[]string{`unknown key "arg" (did you mean "args"?) is ignored`}},
		{"case slip", `{"mcpServers": {"fs": {"url": "http://127.0.0.1:1/mcp", "Headers": {}}}}`, "",
			[]string{`unknown key "Headers" (did you mean "headers"?) is ignored`}},
		{"other hosts' keys", `{"mcpServers": {"fs": {"command": "npx", "autoApprove": [], "alwaysAllow": [], "description": "x"}}}`, "", nil},
		{"a meaning toolmesh lacks", `{"mcpServers": {"fs": {"command": "npx", "disabledTools": ["rm"]}}}`, "",
			[]string{`key "disabledTools" is not used by toolmesh: use excludedTools`}},
		{"nothing close", `{"mcpServers": {"fs": {"command": "npx", "zzzzzz": 1}}}`, "", []string{`unknown key "zzzzzz" is ignored`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.doc), nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w := got["fs"].Warnings; !slices.Equal(w, tc.wantWarnings) {
				t.Errorf("warnings %q, want %q", w, tc.wantWarnings)
			}
		})
	}
}
