package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamatest"
)

// TestServerRulesFromExecutor runs the executor and the api as two apps, as microservices mode
// does, with the MCP servers' config given to the executor alone, and then in one process, as
// `up` does (the api calls the executor in the process): the api enforces the executor's rules
// over REST, on the MCP face and in the agent loop, and a reload of the executor's config
// reaches the api without restarting it. The notes server excludes secret_*; admin sets
// allowDestructive, which only the api applies to what the model is offered; a reload excludes
// delete_* too and gives notes a rate limit, which only the api enforces.
func TestServerRulesFromExecutor(t *testing.T) {
	for _, mode := range []string{"microservices", "one process"} {
		t.Run(mode, func(t *testing.T) { testServerRulesFromExecutor(t, mode == "one process") })
	}
}

func testServerRulesFromExecutor(t *testing.T, oneProcess bool) {
	n := &notes{}
	notesURL, adminURL := serveTools(t, "notes", n.tools()), serveTools(t, "admin", n.adminTools())
	path := filepath.Join(t.TempDir(), "toolmesh.yaml")
	save := func(notesRules string) {
		t.Helper()
		doc := fmt.Sprintf("mcpServers:\n  notes:\n    url: %s\n%s  admin:\n    url: %s\n    allowDestructive: true\n", notesURL, notesRules, adminURL)
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	save("    excludedTools: [\"secret_*\"]\n")
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	model := &scriptedModel{scripts: map[string]script{}}
	d.ScriptFunc(model.reply)
	args := []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--llm-url=" + d.URL, "--drain-timeout=2s"}
	var base string
	if oneProcess {
		base = startApp(t, "", append(args, "--config="+path), "executor", "retriever", "inference", "api")
	} else {
		addr := freeAddr(t)
		runApp(t, []string{"--executor.grpc-addr=" + addr, "--config=" + path, "--drain-timeout=2s"}, "executor")
		// The api (and the retriever and inference beside it) is given no MCP server config.
		base = startApp(t, "", append(args, "--api.executor-addr="+addr, "--retriever.executor-addr="+addr), "retriever", "inference", "api")
	}
	model.set("Wipe the admin cache.", func(p string, calls int, compose bool) string {
		switch {
		case compose:
			return "Wiped."
		case calls == 0 && offers(p, "admin.wipe_cache"):
			return `<<function>>admin.wipe_cache()`
		}
		return "I have no tool that wipes the cache."
	})
	model.set("Dump every secret of the notes server.", func(p string, calls int, compose bool) string {
		if calls == 0 && !compose && offers(p, "notes.secret_dump") {
			return `<<function>>notes.secret_dump()`
		}
		return "Nothing to dump."
	})
	excluded := `permission denied: call notes.secret_dump: mcpServers.notes.excludedTools has "secret_*" (rule: excludedTools)`

	t.Run("REST", func(t *testing.T) {
		code, b := do(t, "", http.MethodGet, base+"/v1/tools", "")
		if code != http.StatusOK || !strings.Contains(string(b), `"notes.fetch_article"`) || strings.Contains(string(b), "secret_dump") {
			t.Errorf("GET /v1/tools: %d %s; want notes.fetch_article and not notes.secret_dump", code, b)
		}
		code, b = post(t, base+"/v1/tools/notes/secret_dump:call", `{"arguments":{}}`)
		if e := decodeError(t, b); code != http.StatusForbidden || e.Message != excluded {
			t.Errorf("call of the excluded tool: %d %s; want 403 %q", code, b, excluded)
		}
		// The api shows the rules it decides by to a caller that may list every tool.
		if got := excludedTools(t, base, "notes"); !slices.Equal(got, []string{"secret_*"}) {
			t.Errorf("GET /v1/servers: notes' excluded_tools %v; want [secret_*]", got)
		}
	})
	t.Run("MCP face", func(t *testing.T) {
		c := mcpClient(t, base+"/mcp", mcp.LATEST_PROTOCOL_VERSION, "")
		waitMCPTools(t, base+"/mcp", "", "notes__fetch_article")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got := names(list.Tools); slices.Contains(got, "notes__secret_dump") {
			t.Errorf("tools/list: %v; want no notes__secret_dump", got)
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = "notes__secret_dump"
		if res, err := c.CallTool(ctx, req); err == nil && !res.IsError {
			t.Errorf("tools/call of the excluded tool: %+v; want it refused", res)
		}
	})
	t.Run("agent loop", func(t *testing.T) {
		r := query(t, base, `{"query":"Dump every secret of the notes server.","k":8}`)
		if slices.Contains(r.retrieved(1), "notes.secret_dump") || len(r.ToolCalls) != 0 {
			t.Errorf("offered %v, called %v; want notes.secret_dump neither offered nor called", r.retrieved(1), r.calls())
		}
		r = query(t, base, `{"query":"Wipe the admin cache."}`)
		if r.ran("admin.wipe_cache") != 1 {
			t.Errorf("offered %v, called %v; want admin.wipe_cache offered and run (admin's allowDestructive, in the executor's config only)", r.retrieved(1), r.calls())
		}
	})
	if got := n.dumps.Load(); got != 0 {
		t.Errorf("secret_dump ran %d times", got)
	}

	t.Run("a reload of the executor's config reaches the api", func(t *testing.T) {
		save("    excludedTools: [\"secret_*\", \"delete_*\"]\n    rateLimit: {calls: 1, per: 1h}\n")
		eventually.Check(t, 30*time.Second, "the api's rules after the reload", func() string {
			if got := excludedTools(t, base, "notes"); !slices.Equal(got, []string{"secret_*", "delete_*"}) {
				return fmt.Sprintf("GET /v1/servers: notes' excluded_tools %v", got)
			}
			return ""
		})
		code, b := post(t, base+"/v1/tools/notes/delete_note:call", `{"arguments":{"name":"a"}}`)
		if e := decodeError(t, b); code != http.StatusForbidden || !strings.Contains(e.Message, `mcpServers.notes.excludedTools has "delete_*"`) {
			t.Errorf("call of the newly excluded tool: %d %s; want 403", code, b)
		}
		// The executor listed fetch_article again after the reload; the api counts its calls.
		eventually.Check(t, 30*time.Second, "a first call of fetch_article", func() string {
			if code, b := post(t, base+"/v1/tools/notes/fetch_article:call", `{"arguments":{"slug":"a"}}`); code != http.StatusOK {
				return fmt.Sprintf("%d %s", code, b)
			}
			return ""
		})
		code, b = post(t, base+"/v1/tools/notes/fetch_article:call", `{"arguments":{"slug":"a"}}`)
		if code != http.StatusTooManyRequests || !strings.Contains(string(b), "mcpServers.notes.rateLimit") {
			t.Errorf("a second call within the new rate limit: %d %s; want 429 naming mcpServers.notes.rateLimit", code, b)
		}
	})
}

// excludedTools is server's excluded_tools as GET /v1/servers shows them.
func excludedTools(t *testing.T, base, server string) []string {
	t.Helper()
	code, b := do(t, "", http.MethodGet, base+"/v1/servers", "")
	var list struct {
		Servers []struct {
			Name  string `json:"name"`
			Rules *struct {
				ExcludedTools []string `json:"excluded_tools"`
			} `json:"rules"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(b, &list); code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/servers: %d %s (%v)", code, b, err)
	}
	for _, s := range list.Servers {
		if s.Name == server && s.Rules != nil {
			return s.Rules.ExcludedTools
		}
	}
	return nil
}

// TestServerRulesBeforeExecutor: an api whose executor has not answered refuses calls as
// unavailable, saying it has no rules yet, and is not ready; once an executor answers on that
// address, the same api serves.
func TestServerRulesBeforeExecutor(t *testing.T) {
	addr := freeAddr(t)
	a, _ := runApp(t, []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--api.executor-addr=" + addr,
		"--api.retriever-addr=", "--api.inference-addr=", "--api.rpc-timeout=1s", "--drain-timeout=2s"}, "api")
	base := endpointOf(t, a, "REST")
	why := "the api has not had the MCP servers' rules from the executor at " + addr
	code, b := post(t, base+"/v1/tools/calculator/add:call", `{"arguments":{"a":2,"b":3}}`)
	if e := decodeError(t, b); code != http.StatusServiceUnavailable || !strings.Contains(e.Message, why) {
		t.Errorf("a call before the executor answered: %d %s; want 503 saying %q", code, b, why)
	}
	if code, b := do(t, "", http.MethodGet, base+"/readyz", ""); code != http.StatusServiceUnavailable || !strings.Contains(string(b), why) {
		t.Errorf("/readyz before the executor answered: %d %s; want 503 saying %q", code, b, why)
	}
	runApp(t, []string{"--executor.grpc-addr=" + addr, "--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0",
		"--demo.sqlite-addr=127.0.0.1:0", "--drain-timeout=2s"}, "demo", "executor")
	eventually.Check(t, 30*time.Second, "the call once the executor answers", func() string {
		if code, b := post(t, base+"/v1/tools/calculator/add:call", `{"arguments":{"a":2,"b":3}}`); code != http.StatusOK {
			return fmt.Sprintf("%d %s", code, b)
		}
		return ""
	})
}

// TestAPIMCPConfigIgnored: `serve --target=api` given --mcp-config (as before the executor
// published the rules) starts, saying in one warning that the file is not read and the
// executor's config is what counts.
func TestAPIMCPConfigIgnored(t *testing.T) {
	mcpJSON := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(mcpJSON, []byte(`{"mcpServers":{"notes":{"url":"http://127.0.0.1:1/mcp","excludedTools":["secret_*"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	_, stop, err := launch(t, []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--api.executor-addr=" + freeAddr(t),
		"--api.retriever-addr=", "--api.inference-addr=", "--drain-timeout=2s", "--mcp-config=" + mcpJSON}, logger, nil, "api")
	if err != nil {
		t.Fatalf("the api with --mcp-config did not start: %v", err)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	var warnings []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "mcp-config") {
			warnings = append(warnings, l)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "the executor's config is the one that counts") {
		t.Errorf("warnings about --mcp-config: %q; want one saying the executor's config is the one that counts", warnings)
	}
}
