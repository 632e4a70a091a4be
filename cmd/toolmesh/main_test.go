package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/internal/gobuild"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

// TestUpBlackBox builds the binary, runs `toolmesh up` on free ports and checks what a user
// checks with curl and the CLI.
func TestUpBlackBox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinary(t)
	up, base := startUp(t, bin)

	t.Run("list tools", func(t *testing.T) {
		var got struct {
			Tools []struct{ ID, Server, Name, Description string }
		}
		getJSON(t, base+"/v1/tools", http.StatusOK, &got)
		var ids []string
		for _, tool := range got.Tools {
			ids = append(ids, tool.ID)
			if tool.Description == "" {
				t.Errorf("tool %s has no description", tool.ID)
			}
		}
		for _, want := range []string{"calculator.add", "calculator.subtract", "calculator.multiply", "calculator.divide",
			"calculator.calculate", "converter.celsius_to_fahrenheit", "converter.fahrenheit_to_celsius", "converter.convert_temperature",
			"sqlite.list_tables", "sqlite.describe_table", "sqlite.query_database"} {
			if !slices.Contains(ids, want) {
				t.Errorf("GET /v1/tools: %s missing from %v", want, ids)
			}
		}
	})

	cases := []struct {
		name, path, body string
		wantStatus       int
		check            func(t *testing.T, body map[string]any)
	}{
		{"add", "/v1/tools/calculator/add:call", `{"arguments":{"a":2,"b":3}}`, 200, func(t *testing.T, b map[string]any) {
			if got := firstText(b); got != "5" {
				t.Errorf("add(2,3) text = %q, want 5", got)
			}
			if b["is_error"] != false {
				t.Errorf("is_error = %v, want false", b["is_error"])
			}
		}},
		{"divide by zero", "/v1/tools/calculator/divide:call", `{"arguments":{"a":1,"b":0}}`, 200, func(t *testing.T, b map[string]any) {
			if b["is_error"] != true {
				t.Errorf("is_error = %v, want true; body %v", b["is_error"], b)
			}
		}},
		{"bad argument type", "/v1/tools/calculator/add:call", `{"arguments":{"a":"x","b":3}}`, 400, func(t *testing.T, b map[string]any) {
			if msg, _ := b["message"].(string); !regexp.MustCompile(`\ba\b`).MatchString(msg) {
				t.Errorf("message %q does not name the field a", msg)
			}
		}},
		{"unknown tool", "/v1/tools/calculator/nope:call", `{"arguments":{}}`, 404, nil},
		{"unknown server", "/v1/tools/nowhere/add:call", `{"arguments":{}}`, 404, nil},
		{"unknown body field", "/v1/tools/calculator/add:call", `{"args":{"a":1}}`, 400, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := postJSON(t, base+tc.path, tc.body, tc.wantStatus)
			if tc.check != nil {
				tc.check(t, body)
			}
		})
	}

	t.Run("cli call", func(t *testing.T) {
		cmd := exec.Command(bin, "call", "calculator.add", `{"a":2,"b":3}`, "--api", base)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("toolmesh call: %v\n%s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != "5" {
			t.Errorf("toolmesh call printed %q, want 5", got)
		}
	})

	t.Run("cli direct query exit codes", func(t *testing.T) {
		for _, tc := range []struct {
			query    string
			wantCode int
			wantOut  string
		}{
			{`@calculator.add({"a":2,"b":3})`, 0, "5"},
			{`@calculator.nope({})`, 1, `unknown tool "calculator.nope"`},
			{`@calculator.divide({"a":1,"b":0})`, 1, "the tool reported an error"},
		} {
			out, err := exec.Command(bin, "query", tc.query, "--api", base).CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || !strings.Contains(string(out), tc.wantOut) {
				t.Errorf("toolmesh query %s: exit %d, output %q; want exit %d and %q", tc.query, code, out, tc.wantCode, tc.wantOut)
			}
		}
	})

	t.Run("search", func(t *testing.T) {
		var got struct {
			Results []struct {
				Tool  struct{ ID string }
				Score float64
			}
		}
		getJSON(t, base+"/v1/tools:search?k=1&q="+url.QueryEscape("convert 30 degrees celsius to fahrenheit"), http.StatusOK, &got)
		if len(got.Results) != 1 || got.Results[0].Tool.ID != "converter.celsius_to_fahrenheit" {
			t.Errorf("search results = %+v, want just converter.celsius_to_fahrenheit", got.Results)
		}
		out, err := exec.Command(bin, "tools", "search", "convert 30 degrees celsius to fahrenheit", "-k", "1", "--api", base).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "converter.celsius_to_fahrenheit") {
			t.Errorf("toolmesh tools search: %v\n%s", err, out)
		}
	})

	t.Run("stops on SIGINT", func(t *testing.T) { up.interrupt(t, 15*time.Second) })
}

// interrupt sends SIGINT and expects a clean exit within d.
func (p *upProcess) interrupt(t *testing.T, d time.Duration) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("toolmesh up exited with %v after SIGINT, want 0", p.err)
		}
	case <-time.After(d):
		t.Fatalf("toolmesh up did not stop within %s of SIGINT", d)
	}
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "toolmesh")
	if err := gobuild.Build(t.Context(), "", bin, "."); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startUp runs `toolmesh up` on free ports and waits until /readyz says ready.
// upProcess is a running `toolmesh up`; done closes when it has exited, err is its exit.
type upProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// stderr is what the process logged; read it only once done is closed.
	stderr *bytes.Buffer
}

func startUp(t *testing.T, bin string, extra ...string) (*upProcess, string) {
	t.Helper()
	args := append([]string{"up",
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0"}, extra...)
	up := exec.Command(bin, args...)
	if os.Getenv(modelfetch.EnvDir) == "" {
		// A model pulled on this machine must not turn a test's `up` into one that starts it.
		up.Env = append(os.Environ(), modelfetch.EnvDir+"="+t.TempDir())
	}
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	up.Stderr = &stderr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	p := &upProcess{cmd: up, done: make(chan struct{}), stderr: &stderr}
	go func() { p.err = up.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = up.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("toolmesh up stderr:\n%s", stderr.String())
		}
	})
	base := restURL(t, stdout)
	waitReady(t, base)
	return p, base
}

var restLine = regexp.MustCompile(`REST\s+(http://\S+)`)

func restURL(t *testing.T, stdout io.Reader) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := restLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case u := <-found:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("toolmesh up printed no REST endpoint within 30s")
		return ""
	}
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("/readyz not 200 within 30s; last: %s", last)
}

func getJSON(t *testing.T, url string, wantStatus int, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("GET %s: status %d, want %d; body %s", url, resp.StatusCode, wantStatus, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v; body %s", url, err, b)
	}
}

func postJSON(t *testing.T, url, body string, wantStatus int) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("POST %s %s: status %d, want %d; body %s", url, body, resp.StatusCode, wantStatus, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("POST %s: %v; body %s", url, err, b)
	}
	return out
}

func firstText(b map[string]any) string {
	content, _ := b["content"].([]any)
	if len(content) == 0 {
		return ""
	}
	block, _ := content[0].(map[string]any)
	s, _ := block["text"].(string)
	return s
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestUpSearchFollowsToolChanges adds a tool to a running MCP server and removes it again:
// list_changed reaches the executor, the retriever re-indexes, and search follows.
func TestUpSearchFollowsToolChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	mcpSrv := server.NewMCPServer("dyn", "0.1.0", server.WithToolCapabilities(true))
	mcpSrv.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echo the message back."), mcp.WithString("message", mcp.Required())),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(r.GetString("message", "")), nil
		})
	httpSrv := httptest.NewServer(server.NewStreamableHTTPServer(mcpSrv))
	// Registered first, so it runs after toolmesh up (which holds a stream open) is stopped.
	t.Cleanup(func() { httpSrv.CloseClientConnections(); httpSrv.Close() })

	cfg := filepath.Join(t.TempDir(), "mcp.json")
	doc := fmt.Sprintf(`{"mcpServers": {"dyn": {"url": %q}}}`, httpSrv.URL+"/mcp")
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base := startUp(t, buildBinary(t), "--mcp-config", cfg, "--demo=false")

	query := base + "/v1/tools:search?k=1&q=" + url.QueryEscape("reverse the letters of a word")
	top := func() string {
		var got struct {
			Results []struct{ Tool struct{ ID string } }
		}
		getJSON(t, query, http.StatusOK, &got)
		if len(got.Results) == 0 {
			return ""
		}
		return got.Results[0].Tool.ID
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if cond() {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("not within 10s: %s", what)
	}
	if got := top(); got == "dyn.reverse_text" {
		t.Fatalf("dyn.reverse_text found before it exists")
	}
	mcpSrv.AddTool(mcp.NewTool("reverse_text", mcp.WithDescription("Reverse the letters of a word or text."), mcp.WithString("text", mcp.Required())),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("olleh"), nil
		})
	waitFor("the added tool is found by search", func() bool { return top() == "dyn.reverse_text" })
	mcpSrv.DeleteTools("reverse_text")
	waitFor("the removed tool is gone from search", func() bool { return top() != "dyn.reverse_text" })
}
