package mcpface

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/webguard"
)

// OpenAI's function names and Anthropic's tool names: ^[a-zA-Z0-9_-]{1,64}$ both.
var modelAPIName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// TestCatalogNamesAndPages lists a catalog of 1,201 tools in pages of 500, one of them with an
// id too long for a plain name and two whose plain names collide, at every protocol era.
func TestCatalogNamesAndPages(t *testing.T) {
	var tools []*toolmeshv1.Tool
	for _, id := range ids(1198, "srv.tool_%04d") {
		tools = append(tools, testTool(t, id))
	}
	long := "srv." + strings.Repeat("very_long_tool_name_", 5)
	tools = append(tools, testTool(t, long), testTool(t, "a.b__c"), testTool(t, "a.b.c"))
	h := newHarness(t, newExecutorDouble(tools...), harnessOptions{cfg: Config{PageSize: 500}})
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := h.connect(t, CatalogPath, v, "")
			got, pages := listAll(t, c)
			if len(got) != 1201 || pages != 3 {
				t.Fatalf("got %d tools in %d pages, want 1201 in 3", len(got), pages)
			}
			byID := map[string]mcp.Tool{}
			seen := map[string]bool{}
			for _, tool := range got {
				if !modelAPIName.MatchString(tool.Name) {
					t.Errorf("name %q breaks OpenAI's and Anthropic's rule", tool.Name)
				}
				if seen[tool.Name] {
					t.Errorf("name %q given twice", tool.Name)
				}
				seen[tool.Name] = true
				byID[idOf(tool)] = tool
			}
			if got := byID["srv.tool_0042"].Name; got != "srv__tool_0042" {
				t.Errorf("srv.tool_0042 is named %q, want srv__tool_0042", got)
			}
			if got := byID[long].Name; len(got) != 64 || !strings.HasPrefix(got, "srv__very_long") {
				t.Errorf("the long id is named %q (%d bytes), want a 64-byte shortened name", got, len(got))
			}
			if byID["a.b__c"].Name == byID["a.b.c"].Name || byID["a.b.c"].Name != "a__b__c" {
				t.Errorf("colliding ids named %q and %q", byID["a.b__c"].Name, byID["a.b.c"].Name)
			}
			if in := byID["srv.tool_0001"].InputSchema; in.Type != "object" || in.Properties["a"] == nil {
				t.Errorf("input schema passed through as %+v", in)
			}
			res, err := call(t, c, byID[long].Name, map[string]any{"a": 1})
			if err != nil || text(res) != "ok "+long {
				t.Errorf("calling the shortened name: %q, %v", text(res), err)
			}
		})
	}
}

// TestDefinitionsPassThrough checks that titles, annotations and output schemas reach the
// client as the server declared them.
func TestDefinitionsPassThrough(t *testing.T) {
	tool := testTool(t, "weather.forecast")
	tool.Title = "Weather forecast"
	yes, no := true, false
	tool.Annotations = &toolmeshv1.ToolAnnotations{ReadOnlyHint: &yes, OpenWorldHint: &no}
	tool.OutputSchema, _ = structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"temp": map[string]any{"type": "number"}}})
	h := newHarness(t, newExecutorDouble(tool), harnessOptions{})
	c := h.connect(t, CatalogPath, mcp.LATEST_PROTOCOL_VERSION, "")
	got, _ := listAll(t, c)
	if len(got) != 1 {
		t.Fatalf("got %d tools", len(got))
	}
	g := got[0]
	if g.Title != "Weather forecast" || g.Description != "Tool weather.forecast." {
		t.Errorf("title %q, description %q", g.Title, g.Description)
	}
	if g.Annotations.ReadOnlyHint == nil || !*g.Annotations.ReadOnlyHint || g.Annotations.OpenWorldHint == nil || *g.Annotations.OpenWorldHint ||
		g.Annotations.DestructiveHint != nil {
		t.Errorf("annotations %+v", g.Annotations)
	}
	if out := g.OutputSchema; out.Type != "object" || out.Properties["temp"] == nil {
		t.Errorf("output schema %+v", out)
	}
}

// TestCallResults checks that every kind of content, structured content and isError come
// through, and how the tools handler's errors reach the client.
func TestCallResults(t *testing.T) {
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.echo")), harnessOptions{})
	sc, _ := structpb.NewStruct(map[string]any{"temp": 21})
	h.tools.result = func(req *toolmeshv1.CallToolRequest) (*toolmeshv1.CallToolResponse, error) {
		var args map[string]any
		if err := json.Unmarshal(req.GetArgumentsJson(), &args); err != nil {
			t.Errorf("arguments_json %q: %v", req.GetArgumentsJson(), err)
		}
		switch args["case"] {
		case "all":
			return &toolmeshv1.CallToolResponse{IsError: true, StructuredContent: sc, Content: []*toolmeshv1.Content{
				{Type: "text", Text: proto.String("hi")},
				{Type: "image", Data: []byte{1, 2}, MimeType: proto.String("image/png")},
				{Type: "audio", Data: []byte{3}, MimeType: proto.String("audio/wav")},
				{Type: "resource_link", Uri: proto.String("file:///x"), Name: proto.String("x"), Text: proto.String("the x")},
				{Type: "resource", Uri: proto.String("file:///y"), Text: proto.String("why")},
			}}, nil
		case "invalid":
			return nil, status.Error(codes.InvalidArgument, "arguments: a: expected number")
		case "down":
			return nil, status.Error(codes.Unavailable, "MCP server srv is unreachable")
		case "gone":
			return nil, status.Error(codes.NotFound, "unknown tool srv.echo")
		}
		return nil, status.Error(codes.Internal, "boom")
	}
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := h.connect(t, CatalogPath, v, "")
			res, err := call(t, c, "srv__echo", map[string]any{"case": "all"})
			if err != nil {
				t.Fatal(err)
			}
			if !res.IsError || len(res.Content) != 5 {
				t.Fatalf("isError %v, %d content blocks", res.IsError, len(res.Content))
			}
			if img, ok := res.Content[1].(mcp.ImageContent); !ok || img.Data != "AQI=" || img.MIMEType != "image/png" {
				t.Errorf("image %#v", res.Content[1])
			}
			if l, ok := res.Content[3].(mcp.ResourceLink); !ok || l.URI != "file:///x" || l.Description != "the x" {
				t.Errorf("resource link %#v", res.Content[3])
			}
			if r, ok := res.Content[4].(mcp.EmbeddedResource); !ok {
				t.Errorf("resource %#v", res.Content[4])
			} else if tr, ok := r.Resource.(mcp.TextResourceContents); !ok || tr.Text != "why" {
				t.Errorf("resource contents %#v", r.Resource)
			}
			if m, ok := res.StructuredContent.(map[string]any); !ok || m["temp"] != float64(21) {
				t.Errorf("structured content %#v", res.StructuredContent)
			}
			for _, tc := range []struct{ args, want string }{
				{"invalid", "arguments: a: expected number (InvalidArgument)"},
				{"down", "MCP server srv is unreachable (Unavailable)"},
			} {
				res, err := call(t, c, "srv__echo", map[string]any{"case": tc.args})
				if err != nil || !res.IsError || text(res) != tc.want {
					t.Errorf("%s: got %q (isError %v, err %v), want the tool error %q", tc.args, text(res), res != nil && res.IsError, err, tc.want)
				}
			}
			for _, args := range []string{"gone", "internal"} {
				if _, err := call(t, c, "srv__echo", map[string]any{"case": args}); err == nil {
					t.Errorf("%s: no JSON-RPC error", args)
				}
			}
			if res, err := call(t, c, "srv__echo", []any{1}); err != nil || !res.IsError || !strings.Contains(text(res), "arguments") {
				t.Errorf("array arguments: %q, %v", text(res), err)
			}
			if _, err := call(t, c, "srv__nope", nil); err == nil {
				t.Error("an unknown tool was called")
			}
		})
	}
}

// TestCancel checks that a client's cancellation ends the call's context in the tools handler,
// which the executor turns into notifications/cancelled to the server.
func TestCancel(t *testing.T) {
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.slow")), harnessOptions{})
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := h.connect(t, CatalogPath, v, "")
			h.tools.mu.Lock()
			h.tools.block, h.tools.canceled = make(chan struct{}), make(chan struct{})
			canceled := h.tools.canceled
			h.tools.mu.Unlock()
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				req := mcp.CallToolRequest{}
				req.Params.Name = "srv__slow"
				_, err := c.CallTool(ctx, req)
				errc <- err
			}()
			deadline := time.Now().Add(5 * time.Second)
			for req, _ := h.tools.lastCall(); req == nil; req, _ = h.tools.lastCall() {
				if time.Now().After(deadline) {
					t.Fatal("the call never reached the tools handler")
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if err := <-errc; err == nil {
				t.Error("a cancelled call returned no error")
			}
			select {
			case <-canceled:
			case <-time.After(5 * time.Second):
				t.Fatal("the call's context in the tools handler did not end within 5 s of the client's cancel")
			}
			h.tools.mu.Lock()
			h.tools.block, h.tools.calls = nil, nil
			h.tools.mu.Unlock()
		})
	}
}

// TestListChanged changes the catalog three times in a burst: every kind of client gets one
// notifications/tools/list_changed, and a change that leaves the catalog as it was gets none.
// TestNoListChangedAtStart: clients that connect while the api is still waiting for the
// executor's catalog get its tools and no notifications/tools/list_changed when it arrives: the
// list they were given never changed. (Otherwise every client of a restarted api lists twice.)
func TestNoListChangedAtStart(t *testing.T) {
	exec := newExecutorDouble(testTool(t, "srv.a"))
	exec.snapshotDelay = 300 * time.Millisecond
	h := newHarness(t, exec, harnessOptions{})
	var heard atomic.Int32
	var clients []*client.Client
	for _, v := range versions {
		c := h.connect(t, CatalogPath, v, "")
		c.OnNotification(func(note mcp.JSONRPCNotification) {
			if note.Method == mcp.MethodNotificationToolsListChanged {
				heard.Add(1)
			}
		})
		if v == mcp.LATEST_PROTOCOL_VERSION {
			stop, err := c.ListenAsync(context.Background(), mcp.SubscriptionFilter{ToolsListChanged: true}, func(error) {})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
		}
		clients = append(clients, c)
	}
	sse := h.connectSSE(t, "")
	sse.OnNotification(func(note mcp.JSONRPCNotification) {
		if note.Method == mcp.MethodNotificationToolsListChanged {
			heard.Add(1)
		}
	})
	clients = append(clients, sse)
	for _, c := range clients {
		if got, _ := listAll(t, c); strings.Join(names(got), ",") != "srv__a" {
			t.Errorf("listed %v, want srv__a", names(got))
		}
	}
	time.Sleep(time.Second)
	if n := heard.Load(); n != 0 {
		t.Errorf("%d notifications/tools/list_changed with no change after the clients connected, want 0", n)
	}
}

// TestNoCatalogWaitsOnce: with the executor's catalog late, requests wait for it at most the
// RPC timeout after the face starts, not each its own RPC timeout: past it the face serves what
// it has (nothing) at once, and lists the tools when they come.
func TestNoCatalogWaitsOnce(t *testing.T) {
	exec := newExecutorDouble(testTool(t, "srv.a"))
	exec.snapshotDelay = 4 * time.Second
	// A connect and list waiting its own RPC timeout would take over 1 s; one that does not
	// takes tens of ms, and may take a few hundred on a busy machine.
	h := newHarness(t, exec, harnessOptions{cfg: Config{RPCTimeout: time.Second}})
	time.Sleep(1200 * time.Millisecond) // past the face's wait
	for range 3 {
		start := time.Now()
		c := h.connect(t, CatalogPath, mcp.LATEST_PROTOCOL_VERSION, "")
		got, _ := listAll(t, c)
		if took := time.Since(start); took > 800*time.Millisecond {
			t.Errorf("connect and list took %s with the catalog late, want no wait once the face gave up waiting", took)
		}
		if len(got) != 0 {
			t.Errorf("listed %v before the catalog came", names(got))
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := h.connect(t, CatalogPath, mcp.LATEST_PROTOCOL_VERSION, "")
		if got, _ := listAll(t, c); strings.Join(names(got), ",") == "srv__a" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the late catalog was never listed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestListChanged(t *testing.T) {
	exec := newExecutorDouble(testTool(t, "srv.a"))
	h := newHarness(t, exec, harnessOptions{cfg: Config{ListChangedDelay: time.Second}})
	type counted struct {
		name string
		n    *atomic.Int32
	}
	var clients []counted
	for _, v := range versions {
		c := h.connect(t, CatalogPath, v, "")
		n := &atomic.Int32{}
		c.OnNotification(func(note mcp.JSONRPCNotification) {
			if note.Method == mcp.MethodNotificationToolsListChanged {
				n.Add(1)
			}
		})
		if v == mcp.LATEST_PROTOCOL_VERSION {
			stop, err := c.ListenAsync(context.Background(), mcp.SubscriptionFilter{ToolsListChanged: true}, func(error) {})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
		}
		clients = append(clients, counted{v, n})
	}
	sse := h.connectSSE(t, "")
	n := &atomic.Int32{}
	sse.OnNotification(func(note mcp.JSONRPCNotification) {
		if note.Method == mcp.MethodNotificationToolsListChanged {
			n.Add(1)
		}
	})
	clients = append(clients, counted{"sse", n})
	time.Sleep(time.Second) // the GET and listen streams open
	base := map[string]int32{}
	for _, c := range clients {
		base[c.name] = c.n.Load()
	}

	// A delay of 1 s keeps the burst inside one window even on a busy machine (at 200 ms, a
	// CI run under the race detector saw the burst as two).
	exec.change([]*toolmeshv1.Tool{testTool(t, "srv.b")})
	exec.change([]*toolmeshv1.Tool{testTool(t, "srv.c")})
	exec.change(nil, "srv.a")
	time.Sleep(2500 * time.Millisecond)
	for _, c := range clients {
		if got := c.n.Load() - base[c.name]; got != 1 {
			t.Errorf("%s: %d list_changed notifications for one burst, want 1", c.name, got)
		}
	}
	exec.change([]*toolmeshv1.Tool{testTool(t, "srv.b")}) // the same definition again
	time.Sleep(1500 * time.Millisecond)
	for _, c := range clients {
		if got := c.n.Load() - base[c.name]; got != 1 {
			t.Errorf("%s: %d list_changed notifications after a change that changed nothing, want still 1", c.name, got)
		}
	}
	c := h.connect(t, CatalogPath, mcp.LATEST_PROTOCOL_VERSION, "")
	got, _ := listAll(t, c)
	if strings.Join(names(got), ",") != "srv__b,srv__c" {
		t.Errorf("after the changes: %v", names(got))
	}
}

// TestScopedToken: a token scoped to one server lists and calls only its tools, in every view.
func TestScopedToken(t *testing.T) {
	exec := newExecutorDouble(testTool(t, "one.x"), testTool(t, "one.y"), testTool(t, "two.z"))
	exec.servers = []string{"one", "two"}
	h := newHarness(t, exec, harnessOptions{
		tokens: "narrow:narrow-token-0123456789,wide:wide-token-0123456789",
		policy: policy.Config{Tokens: map[string]policy.Scope{"narrow": {Call: []string{"one"}}, "wide": {Call: []string{"*"}}}},
	})
	narrow := h.connect(t, CatalogPath, mcp.LATEST_PROTOCOL_VERSION, "narrow-token-0123456789")
	got, _ := listAll(t, narrow)
	if strings.Join(names(got), ",") != "one__x,one__y" {
		t.Errorf("narrow lists %v, want one__x, one__y", names(got))
	}
	if res, err := call(t, narrow, "two__z", nil); err == nil {
		t.Errorf("narrow called two__z: %q", text(res))
	}
	if res, err := call(t, narrow, "one__x", nil); err != nil || text(res) != "ok one.x" {
		t.Errorf("narrow calling one__x: %q, %v", text(res), err)
	}
	if _, who := h.tools.lastCall(); who != "narrow" {
		t.Errorf("the call reached the tools handler as %q, want narrow", who)
	}
	wide := h.connect(t, CatalogPath, "2025-11-25", "wide-token-0123456789")
	got, _ = listAll(t, wide)
	if len(got) != 3 {
		t.Errorf("wide lists %v", names(got))
	}
	// One server's view: its own names; a server the token may not see does not exist.
	one := h.connect(t, ServersPath+"one", mcp.LATEST_PROTOCOL_VERSION, "narrow-token-0123456789")
	got, _ = listAll(t, one)
	if strings.Join(names(got), ",") != "x,y" {
		t.Errorf("narrow's view of one lists %v, want x, y", names(got))
	}
	if res, err := call(t, one, "x", nil); err != nil || text(res) != "ok one.x" {
		t.Errorf("calling x on one's view: %q, %v", text(res), err)
	}
	for _, p := range []string{ServersPath + "two", ServersPath + "three", ServersPath + "Bad.Name"} {
		code, _ := post(t, h.url+p, "narrow-token-0123456789", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
		if code != http.StatusNotFound {
			t.Errorf("narrow POST %s: %d, want 404", p, code)
		}
	}
	two := h.connect(t, ServersPath+"two", "2025-06-18", "wide-token-0123456789")
	got, _ = listAll(t, two)
	if strings.Join(names(got), ",") != "z" {
		t.Errorf("wide's view of two lists %v", names(got))
	}
}

// TestSearchView: search_tools returns the tools handler's results with their definitions
// and catalog names; call_tool calls by name or id.
func TestSearchView(t *testing.T) {
	exec := newExecutorDouble(testTool(t, "srv.alpha"), testTool(t, "srv.beta"))
	h := newHarness(t, exec, harnessOptions{})
	h.tools.found = []*toolmeshv1.ScoredTool{{Tool: testTool(t, "srv.beta"), Score: 2}, {Tool: testTool(t, "srv.alpha"), Score: 1}}
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := h.connect(t, SearchPath, v, "")
			got, _ := listAll(t, c)
			if strings.Join(names(got), ",") != "call_tool,search_tools" {
				t.Fatalf("the search view lists %v", names(got))
			}
			res, err := call(t, c, "search_tools", map[string]any{"query": "beta things", "k": 1})
			if err != nil || res.IsError {
				t.Fatalf("search_tools: %q, %v", text(res), err)
			}
			var out struct {
				Tools []struct {
					ID          string         `json:"id"`
					Name        string         `json:"name"`
					InputSchema map[string]any `json:"inputSchema"`
					Score       float64        `json:"score"`
				} `json:"tools"`
			}
			if err := json.Unmarshal([]byte(text(res)), &out); err != nil {
				t.Fatal(err)
			}
			if len(out.Tools) != 1 || out.Tools[0].ID != "srv.beta" || out.Tools[0].Name != "srv__beta" || out.Tools[0].InputSchema["type"] != "object" || out.Tools[0].Score != 2 {
				t.Errorf("search_tools returned %+v", out.Tools)
			}
			if m, ok := res.StructuredContent.(map[string]any); !ok || len(m["tools"].([]any)) != 1 {
				t.Errorf("structured content %#v", res.StructuredContent)
			}
			for _, tool := range []string{"srv__alpha", "srv.alpha"} {
				res, err := call(t, c, "call_tool", map[string]any{"tool": tool, "arguments": map[string]any{"a": 1}})
				if err != nil || text(res) != "ok srv.alpha" {
					t.Errorf("call_tool %s: %q, %v", tool, text(res), err)
				}
			}
			for _, args := range []map[string]any{{"tool": "nope"}, {}, {"tool": "srv.alpha", "arguments": "x"}} {
				if res, err := call(t, c, "call_tool", args); err != nil || !res.IsError {
					t.Errorf("call_tool %v: %q, %v, want a tool error", args, text(res), err)
				}
			}
			for _, args := range []map[string]any{{"query": ""}, {"query": "x", "k": 0}, {"query": "x", "k": 1.5}, {"query": "x", "k": 51}} {
				if res, err := call(t, c, "search_tools", args); err != nil || !res.IsError {
					t.Errorf("search_tools %v: %q, %v, want a tool error", args, text(res), err)
				}
			}
		})
	}
}

// TestAuth: with tokens on, a request without one is 401 with a challenge that names the
// endpoint's resource metadata, which is public.
func TestAuth(t *testing.T) {
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.a")), harnessOptions{tokens: "me:my-token-0123456789abc"})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
	for _, tc := range []struct {
		path, token, wantChallenge string
	}{
		{CatalogPath, "", `Bearer realm="toolmesh", resource_metadata="` + h.url + `/.well-known/oauth-protected-resource/mcp"`},
		{SearchPath, "wrong-token-0123456789", `Bearer realm="toolmesh", resource_metadata="` + h.url + `/.well-known/oauth-protected-resource/mcp/search", error="invalid_token"`},
		{ServersPath + "srv", "", `Bearer realm="toolmesh", resource_metadata="` + h.url + `/.well-known/oauth-protected-resource/mcp/servers/srv"`},
	} {
		req, _ := http.NewRequest(http.MethodPost, h.url+tc.path, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != tc.wantChallenge {
			t.Errorf("%s: %d %q, want 401 %q", tc.path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), tc.wantChallenge)
		}
	}
	resp, err := http.Get(h.url + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || meta["resource"] != h.url+"/mcp" {
		t.Errorf("metadata: %d %v", resp.StatusCode, meta)
	}
	code, _ := post(t, h.url+CatalogPath, "my-token-0123456789abc", init)
	if code != http.StatusOK {
		t.Errorf("initialize with the token: %d", code)
	}
}

// TestOrigin: a browser page from another origin may not call the endpoints.
func TestOrigin(t *testing.T) {
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.a")), harnessOptions{})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
	for _, tc := range []struct {
		origin string
		want   int
	}{{"https://evil.example", http.StatusForbidden}, {"http://localhost:3000", http.StatusOK}, {"null", http.StatusForbidden}} {
		req, _ := http.NewRequest(http.MethodPost, h.url+CatalogPath, strings.NewReader(init))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Origin", tc.origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("origin %s: %d, want %d", tc.origin, resp.StatusCode, tc.want)
		}
	}
}

// TestHost: every endpoint answers to the names the REST port's web guard allows (loopback
// names, *.localhost, IP addresses, and what the operator adds) and to no other, one rule for
// /mcp and /v1. mcp-go's own guard allowed only localhost and loopback IPs on a loopback
// connection, so "foo.localhost" and an --api.allowed-hosts name behind a local proxy got 403.
func TestHost(t *testing.T) {
	exec := newExecutorDouble(testTool(t, "srv.a"))
	web, err := webguard.New(webguard.Config{AllowedHosts: []string{"toolmesh.example"}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	byDefault := newHarness(t, exec, harnessOptions{})
	configured := newHarness(t, exec, harnessOptions{cfg: Config{HostAllowed: web.HostAllowed}})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
	for _, tc := range []struct {
		host                  string
		byDefault, configured int
	}{
		{"foo.localhost", 200, 200},
		{"toolmesh.localhost:7700", 200, 200},
		{"localhost", 200, 200},
		{"127.0.0.1", 200, 200},
		{"toolmesh.example", 403, 200},
		{"evil.example", 403, 403},
	} {
		for _, h := range []struct {
			name string
			h    *harness
			want int
		}{{"default", byDefault, tc.byDefault}, {"configured", configured, tc.configured}} {
			for _, path := range []string{CatalogPath, SearchPath, ServersPath + "srv", SSEPath, SSEMessagePath + "?sessionId=none"} {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				method, body := http.MethodPost, init
				if path == SSEPath {
					method, body = http.MethodGet, ""
				}
				req, _ := http.NewRequestWithContext(ctx, method, h.h.url+path, strings.NewReader(body))
				req.Host = tc.host
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				var b []byte
				if path != SSEPath || resp.StatusCode != 200 { // an open stream ends only with ctx
					b, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
				}
				resp.Body.Close()
				cancel()
				want := h.want
				if want == 200 && path == SSEMessagePath+"?sessionId=none" {
					want = 404 // past the Host check: no such session
				}
				if resp.StatusCode != want {
					t.Errorf("%s face, Host %s, %s %s: %d %s, want %d", h.name, tc.host, method, path, resp.StatusCode, b, want)
				} else if want == 403 && !strings.Contains(string(b), `"details":[]`) {
					t.Errorf("%s face, Host %s, %s: %s, want the JSON error body", h.name, tc.host, path, b)
				}
			}
		}
	}
}

// TestSessionsSurviveRestart: a 2025-era session id one face handed out works on another face
// (a restarted api, or another replica); DELETE is refused.
func TestSessionsSurviveRestart(t *testing.T) {
	exec := newExecutorDouble(testTool(t, "srv.a"))
	a := newHarness(t, exec, harnessOptions{})
	b := newHarness(t, exec, harnessOptions{})
	req, _ := http.NewRequest(http.MethodPost, a.url+CatalogPath, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if !strings.HasPrefix(id, sessionPrefix) {
		t.Fatalf("session id %q", id)
	}
	send := func(method, url, id, body string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if code, body := send(http.MethodPost, b.url+CatalogPath, id, list); code != http.StatusOK || !strings.Contains(body, "srv__a") {
		t.Errorf("the session on the other face: %d %s", code, body)
	}
	if code, _ := send(http.MethodPost, b.url+CatalogPath, "mcp-session-forged", list); code != http.StatusNotFound {
		t.Errorf("a malformed session id: %d, want 404", code)
	}
	if code, _ := send(http.MethodDelete, a.url+CatalogPath, id, ""); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d, want 405", code)
	}
}

// TestSSE: the legacy SSE transport lists and calls; another token cannot post to a session.
func TestSSE(t *testing.T) {
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.a")), harnessOptions{tokens: "me:my-token-0123456789abc,other:other-token-0123456789"})
	c := h.connectSSE(t, "my-token-0123456789abc")
	got, _ := listAll(t, c)
	if strings.Join(names(got), ",") != "srv__a" {
		t.Errorf("SSE lists %v", names(got))
	}
	if res, err := call(t, c, "srv__a", nil); err != nil || text(res) != "ok srv.a" {
		t.Errorf("SSE call: %q, %v", text(res), err)
	}
	var sid string
	h.face.streams.Range(func(k, _ any) bool { sid = k.(string); return false })
	code, _ := post(t, h.url+SSEMessagePath+"?sessionId="+sid, "other-token-0123456789", `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`)
	if code != http.StatusNotFound {
		t.Errorf("another token posting to the session: %d, want 404", code)
	}
}

// post sends body to url with token and returns the status and body.
func post(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal([]byte(body), &msg)
	if v, ok := msg.Params.Meta["io.modelcontextprotocol/protocolVersion"].(string); ok {
		req.Header.Set("Mcp-Protocol-Version", v)
		req.Header.Set("Mcp-Method", msg.Method)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProgress: a client that sends a progress token with its call gets the tool's progress
// reports as notifications/progress under its own token, in order, before the result, through
// the catalog at every protocol era, through call_tool and over SSE; a call without a token
// asks the tools handler for none.
func TestProgress(t *testing.T) {
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.work")), harnessOptions{})
	total := 3.0
	h.tools.mu.Lock()
	h.tools.reports = []*toolmeshv1.CallProgress{{Progress: 1, Total: &total, Message: "one"}, {Progress: 2, Total: &total}, {Progress: 3, Total: &total, Message: "three"}}
	// mcp-go's servers may reorder notifications sent together, and drop or delay one sent just
	// before a result (mark3labs/mcp-go PR #969): the reports come some time apart, as a tool's
	// steps do, and the last one need not arrive before the result.
	h.tools.reportEvery = 50 * time.Millisecond
	h.tools.mu.Unlock()

	type clientCase struct {
		name       string
		connect    func(t *testing.T) *client.Client
		tool       string
		args       map[string]any
		wantResult string
	}
	var cases []clientCase
	for _, v := range versions {
		cases = append(cases, clientCase{"catalog " + v, func(t *testing.T) *client.Client { return h.connect(t, CatalogPath, v, "") }, "srv__work", nil, "ok srv.work"})
	}
	cases = append(cases,
		clientCase{"call_tool", func(t *testing.T) *client.Client { return h.connect(t, SearchPath, mcp.LATEST_PROTOCOL_VERSION, "") }, callToolName, map[string]any{"tool": "srv.work"}, "ok srv.work"},
		clientCase{"sse", func(t *testing.T) *client.Client { return h.connectSSE(t, "") }, "srv__work", nil, "ok srv.work"},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.connect(t)
			var mu sync.Mutex
			var got []map[string]any
			c.OnNotification(func(n mcp.JSONRPCNotification) {
				if n.Method == string(mcp.MethodNotificationProgress) {
					mu.Lock()
					got = append(got, n.Params.AdditionalFields)
					mu.Unlock()
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req := mcp.CallToolRequest{}
			req.Params.Name = tc.tool
			req.Params.Arguments = tc.args
			req.Params.Meta = &mcp.Meta{ProgressToken: "client-token-" + tc.name}
			res, err := c.CallTool(ctx, req)
			if err != nil || text(res) != tc.wantResult {
				t.Fatalf("call = %v, %v; want %q", res, err, tc.wantResult)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) < 2 {
				t.Fatalf("got %d progress notifications before the result, want at least 2 of 3: %v", len(got), got)
			}
			last := 0.0
			for _, n := range got {
				p, _ := n["progress"].(float64)
				if n["progressToken"] != "client-token-"+tc.name || p <= last || p > 3 || n["total"] != 3.0 {
					t.Errorf("notification %v: want the client's token, growing progress up to 3 of 3", n)
				}
				last = p
				if want := map[float64]string{1: "one", 3: "three"}[p]; n["message"] != nil && n["message"] != want || want != "" && n["message"] != want {
					t.Errorf("notification %v: message %v, want %q", n, n["message"], want)
				}
			}
		})
	}

	// Without a token, the tools handler is asked for no progress.
	c := h.connect(t, CatalogPath, mcp.LATEST_PROTOCOL_VERSION, "")
	h.tools.mu.Lock()
	h.tools.asked = nil
	h.tools.mu.Unlock()
	if _, err := call(t, c, "srv__work", nil); err != nil {
		t.Fatal(err)
	}
	h.tools.mu.Lock()
	defer h.tools.mu.Unlock()
	if len(h.tools.asked) != 1 || h.tools.asked[0] {
		t.Errorf("a call without a progress token asked for progress: %v", h.tools.asked)
	}
}

// TestListerPagesAsTheViewsServer: /mcp answers tools/list with the view's lister (see view);
// its pages, their order and their cursors are those of the view's own mcp-go server, which
// still answers on the legacy SSE transport, for an unscoped and a scoped token, before and
// after the catalog changes, at every protocol era.
func TestListerPagesAsTheViewsServer(t *testing.T) {
	var tools []*toolmeshv1.Tool
	for _, id := range ids(230, "srv.tool_%03d") {
		tools = append(tools, testTool(t, id))
	}
	// Ids whose order is not that of their names: colliding plain names, a shortened one,
	// capitals and underscores.
	for _, id := range []string{"a.b__c", "a.b.c", "srv." + strings.Repeat("very_long_tool_name_", 5), "srv.Zed", "srv._under", "other.x"} {
		tools = append(tools, testTool(t, id))
	}
	exec := newExecutorDouble(tools...)
	h := newHarness(t, exec, harnessOptions{
		cfg:    Config{PageSize: 50},
		tokens: "narrow:narrow-token-0123456789,wide:wide-token-0123456789",
		policy: policy.Config{Tokens: map[string]policy.Scope{"narrow": {Call: []string{"srv"}}, "wide": {Call: []string{"*"}}}},
	})
	check := func(t *testing.T, token string, want int) {
		sse := pages(t, h.connectSSE(t, token))
		var n int
		for _, p := range sse {
			n += strings.Count(p, ",") + 1
		}
		if n != want {
			t.Fatalf("the view's own server lists %d tools, want %d", n, want)
		}
		for _, v := range versions {
			if got := pages(t, h.connect(t, CatalogPath, v, token)); !slices.Equal(got, sse) {
				t.Errorf("%s: /mcp pages\n%v\nthe view's own server\n%v", v, got, sse)
			}
		}
	}
	t.Run("wide", func(t *testing.T) { check(t, "wide-token-0123456789", 236) })
	t.Run("narrow", func(t *testing.T) { check(t, "narrow-token-0123456789", 233) })
	exec.change([]*toolmeshv1.Tool{testTool(t, "srv.tool_500"), testTool(t, "b.new")}, "srv.tool_007", "a.b.c")
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := listAll(t, h.connect(t, CatalogPath, mcp.LATEST_PROTOCOL_VERSION, "wide-token-0123456789"))
		if len(got) == 236 && slices.Contains(names(got), "b__new") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the change /mcp lists %d tools", len(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Run("changed", func(t *testing.T) { check(t, "wide-token-0123456789", 236) })
}

// pages lists every tool page by page: each page as its cursor and its names, in order.
func pages(t *testing.T, c *client.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	req := mcp.ListToolsRequest{}
	for range 1000 {
		res, err := c.ListToolsByPage(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		p := string(req.Params.Cursor) + "|"
		for i, tool := range res.Tools {
			if i > 0 {
				p += ","
			}
			p += tool.Name
		}
		out = append(out, p)
		if res.NextCursor == "" {
			return out
		}
		req.Params.Cursor = res.NextCursor
	}
	t.Fatal("more than 1000 pages")
	return nil
}
