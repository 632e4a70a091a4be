package executor

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// streamable serves a test MCP server labelled label over streamable HTTP.
func streamable(t *testing.T, label string) mcpconfig.Server {
	t.Helper()
	h := newHTTPHarness(t, streamableHandler(fixed(newTestMCP(label, 0))))
	return mcpconfig.Server{Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + h.addr + "/mcp"}
}

func (h *executorHarness) servers(t *testing.T) *toolmeshv1.ExecutorServiceListServersResponse {
	t.Helper()
	resp, err := h.client.ListServers(context.Background(), &toolmeshv1.ExecutorServiceListServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (h *executorHarness) serverNamed(t *testing.T, name string) *toolmeshv1.Server {
	t.Helper()
	for _, s := range h.servers(t).GetServers() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

func (h *executorHarness) toolIDs(t *testing.T) []string {
	t.Helper()
	resp, err := h.client.ListTools(context.Background(), &toolmeshv1.ExecutorServiceListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tl := range resp.GetTools() {
		ids = append(ids, tl.GetId())
	}
	return ids
}

// TestReconfigure adds, removes and changes servers of a running executor while calls go on:
// the untouched server's calls never fail and its session is kept, a call in flight on the
// removed server finishes, the changed server's first call waits for its new session, and
// the catalog follows.
func TestReconfigure(t *testing.T) {
	// gone's hold tool says when a call has reached it, so that the reload surely finds it in flight.
	held := make(chan struct{}, 1)
	goneMCP := newTestMCP("gone", 0)
	goneMCP.srv.AddTool(mcp.NewTool("hold", mcp.WithDescription("Sleeps half a second")),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			held <- struct{}{}
			time.Sleep(500 * time.Millisecond)
			return mcp.NewToolResultText("slept"), nil
		})
	goneHTTP := newHTTPHarness(t, streamableHandler(fixed(goneMCP)))
	gone := mcpconfig.Server{Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + goneHTTP.addr + "/mcp"}
	keep, edit := streamable(t, "keep"), streamable(t, "edit")
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"keep": keep, "gone": gone, "edit": edit}})
	h.waitReady(t)
	before := h.serverNamed(t, "keep").GetConnectedAt().AsTime()
	if got := h.servers(t).GetConfig().GetGeneration(); got != 1 {
		t.Errorf("generation at start = %d, want 1", got)
	}

	// A load on the untouched server for the whole reload.
	stop := make(chan struct{})
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := h.client.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "keep.whoami"})
			cancel()
			calls.Add(1)
			if err != nil || text(resp) != "keep" {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("%v %q", err, text(resp)))
			}
		}
	}()
	// A call in flight on the server about to be removed.
	slow := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := h.client.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "gone.hold"})
		slow <- fmt.Sprintf("%v %s", err, text(resp))
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the call on the server about to be removed did not reach it")
	}

	edited := streamable(t, "edited")
	fresh := streamable(t, "fresh")
	ch, err := h.svc.Reconfigure(map[string]mcpconfig.Server{"keep": keep, "edit": edited, "fresh": fresh})
	if err != nil {
		t.Fatal(err)
	}
	want := Changes{Added: []string{"fresh"}, Removed: []string{"gone"}, Changed: []string{"edit"}, Kept: 1}
	if fmt.Sprint(ch) != fmt.Sprint(want) {
		t.Errorf("changes = %+v, want %+v", ch, want)
	}
	// The first call to the changed server waits for its new session.
	if resp, err := call(t, h, "edit.whoami", nil); err != nil || text(resp) != "edited" {
		t.Errorf("edit.whoami right after the reload = %v %q, want the new server's answer", err, text(resp))
	}
	if got := <-slow; got != "<nil> slept" {
		t.Errorf("the call in flight on the removed server ended %q, want its result", got)
	}
	if _, err := call(t, h, "gone.whoami", nil); status.Code(err) != codes.NotFound {
		t.Errorf("gone.whoami after the reload: %v, want NotFound", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids := h.toolIDs(t)
		if slices.Contains(ids, "fresh.whoami") && !slices.ContainsFunc(ids, func(id string) bool { return strings.HasPrefix(id, "gone.") }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("catalog after the reload: %v; want fresh's tools and none of gone's", ids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if resp, err := call(t, h, "fresh.whoami", nil); err != nil || text(resp) != "fresh" {
		t.Errorf("fresh.whoami = %v %q", err, text(resp))
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d calls to the untouched server failed during the reload; first: %v", n, calls.Load(), firstErr.Load())
	}
	if after := h.serverNamed(t, "keep").GetConnectedAt().AsTime(); !after.Equal(before) {
		t.Errorf("the untouched server reconnected: connected_at %v, then %v", before, after)
	}
	if names := serverNames(h.servers(t)); fmt.Sprint(names) != "[edit fresh keep]" {
		t.Errorf("servers after the reload = %v", names)
	}
	if c := h.servers(t).GetConfig(); c.GetGeneration() != 2 || c.GetLastReloadError() != "" || c.GetLastReloadAt() == nil {
		t.Errorf("config status after the reload = %v; want generation 2, reloaded, no error", c)
	}
	t.Logf("%d calls to the untouched server during the reload", calls.Load())
}

// TestReconfigureRefused: an invalid set changes nothing and is reported; the next valid one
// clears the report.
func TestReconfigureRefused(t *testing.T) {
	a := streamable(t, "a")
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"a": a}})
	h.waitReady(t)
	before := h.serverNamed(t, "a").GetConnectedAt().AsTime()
	cases := []struct {
		name    string
		servers map[string]mcpconfig.Server
		want    string
	}{
		{"no url", map[string]mcpconfig.Server{"a": a, "b": {Transport: mcpconfig.TransportSSE}}, `server "b": transport sse needs a url`},
		{"bad name", map[string]mcpconfig.Server{"A.B": a}, `server "A.B": name must match`},
		{"bad pattern", map[string]mcpconfig.Server{"a": {Transport: a.Transport, URL: a.URL, AllowedTools: []string{"get *"}}}, "mcpServers.a.allowedTools[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := h.svc.Reconfigure(tc.servers); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Reconfigure = %v, want an error with %q", err, tc.want)
			}
			c := h.servers(t).GetConfig()
			if c.GetGeneration() != 1 || !strings.Contains(c.GetLastReloadError(), tc.want) {
				t.Errorf("config status = %v; want generation 1 and the error", c)
			}
			if names := serverNames(h.servers(t)); fmt.Sprint(names) != "[a]" {
				t.Errorf("servers = %v, want [a]", names)
			}
			if resp, err := call(t, h, "a.whoami", nil); err != nil || text(resp) != "a" {
				t.Errorf("a.whoami = %v %q", err, text(resp))
			}
		})
	}
	h.svc.RefuseConfig(fmt.Errorf("config: read http://user:hunter2@example.com/x: no such file"))
	if c := h.servers(t).GetConfig(); strings.Contains(c.GetLastReloadError(), "hunter2") || !strings.Contains(c.GetLastReloadError(), "no such file") {
		t.Errorf("a refused load is reported as %q; want the error, its credentials masked", c.GetLastReloadError())
	}
	if ch, err := h.svc.Reconfigure(map[string]mcpconfig.Server{"a": a}); err != nil || !ch.empty() {
		t.Fatalf("the same servers again: %+v, %v; want no change", ch, err)
	}
	if c := h.servers(t).GetConfig(); c.GetGeneration() != 1 || c.GetLastReloadError() != "" {
		t.Errorf("config status after a good reload = %v; want generation 1 (nothing changed) and no error", c)
	}
	if after := h.serverNamed(t, "a").GetConnectedAt().AsTime(); !after.Equal(before) {
		t.Errorf("refused reloads reconnected the server: connected_at %v, then %v", before, after)
	}
}

// TestReconfigureRules: a server whose allowedTools or excludedTools change is a changed
// server, and the tools its new rules leave out are gone at once.
func TestReconfigureRules(t *testing.T) {
	a := streamable(t, "a")
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"a": a}})
	h.waitReady(t)
	narrowed := a
	narrowed.ExcludedTools = []string{"add"}
	ch, err := h.svc.Reconfigure(map[string]mcpconfig.Server{"a": narrowed})
	if err != nil || fmt.Sprint(ch.Changed) != "[a]" {
		t.Fatalf("Reconfigure = %+v, %v; want a changed", ch, err)
	}
	if ids := h.toolIDs(t); slices.Contains(ids, "a.add") {
		t.Errorf("catalog right after excluding add: %v", ids)
	}
	if _, err := call(t, h, "a.add", map[string]any{"a": 1, "b": 2}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a.add after excluding it: %v, want PermissionDenied", err)
	}
	if resp, err := call(t, h, "a.whoami", nil); err != nil || text(resp) != "a" {
		t.Errorf("a.whoami = %v %q", err, text(resp))
	}
}

// TestReconfigureBeforeRun: servers configured again before Run are the ones Run connects.
func TestReconfigureBeforeRun(t *testing.T) {
	a, b := streamable(t, "a"), streamable(t, "b")
	svc, err := New(Config{Servers: map[string]mcpconfig.Server{"a": a}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reconfigure(map[string]mcpconfig.Server{"b": b}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for ok, why := svc.Ready(); !ok; ok, why = svc.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ids := svc.cat.list(""); len(ids) == 0 || ids[0].GetServer() != "b" {
		t.Errorf("catalog = %v, want b's tools", ids)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reconfigure(map[string]mcpconfig.Server{"a": a}); err == nil {
		t.Error("Reconfigure after Run ended succeeded")
	}
}

func TestSameServer(t *testing.T) {
	base := mcpconfig.Server{Name: "a", Transport: mcpconfig.TransportStdio, Command: "x", Env: map[string]string{"K": "v"}}
	cases := []struct {
		name string
		edit func(*mcpconfig.Server)
		want bool
	}{
		{"identical", func(*mcpconfig.Server) {}, true},
		{"warnings only", func(s *mcpconfig.Server) { s.Warnings = []string{"unknown key"} }, true},
		{"env value", func(s *mcpconfig.Server) { s.Env = map[string]string{"K": "w"} }, false},
		{"args", func(s *mcpconfig.Server) { s.Args = []string{"-v"} }, false},
		{"timeout", func(s *mcpconfig.Server) { s.Timeout = time.Second }, false},
		{"allowedTools", func(s *mcpconfig.Server) { s.AllowedTools = []string{"get_*"} }, false},
		{"excludedTools", func(s *mcpconfig.Server) { s.ExcludedTools = []string{"rm"} }, false},
		{"allowDestructive", func(s *mcpconfig.Server) { s.AllowDestructive = true }, false},
	}
	for _, tc := range cases {
		b := base
		b.Env = map[string]string{"K": "v"}
		tc.edit(&b)
		if got := sameServer(base, b); got != tc.want {
			t.Errorf("%s: sameServer = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func serverNames(resp *toolmeshv1.ExecutorServiceListServersResponse) []string {
	var names []string
	for _, s := range resp.GetServers() {
		names = append(names, s.GetName())
	}
	return names
}

func TestDiffServers(t *testing.T) {
	a := mcpconfig.Server{Transport: mcpconfig.TransportStdio, Command: "a"}
	b := mcpconfig.Server{Transport: mcpconfig.TransportStreamableHTTP, URL: "http://b/mcp"}
	b2 := b
	b2.Headers = map[string]string{"Authorization": "Bearer x"}
	c := mcpconfig.Server{Transport: mcpconfig.TransportSSE, URL: "http://c/sse"}
	cases := []struct {
		name      string
		old, next map[string]mcpconfig.Server
		want      Changes
	}{
		{"unchanged", map[string]mcpconfig.Server{"a": a, "b": b}, map[string]mcpconfig.Server{"a": a, "b": b}, Changes{Kept: 2}},
		{"added", map[string]mcpconfig.Server{"a": a}, map[string]mcpconfig.Server{"a": a, "c": c}, Changes{Added: []string{"c"}, Kept: 1}},
		{"removed", map[string]mcpconfig.Server{"a": a, "b": b}, map[string]mcpconfig.Server{"a": a}, Changes{Removed: []string{"b"}, Kept: 1}},
		{"changed", map[string]mcpconfig.Server{"a": a, "b": b}, map[string]mcpconfig.Server{"a": a, "b": b2}, Changes{Changed: []string{"b"}, Kept: 1}},
		{"all at once", map[string]mcpconfig.Server{"a": a, "b": b, "x": c}, map[string]mcpconfig.Server{"a": a, "b": b2, "c": c}, Changes{Added: []string{"c"}, Removed: []string{"x"}, Changed: []string{"b"}, Kept: 1}},
		{"renamed is removed and added", map[string]mcpconfig.Server{"a": a}, map[string]mcpconfig.Server{"a2": a}, Changes{Added: []string{"a2"}, Removed: []string{"a"}}},
		{"from none", nil, map[string]mcpconfig.Server{"a": a}, Changes{Added: []string{"a"}}},
		{"to none", map[string]mcpconfig.Server{"a": a}, nil, Changes{Removed: []string{"a"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The executor keeps its servers with Name set; a config read again has it unset.
			old := map[string]mcpconfig.Server{}
			for name, s := range tc.old {
				s.Name = name
				old[name] = s
			}
			if got := diffServers(old, tc.next); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("diffServers = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestReconfigureStdioRemoved: a removed stdio server's process is stopped (and reaped), and
// a changed one's is replaced by a new process.
func TestReconfigureStdioRemoved(t *testing.T) {
	kid, _ := stdioServer(t, 0)
	other, _ := stdioServer(t, 0)
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"kid": kid, "other": other}})
	h.waitReady(t)
	pidOf := func(server string) int {
		t.Helper()
		resp, err := call(t, h, server+".pid", nil)
		if err != nil {
			t.Fatalf("%s.pid: %v", server, err)
		}
		pid, err := strconv.Atoi(text(resp))
		if err != nil {
			t.Fatalf("%s.pid = %q", server, text(resp))
		}
		return pid
	}
	kidPid, otherPid := pidOf("kid"), pidOf("other")
	changed := other
	changed.Args = append(slices.Clone(other.Args), "-test.v=false")
	if _, err := h.svc.Reconfigure(map[string]mcpconfig.Server{"other": changed}); err != nil {
		t.Fatal(err)
	}
	if pid := pidOf("other"); pid == otherPid {
		t.Errorf("the changed stdio server answers from its old process %d", pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range []int{kidPid, otherPid} {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("process %d of a removed or changed stdio server still runs", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
