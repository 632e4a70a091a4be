package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/mcpservers"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeAPI is a test double of the api's REST endpoints with canned answers.
func fakeAPI(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tools/calculator/add:call", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":16,"message":"missing or bad token","details":[]}`))
			return
		}
		var body struct{ Arguments map[string]any }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || fmt.Sprint(body.Arguments) != "map[a:2 b:3]" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"code":3,"message":"arguments %v","details":[]}`, body.Arguments)
			return
		}
		_, _ = w.Write([]byte(`{"content":[{"type":"text","text":"5"}],"is_error":false}`))
	})
	mux.HandleFunc("POST /v1/tools/everything/get-tiny-image:call", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"content":[{"type":"image","data":"iVBORw0KGgo=","mime_type":"image/png"}],"is_error":false}`))
	})
	mux.HandleFunc("POST /v1/tools/evil/echo:call", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"content":[{"type":"text","text":"\u001b]0;pwned\u0007\u001b[31mred\r\nok"}],"is_error":false}`))
	})
	mux.HandleFunc("POST /v1/tools/calculator/divide:call", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"content":[{"type":"text","text":"division by zero"}],"is_error":true}`))
	})
	mux.HandleFunc("GET /v1/tools", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"tools":[{"id":"calculator.add","description":"Add two numbers.\nMore."}]}`))
	})
	mux.HandleFunc("POST /v1/tools/calculator/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprintf(w, `{"code":5,"message":"unknown tool \"calculator.%s\"","details":[]}`, strings.TrimSuffix(r.PathValue("name"), ":call"))
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func TestClientCommands(t *testing.T) {
	api := fakeAPI(t)
	t.Setenv("TOOLMESH_API", api.URL)
	t.Setenv("TOOLMESH_TOKEN", "s3cret")
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"call prints the text", []string{"call", "calculator.add", `{"a":2,"b":3}`}, 0, "5\n", ""},
		{"flags after arguments", []string{"call", "calculator.add", `{"a":2,"b":3}`, "--json"}, 0, `"is_error":false`, ""},
		{"tool error exits 1", []string{"call", "calculator.divide", `{"a":1,"b":0}`}, 1, "", "division by zero"},
		{"not SERVER.TOOL", []string{"call", "add", `{}`}, 2, "", `"add" is not SERVER.TOOL`},
		{"arguments not JSON", []string{"call", "calculator.add", `{a:2}`}, 2, "", "arguments must be a JSON object"},
		{"arguments as NAME=VALUE", []string{"call", "calculator.add", "a=2", "b=3"}, 0, "5\n", ""},
		{"a word that is no argument", []string{"call", "calculator.add", "a", "b"}, 2, "", `argument "a" is neither a JSON object nor NAME=VALUE`},
		{"no tool named", []string{"call"}, 2, "", "name the tool, as SERVER.TOOL"},
		{"image keeps its type", []string{"call", "everything.get-tiny-image"}, 0, "[image image/png, 8 bytes]", ""},
		{"bad flag said once", []string{"tools", "--nope"}, 2, "", "toolmesh tools: flag provided but not defined: -nope (see 'toolmesh tools -h')\n"},
		{"a result's control bytes are escaped", []string{"call", "evil.echo"}, 0, `\x1b]0;pwned\x07\x1b[31mred\r` + "\nok\n", ""},
		{"the MCP endpoints' name of a tool", []string{"call", "calculator__add", "a=2", "b=3"}, 0, "5\n", ""},
		{"a name near a tool's", []string{"call", "calculator__ad", `{}`}, 2, "", `"calculator__ad" is not SERVER.TOOL, nor the name the MCP endpoints show for a tool (SERVER__TOOL); did you mean calculator.add?`},
		{"an unknown tool near another", []string{"call", "calculator.ad", `{}`}, 1, "", `unknown tool "calculator.ad" (HTTP 404); did you mean calculator.add?`},
		{"an unknown tool near none", []string{"call", "calculator.power", `{}`}, 1, "", "unknown tool \"calculator.power\" (HTTP 404)\n"},
		{"a flag near another", []string{"tools", "--sever", "x"}, 2, "", "flag provided but not defined: -sever (did you mean --server?) (see 'toolmesh tools -h')"},
		{"a flag near none", []string{"query", "x", "--model", "m"}, 2, "", "flag provided but not defined: -model (see 'toolmesh query -h')"},
		{"a command near another", []string{"tool"}, 2, "", `unknown command "tool" (did you mean "tools"?)`},
		{"version", []string{"version"}, 0, "mcp      2026-07-28", ""},
		{"--version", []string{"--version", "--json"}, 0, `"api": "toolmesh.v1"`, ""},
		{"bad token", []string{"call", "calculator.add", `{}`, "--token", "wrong"}, 1, "", "missing or bad token (HTTP 401)"},
		{"tools lists ids and first lines", []string{"tools"}, 0, "calculator.add  Add two numbers.\n", ""},
		{"api down", []string{"tools", "--api", "http://127.0.0.1:1"}, 1, "", "cannot reach the toolmesh api at http://127.0.0.1:1"},
		{"serve needs a target", []string{"serve"}, 2, "", "--target is required"},
		{"unknown target", []string{"serve", "--target=nope"}, 1, "", `target "nope": unknown`},
		{"unknown mcp server", []string{"mcp", "nope"}, 2, "", `unknown server "nope"`},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code = %d, want %d; stderr %q", code, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", stdout.String(), tc.wantStdout)
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tc.wantStderr)
			}
			if strings.Contains(stderr.String(), "Usage of") {
				t.Errorf("stderr has the flag package's raw usage: %q", stderr.String())
			}
			if tc.wantStderr != "" && strings.Count(stderr.String(), strings.TrimSpace(tc.wantStderr)) > 1 {
				t.Errorf("stderr says it more than once: %q", stderr.String())
			}
		})
	}
}

// TestUsageNamesEveryServer: the help lists every shipped MCP server.
func TestUsageNamesEveryServer(t *testing.T) {
	for _, name := range mcpservers.Names() {
		if !strings.Contains(usage, name) {
			t.Errorf("usage does not name the shipped server %q", name)
		}
	}
}
