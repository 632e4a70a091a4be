package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/mcpbridge"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// changingServer is an MCP server (mcp-go, streamable HTTP) whose tools the test changes, so
// that the mesh's catalog changes while a client listens: server-everything has no tool that
// changes its own tool set.
type changingServer struct {
	srv *mcpserver.MCPServer
	url string
	// waitEnded gets one value each time a call of its wait tool ends because its context did:
	// the upstream call was cancelled.
	waitEnded chan struct{}
}

func newChangingServer(t *testing.T) *changingServer {
	t.Helper()
	m := mcpserver.NewMCPServer("dyn", "0.1.0", mcpserver.WithToolCapabilities(true))
	m.AddTool(mcp.NewTool("first", mcp.WithDescription("The first tool.")), constText("first"))
	ended := make(chan struct{}, 16)
	m.AddTool(mcp.NewTool("wait", mcp.WithDescription("Wait until cancelled, at most 30 s.")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-ctx.Done():
				ended <- struct{}{}
				return nil, ctx.Err()
			case <-time.After(30 * time.Second):
				return mcp.NewToolResultText("waited 30 s"), nil
			}
		})
	return &changingServer{srv: m, url: serveMCP(t, m), waitEnded: ended}
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
	base := startApp(t, "", args, "executor", "retriever", "inference", "api")
	// A stdio server takes a Node start.
	waitMCPTools(t, base+"/mcp", "", "everything__get-sum", "dyn__first")
	return base
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
	Reports       []struct {
		Progress float64 `json:"progress"`
		Total    float64 `json:"total"`
	} `json:"reports"`
}

// nodeScript copies the ES module at src into a folder of the test's, beside a link to the
// node_modules folder it imports from, and returns the copy's path.
func nodeScript(t *testing.T, src, nodeModules string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(nodeModules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMCPTypeScriptClient drives the official MCP TypeScript SDK's client
// (testdata/tsclient/client.mjs, from services/api/mcpface) against /mcp of a mesh whose
// servers are the real server-everything over stdio and dyn: it lists every tool (names valid
// for OpenAI and Anthropic), hears notifications/tools/list_changed when dyn gains a tool and
// lists again, calls get-sum, hears a long-running operation's progress, and cancels a 20 s one.
func TestMCPTypeScriptClient(t *testing.T) {
	sdk := testbackend.MCPSDK.Need(t)
	dyn := newChangingServer(t)
	base := startEverythingMesh(t, dyn)

	// The client is an ES module: it finds the SDK in the node_modules folder next to it.
	script := nodeScript(t, filepath.Join("..", "..", "..", "services", "api", "mcpface", "testdata", "tsclient", "client.mjs"), sdk[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sdk[0], script, base+"/mcp")
	cmd.Env = append(os.Environ(),
		"CALL_TOOL=everything__get-sum", `CALL_ARGS={"a":2,"b":3}`,
		"PROGRESS_TOOL=everything__trigger-long-running-operation", `PROGRESS_ARGS={"duration":0.6,"steps":3}`,
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

	// The last report races the result in mcp-go's server (mark3labs/mcp-go PR #969): the
	// first two of the three steps' reports are what must arrive before it.
	ev = next("progress")
	t.Logf("the TypeScript SDK heard progress %+v", ev.Reports)
	if ev.IsError || len(ev.Reports) < 2 || ev.Reports[0].Progress != 1 || ev.Reports[1].Progress != 2 || ev.Reports[0].Total != 3 {
		t.Errorf("the client heard progress %+v (isError %v), want steps 1 and 2 of 3 at least", ev.Reports, ev.IsError)
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

// TestMCPGoClient does with mcp-go's client what TestMCPTypeScriptClient does with the
// TypeScript SDK's, at each protocol era: list (names valid for OpenAI and Anthropic), hear
// notifications/tools/list_changed when dyn gains a tool, call get-sum, and cancel a 20 s
// long-running operation of the real server-everything. The clients run at the same time, on
// the one mesh: most of each one's time is waiting (progress steps, cancels after 1 s).
func TestMCPGoClient(t *testing.T) {
	dyn := newChangingServer(t)
	base := startEverythingMesh(t, dyn)
	type run struct {
		name, version string
		bridged       bool // through toolmesh connect's stdio bridge
	}
	var runs []run
	for _, v := range []string{mcp.LATEST_PROTOCOL_VERSION, "2025-11-25", "2025-06-18"} {
		runs = append(runs, run{v, v, false})
	}
	runs = append(runs, run{"connect/" + mcp.LATEST_PROTOCOL_VERSION, mcp.LATEST_PROTOCOL_VERSION, true}, run{"connect/2025-11-25", "2025-11-25", true})
	for i, r := range runs {
		version := r.version
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			var c *client.Client
			if r.bridged {
				c = bridgedClient(t, base+"/mcp", version)
			} else {
				c = mcpClient(t, base+"/mcp", version, "")
			}
			changed, acked := make(chan struct{}, 16), make(chan struct{}, 1)
			progress := make(chan map[string]any, 16)
			c.OnNotification(func(n mcp.JSONRPCNotification) {
				switch n.Method {
				case string(mcp.MethodNotificationProgress):
					select {
					case progress <- n.Params.AdditionalFields:
					default:
					}
				case mcp.MethodNotificationToolsListChanged:
					select {
					case changed <- struct{}{}:
					default:
					}
				case mcp.MethodNotificationSubscriptionsAcknowledged:
					select {
					case acked <- struct{}{}:
					default:
					}
				}
			})
			if version == mcp.LATEST_PROTOCOL_VERSION {
				// The stateless era hears notifications on a subscriptions/listen stream, once
				// the server has acknowledged the subscription.
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				go func() { _ = c.Listen(ctx, mcp.SubscriptionFilter{ToolsListChanged: true}) }()
				select {
				case <-acked:
				case <-time.After(10 * time.Second):
					t.Fatal("subscriptions/listen: no notifications/subscriptions/acknowledged within 10 s")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			ids := checkedIDs(t, list.Tools)
			if ids["everything__get-sum"] != "everything.get-sum" {
				t.Fatalf("everything__get-sum has id %q; listed %v", ids["everything__get-sum"], ids)
			}

			added := fmt.Sprintf("added_%d", i)
			dyn.srv.AddTool(mcp.NewTool(added, mcp.WithDescription("A tool added while clients listen.")), constText(added))
			// The other clients add their tools too: a notification may be for one of theirs, so
			// the list is read again after each until this client's tool is in it.
			deadline := time.After(15 * time.Second)
			for listed := false; !listed; {
				select {
				case <-changed:
				case <-deadline:
					t.Fatalf("dyn__%s not listed within 15 s of dyn gaining it: no notifications/tools/list_changed after which it was listed", added)
				}
				list, err = c.ListTools(ctx, mcp.ListToolsRequest{})
				if err != nil {
					t.Fatal(err)
				}
				listed = slices.ContainsFunc(list.Tools, func(tl mcp.Tool) bool { return tl.Name == "dyn__"+added })
			}

			res := callText(t, c, "everything__get-sum", map[string]any{"a": 2, "b": 3})
			if res.IsError || !strings.Contains(textOf(res), "5") {
				t.Errorf("everything__get-sum(2, 3) = %q (isError %v), want a text with 5", textOf(res), res.IsError)
			}

			// Progress: server-everything reports each of 3 steps, 0.2 s apart, under the
			// client's token. The last report races the result in mcp-go's server
			// (mark3labs/mcp-go PR #969), so the first two are what must arrive before it.
			preq := mcp.CallToolRequest{}
			preq.Params.Name = "everything__trigger-long-running-operation"
			preq.Params.Arguments = map[string]any{"duration": 0.6, "steps": 3}
			preq.Params.Meta = &mcp.Meta{ProgressToken: "progress-" + r.name}
			if res, err := c.CallTool(ctx, preq); err != nil || !strings.Contains(textOf(res), "completed") {
				t.Fatalf("long-running operation: %v %v", res, err)
			}
			var reports []map[string]any
			for len(progress) > 0 {
				reports = append(reports, <-progress)
			}
			if len(reports) < 2 || reports[0]["progress"] != 1.0 || reports[1]["progress"] != 2.0 {
				t.Errorf("progress notifications %v, want steps 1 and 2 (of 3) at least", reports)
			}
			for _, p := range reports {
				if p["progressToken"] != "progress-"+r.name || p["total"] != 3.0 {
					t.Errorf("progress notification %v, want the client's token and total 3", p)
				}
			}

			cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
			defer ccancel()
			req := mcp.CallToolRequest{}
			req.Params.Name = "everything__trigger-long-running-operation"
			req.Params.Arguments = map[string]any{"duration": 20, "steps": 20}
			start := time.Now()
			_, err = c.CallTool(cctx, req)
			if err == nil || time.Since(start) > 10*time.Second {
				t.Errorf("a 20 s call cancelled after 1 s: err %v after %s; want an error soon after the cancel", err, time.Since(start))
			}
			// The cancel reaches the MCP server: its handler's context ends. Each client's cancel
			// ends one handler, so each client waits for one end (not necessarily its own).
			wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
			defer wcancel()
			req.Params.Name, req.Params.Arguments = "dyn__wait", map[string]any{}
			if _, err := c.CallTool(wctx, req); err == nil {
				t.Error("dyn__wait cancelled after 1 s returned no error")
			}
			select {
			case <-dyn.waitEnded:
			case <-time.After(10 * time.Second):
				t.Error("the MCP server's wait handler was not cancelled within 10 s of the client's cancel")
			}
			// The session still works after a cancelled call.
			if res := callText(t, c, "everything__echo", map[string]any{"message": "still here"}); !strings.Contains(textOf(res), "still here") {
				t.Errorf("echo after the cancel = %q", textOf(res))
			}
		})
	}
}

// bridgedClient is an mcp-go client on stdio pipes to toolmesh connect's bridge (mcpbridge),
// relaying to url, initialized at version.
func bridgedClient(t *testing.T, url, version string) *client.Client {
	t.Helper()
	inR, inW := io.Pipe()   // the client writes, the bridge reads: the bridge's stdin
	outR, outW := io.Pipe() // the bridge writes, the client reads: its stdout
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- mcpbridge.New(mcpbridge.Config{URL: url}, nil).Run(ctx, inR, outW)
		outW.Close()
	}()
	c := client.NewClient(transport.NewIO(outR, inW, io.NopCloser(strings.NewReader(""))), client.WithProtocolVersion(version))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = inW.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the bridge: %v", err)
		}
	})
	ictx, icancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer icancel()
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = version
	req.Params.ClientInfo = mcp.Implementation{Name: "toolmesh-test-bridged", Version: "0"}
	res, err := c.Initialize(ictx, req)
	if err != nil {
		t.Fatalf("initialize through the bridge at %s: %v", version, err)
	}
	if res.ProtocolVersion != version {
		t.Fatalf("negotiated %s through the bridge, want %s", res.ProtocolVersion, version)
	}
	return c
}

// bfclTypes turns BFCL's parameter types into JSON Schema's ("dict" is object, "float" number).
var bfclTypes = strings.NewReplacer(`"type": "dict"`, `"type": "object"`, `"type": "float"`,
	`"type": "number"`, `"type": "tuple"`, `"type": "array"`, `"type": "any"`, `"type": {}`)

// serveBFCL serves the BFCL retrieval pool (testdata/bfcl/retrieval/pool.jsonl, 1951
// tools) as one MCP server and returns its URL and the pool's dev queries.
func serveBFCL(t *testing.T) (string, []string) {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "testdata", "bfcl", "retrieval")
	pool, err := os.ReadFile(filepath.Join(dir, "pool.jsonl"))
	if err != nil {
		t.Fatalf("the BFCL retrieval pool is part of the repository: %v", err)
	}
	var tools []mcpserver.ServerTool
	for _, line := range strings.Split(strings.TrimSpace(string(pool)), "\n") {
		var f struct {
			ID          string          `json:"id"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatal(err)
		}
		schema := strings.ReplaceAll(bfclTypes.Replace(string(f.Parameters)), `"type": {}, `, ``)
		tools = append(tools, mcpserver.ServerTool{
			Tool:    mcp.NewToolWithRawSchema(f.ID, f.Description, json.RawMessage(schema)),
			Handler: constText(f.ID),
		})
	}
	queries, err := os.ReadFile(filepath.Join(dir, "queries-dev.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var qs []string
	for _, line := range strings.Split(strings.TrimSpace(string(queries)), "\n") {
		var q struct{ Query string }
		if err := json.Unmarshal([]byte(line), &q); err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q.Query)
	}
	return serveTools(t, "bfcl", tools), qs
}

// TestMCPSearchBFCL serves the BFCL pool through the mesh: on /mcp/search, search_tools
// returns the same tools in the same order as GET /v1/tools:search, for 100 of BFCL's dev
// queries, each with its definition, and call_tool calls the first by the name it returned.
func TestMCPSearchBFCL(t *testing.T) {
	url, queries := serveBFCL(t)
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `{"mcpServers": {"bfcl": {"url": %q}}}`, url), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startApp(t, "", []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--api.inference-addr=", "--drain-timeout=2s", "--mcp-config=" + cfg,
		// The server is in this process: under -race beside other test binaries its answer to
		// tools/list (1,951 tools) took over 10 s.
		"--executor.connect-timeout=60s",
	}, "executor", "retriever", "api")
	// search_tools names a tool as the catalog does, once the catalog has it: until the face
	// has published the executor's change, a found tool comes with its id only.
	waitMCPTools(t, base+"/mcp", "", "bfcl__calculate_triangle_area")
	c := mcpClient(t, base+"/mcp/search", mcp.LATEST_PROTOCOL_VERSION, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(list.Tools); !slices.Equal(got, []string{"call_tool", "search_tools"}) {
		t.Fatalf("/mcp/search lists %v, want call_tool and search_tools", got)
	}
	const k = 5
	step := max(1, len(queries)/100)
	compared := 0
	for i := 0; i < len(queries); i += step {
		q := queries[i]
		code, body := get(t, base+"/v1/tools:search?k="+fmt.Sprint(k)+"&q="+neturl.QueryEscape(q))
		var rest struct {
			Results []struct {
				Tool struct {
					ID string `json:"id"`
				} `json:"tool"`
			} `json:"results"`
		}
		if err := json.Unmarshal(body, &rest); err != nil || code != http.StatusOK {
			t.Fatalf("GET /v1/tools:search %q: %d %s", q, code, body)
		}
		var want []string
		for _, r := range rest.Results {
			want = append(want, r.Tool.ID)
		}
		res := callText(t, c, "search_tools", map[string]any{"query": q, "k": k})
		var found struct {
			Tools []struct {
				ID, Name    string
				InputSchema map[string]any `json:"inputSchema"`
			} `json:"tools"`
		}
		if err := json.Unmarshal([]byte(textOf(res)), &found); err != nil || res.IsError {
			t.Fatalf("search_tools %q: %s (isError %v)", q, textOf(res), res.IsError)
		}
		var got []string
		for _, f := range found.Tools {
			got = append(got, f.ID)
			if f.Name == "" || f.InputSchema == nil || !openAIName.MatchString(f.Name) {
				t.Errorf("search_tools %q: %s comes with name %q and schema %v, want a valid name and its inputSchema", q, f.ID, f.Name, f.InputSchema)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("query %q: search_tools found %v, /v1/tools:search %v", q, got, want)
		}
		if compared == 0 && len(found.Tools) > 0 {
			first := found.Tools[0]
			res := callText(t, c, "call_tool", map[string]any{"tool": first.Name, "arguments": map[string]any{}})
			// The BFCL tools require arguments; an empty call is refused by the schema check, as a result the model reads.
			if !res.IsError && textOf(res) != strings.TrimPrefix(first.ID, "bfcl.") {
				t.Errorf("call_tool %s = %q", first.Name, textOf(res))
			}
		}
		compared++
	}
	t.Logf("%d queries: search_tools and /v1/tools:search agree on the top %d", compared, k)
}

func names(tools []mcp.Tool) []string {
	out := make([]string, 0, len(tools))
	for _, t := range tools {
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out
}
