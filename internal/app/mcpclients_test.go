package app

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/testbackend"
	"github.com/toolmesh/toolmesh/services/inference/llama/llamatest"
)

// changingServer is an MCP server (mcp-go, streamable HTTP) whose tools the test changes, so
// that the mesh's catalog changes while a client listens: server-everything has no tool that
// changes its own tool set.
type changingServer struct {
	srv *mcpserver.MCPServer
	url string
}

func newChangingServer(t *testing.T) *changingServer {
	t.Helper()
	m := mcpserver.NewMCPServer("dyn", "0.1.0", mcpserver.WithToolCapabilities(true))
	m.AddTool(mcp.NewTool("first", mcp.WithDescription("The first tool.")), constText("first"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(mcpserver.NewStreamableHTTPServer(m))
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return &changingServer{srv: m, url: "http://" + l.Addr().String() + "/mcp"}
}

func constText(s string) mcpserver.ToolHandlerFunc {
	return func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(s), nil
	}
}

// startEverythingMesh runs the executor, retriever, inference and api with two MCP servers:
// the real @modelcontextprotocol/server-everything over stdio, and dyn.
func startEverythingMesh(t *testing.T, dyn *changingServer, extra ...string) string {
	t.Helper()
	paths := testbackend.Everything.Need(t)
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	doc, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"everything": map[string]any{"command": paths[0], "args": []string{paths[1], "stdio"}},
		"dyn":        map[string]any{"url": dyn.url},
	}})
	if err := os.WriteFile(cfg, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	args := append([]string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=" + d.URL, "--mcp-config=" + cfg,
	}, extra...)
	return startApp(t, "", args, "executor", "retriever", "inference", "api")
}

// tsEvent is one line the TypeScript client prints.
type tsEvent struct {
	Event    string `json:"event"`
	Step     string `json:"step"`
	Message  string `json:"message"`
	Protocol string `json:"protocol"`
	Tools    json.RawMessage
	IsError  bool `json:"isError"`
	Content  []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	MS            int `json:"ms"`
	Notifications int `json:"notifications"`
}

// TestMCPTypeScriptClient drives the official MCP TypeScript SDK's client
// (testdata/tsclient/client.mjs, from services/api/mcpface) against /mcp of a mesh whose
// servers are the real server-everything over stdio and dyn: it lists every tool (names valid
// for OpenAI and Anthropic), hears notifications/tools/list_changed when dyn gains a tool and
// lists again, calls get-sum, and cancels a 20 s long-running operation.
func TestMCPTypeScriptClient(t *testing.T) {
	sdk := testbackend.MCPSDK.Need(t)
	dyn := newChangingServer(t)
	base := startEverythingMesh(t, dyn)

	// The client is an ES module: it finds the SDK in the node_modules folder next to it.
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "services", "api", "mcpface", "testdata", "tsclient", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), src, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sdk[1], filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sdk[0], filepath.Join(dir, "client.mjs"), base+"/mcp")
	cmd.Env = append(os.Environ(),
		"CALL_TOOL=everything__get-sum", `CALL_ARGS={"a":2,"b":3}`,
		"SLOW_TOOL=everything__trigger-long-running-operation", `SLOW_ARGS={"duration":20,"steps":20}`,
		"CANCEL_AFTER_MS=1000")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		cancel()
		_ = cmd.Wait()
	}()
	events := make(chan tsEvent)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev tsEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				ev = tsEvent{Event: "error", Step: "output", Message: sc.Text()}
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	next := func(want string) tsEvent {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the client ended before %q; stderr: %s", want, stderr.String())
			}
			if ev.Event != want {
				t.Fatalf("client event %q (step %s: %s), want %q; stderr: %s", ev.Event, ev.Step, ev.Message, want, stderr.String())
			}
			return ev
		case <-ctx.Done():
			t.Fatalf("no %q from the client within 2 minutes; stderr: %s", want, stderr.String())
		}
		return tsEvent{}
	}

	ev := next("connected")
	t.Logf("the TypeScript SDK negotiated protocol %s", ev.Protocol)
	ev = next("listed")
	var listed []struct{ Name, ID string }
	if err := json.Unmarshal(ev.Tools, &listed); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, tool := range listed {
		if !openAIName.MatchString(tool.Name) || !anthropicName.MatchString(tool.Name) {
			t.Errorf("tool name %q breaks OpenAI's or Anthropic's rule", tool.Name)
		}
		ids[tool.Name] = tool.ID
	}
	for name, id := range map[string]string{"everything__get-sum": "everything.get-sum", "everything__echo": "everything.echo", "dyn__first": "dyn.first"} {
		if ids[name] != id {
			t.Errorf("tool %s has id %q, want %q (listed %v)", name, ids[name], id, ids)
		}
	}

	dyn.srv.AddTool(mcp.NewTool("second", mcp.WithDescription("The second tool.")), constText("second"))
	if _, err := io.WriteString(stdin, "change\n"); err != nil {
		t.Fatal(err)
	}
	ev = next("list_changed")
	var relisted []string
	if err := json.Unmarshal(ev.Tools, &relisted); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(relisted, "dyn__second") {
		t.Errorf("after list_changed the client lists %v, want dyn__second among them", relisted)
	}

	ev = next("called")
	var got []string
	for _, c := range ev.Content {
		got = append(got, c.Text)
	}
	if ev.IsError || !strings.Contains(strings.Join(got, " "), "5") {
		t.Errorf("everything__get-sum(2, 3) = %q (isError %v), want a text with 5", got, ev.IsError)
	}

	ev = next("cancelled")
	if ev.MS > 10_000 {
		t.Errorf("the cancelled 20 s call ended after %d ms, want soon after the cancel at 1000 ms", ev.MS)
	}
	ev = next("done")
	if ev.Notifications < 1 {
		t.Errorf("the client heard %d list_changed notifications, want at least 1", ev.Notifications)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the client exited with %v; stderr: %s", err, stderr.String())
	}
}
