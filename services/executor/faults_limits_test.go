package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/fdcheck"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Fault tests of issue 17: a server that publishes what would take the mesh
// down. Each runs under guardProcess, because without the limits under test
// the executor grows by ~150 MB/s until the machine has no memory left: the
// guard ends the test binary first.

// processGuard watches the test process from outside the code under test.
type processGuard struct {
	base, peak         atomic.Int64 // resident set, bytes
	heapBase, heapPeak atomic.Int64 // live Go heap objects, bytes
	stop               chan struct{}
	done               chan struct{}
}

// guardProcess samples the process's resident set every 10 ms and ends the
// test binary (a panic on its own goroutine) when it grows more than
// maxGrowth over what it was at the start, or when the test runs longer than
// maxTime: a runaway here would otherwise take the shared machine with it.
func guardProcess(t *testing.T, maxGrowth int64, maxTime time.Duration) *processGuard {
	t.Helper()
	g := &processGuard{stop: make(chan struct{}), done: make(chan struct{})}
	runtime.GC()
	rss := residentBytes()
	g.base.Store(rss)
	g.peak.Store(rss)
	name := t.Name()
	go func() {
		defer close(g.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		deadline := time.NewTimer(maxTime)
		defer deadline.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-deadline.C:
				panic(fmt.Sprintf("%s: process guard: still running after %s\n\n%s", name, maxTime, allStacks()))
			case <-tick.C:
			}
			rss := residentBytes()
			if rss > g.peak.Load() {
				g.peak.Store(rss)
			}
			if h := heapBytes(); h > g.heapPeak.Load() {
				g.heapPeak.Store(h)
			}
			if grown := rss - g.base.Load(); grown > maxGrowth {
				panic(fmt.Sprintf("%s: process guard: resident set grew %d MiB, over %d MiB\n\n%s",
					name, grown>>20, maxGrowth>>20, allStacks()))
			}
		}
	}()
	t.Cleanup(func() {
		close(g.stop)
		<-g.done
	})
	return g
}

// mark starts a measurement: growth is counted from now.
func (g *processGuard) mark() {
	rss := residentBytes()
	g.base.Store(rss)
	g.peak.Store(rss)
	h := heapBytes()
	g.heapBase.Store(h)
	g.heapPeak.Store(h)
}

// growth is how far the resident set grew over the mark, at its peak.
func (g *processGuard) growth() int64 {
	time.Sleep(20 * time.Millisecond) // one more sample
	return g.peak.Load() - g.base.Load()
}

// heapGrowth is how far the live Go heap grew over the mark, at its peak
// (sampled, so a short peak may be missed). Under the race detector the
// resident set is several times the heap, which this is not.
func (g *processGuard) heapGrowth() int64 {
	time.Sleep(20 * time.Millisecond)
	return g.heapPeak.Load() - g.heapBase.Load()
}

func heapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// residentBytes is VmRSS from /proc/self/status, or the Go runtime's view
// where there is no /proc.
func residentBytes() int64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.Sys)
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestFaultCostlySchema: a tool whose input schema doubles the validator's
// work per level (issue 17's 2 KB schema, 30 levels: 5·2^30 evaluations for
// one call) is refused when listed: ListServers names it with the reason,
// the catalog leaves it out, a call to it fails at once with NOT_FOUND
// saying why, and the server's other tools work. With the measure's limit
// raised so that it slips through, the validation budget fails that one call
// with INVALID_ARGUMENT instead. Either way: answered within 2 s, the
// process grows by less than 100 MB.
func TestFaultCostlySchema(t *testing.T) {
	cases := []struct {
		name     string
		cfg      Config
		code     codes.Code
		contains []string
		refused  bool
	}{
		{"refused when listed", Config{}, codes.NotFound,
			[]string{`tool "costly.doubling" is not callable: refused when its server listed it`, "over the limit of 1000 (executor.schema-max-evaluations)"}, true},
		{"slips through, stopped by the budget", Config{SchemaMaxEvaluations: 1 << 62}, codes.InvalidArgument,
			[]string{`invalid arguments for "costly.doubling"`, "over the budget of 100000 (executor.schema-validation-steps)"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			guard := guardProcess(t, 500<<20, 60*time.Second)
			fdcheck.Check(t, 2)
			ts := newTestMCP("costly", 0)
			ts.srv.AddTool(mcp.NewToolWithRawSchema("doubling", "issue 17's schema", json.RawMessage(doublingSchema(30))),
				func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return mcp.NewToolResultText("validated?"), nil
				})
			hh := newHTTPHarness(t, streamableHandler(fixed(ts)))
			tc.cfg.Servers = map[string]mcpconfig.Server{
				"costly": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"},
			}
			h := startExecutor(t, tc.cfg)
			h.waitReady(t)

			s := serverState(t, h, "costly")
			if tc.refused {
				if r := s.GetRefusedTools(); len(r) != 1 || r[0].GetName() != "doubling" || !strings.Contains(r[0].GetReason(), "executor.schema-max-evaluations") {
					t.Errorf("refused_tools %v, want doubling with the reason", r)
				}
				for _, id := range toolIDs(t, h, "costly") {
					if id == "costly.doubling" {
						t.Errorf("the catalog lists %s", id)
					}
				}
			} else if len(s.GetRefusedTools()) != 0 {
				t.Errorf("refused_tools %v, want none with the limit raised", s.GetRefusedTools())
			}
			if s.GetToolCount() != 6+boolInt(!tc.refused) {
				t.Errorf("tool_count %d", s.GetToolCount())
			}

			guard.mark()
			start := time.Now()
			_, err := callWithin(t, h, "costly.doubling", map[string]any{"x": map[string]any{"y": 1}}, 0)
			took := time.Since(start)
			grown := guard.growth()
			t.Logf("answered in %s; resident set grew %d MiB", took.Round(time.Millisecond), grown>>20)
			wantCode(t, err, tc.code, tc.contains...)
			if took > 2*time.Second {
				t.Errorf("answered after %s, want within 2s", took)
			}
			if grown > 100<<20 {
				t.Errorf("resident set grew %d MiB, want under 100 MiB", grown>>20)
			}
			if r, err := call(t, h, "costly.add", map[string]any{"a": 1, "b": 2}); err != nil || text(r) != "3" {
				t.Fatalf("another tool of the server: %v %v", r, err)
			}
			if s := serverState(t, h, "costly"); s.GetState() != toolmeshv1.ServerState_SERVER_STATE_READY {
				t.Errorf("state %v (%s), want READY", s.GetState(), s.GetLastError())
			}
		})
	}
}

func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// fillerTools are n tools named filler_N, for AddTools.
func fillerTools(n int) ([]server.ServerTool, []string) {
	tools := make([]server.ServerTool, n)
	names := make([]string, n)
	for i := range tools {
		names[i] = fmt.Sprintf("filler_%05d", i)
		tools[i] = server.ServerTool{
			Tool: mcp.NewTool(names[i], mcp.WithDescription("filler")),
			Handler: func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			},
		}
	}
	return tools, names
}

// envListingDouble makes the test binary a stdio MCP server double (see
// serveListingDouble) listing that many tools.
const envListingDouble = "EXECUTOR_TEST_LISTING_DOUBLE"

// serveListingDouble is a test double of a stdio MCP server that lists n
// tools in one tools/list page: it speaks the legacy handshake (it answers
// server/discover with "method not found", as a server of 2025-11-25 does),
// initialize, ping and tools/list, and nothing else. Its page is written as
// bytes, so its cost under the race detector is the executor's, not an MCP
// SDK encoding 50,000 tools (mcp-go's server takes about 20 s for that).
func serveListingDouble(n string) int {
	count, err := strconv.Atoi(n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "listing double:", err)
		return 1
	}
	var page bytes.Buffer
	page.WriteString(`{"tools":[`)
	for i := range count {
		if i > 0 {
			page.WriteByte(',')
		}
		fmt.Fprintf(&page, `{"name":"filler_%05d","description":"filler","inputSchema":{"type":"object"}}`, i)
	}
	page.WriteString(`]}`)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || len(req.ID) == 0 {
			continue // a notification
		}
		var result string
		switch req.Method {
		case "initialize":
			v := req.Params.ProtocolVersion
			if v == "" || mcp.IsModernProtocol(v) {
				v = mcp.LATEST_LEGACY_PROTOCOL_VERSION
			}
			result = fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"listing-double","version":"1"}}`, v)
		case "ping":
			result = `{}`
		case "tools/list":
			result = page.String()
		default:
			fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`+"\n", req.ID)
			out.Flush()
			continue
		}
		fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", req.ID, result)
		out.Flush()
	}
	return 0
}

// TestFaultHugeListing: a server (its own process, so the memory measured is
// the executor's) lists 50,000 tools in one page. The listing stops at
// executor.max-tools-per-server before mcp-go decodes it: the server is
// DEGRADED, saying why, no tools are served from it, and the process grows by
// a bounded amount; another server is unaffected.
func TestFaultHugeListing(t *testing.T) {
	guard := guardProcess(t, 500<<20, 90*time.Second)
	fdcheck.Check(t, 2)
	srv := mcpconfig.Server{Transport: mcpconfig.TransportStdio, Command: os.Args[0], Args: []string{"-test.run=^$"},
		Env: map[string]string{envListingDouble: "50000"}}
	okh := newHTTPHarness(t, streamableHandler(fixed(newTestMCP("ok", 0))))
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"huge": srv,
		"ok":   {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + okh.addr + "/mcp"},
	}})
	guard.mark()
	start := time.Now()
	var s *toolmeshv1.Server
	eventually.Check(t, 30*time.Second, "the huge listing judged", func() string {
		s = serverState(t, h, "huge")
		if s.GetState() != toolmeshv1.ServerState_SERVER_STATE_DEGRADED {
			return fmt.Sprintf("state %v (%s)", s.GetState(), s.GetLastError())
		}
		return ""
	})
	took, grown, heap := time.Since(start), guard.growth(), guard.heapGrowth()
	t.Logf("50,000 tools listed: judged in %s (the child's start included); Go heap grew %d MiB at its peak, resident set %d MiB; last_error %q",
		took.Round(time.Millisecond), heap>>20, grown>>20, s.GetLastError())
	for _, want := range []string{"tools/list: the server lists more than 10000 tools (50000 in the first 1 pages), the limit (executor.max-tools-per-server)",
		"no tools are served from it"} {
		if !strings.Contains(s.GetLastError(), want) {
			t.Errorf("last_error %q, want it to contain %q", s.GetLastError(), want)
		}
	}
	if s.GetToolCount() != 0 || len(toolIDs(t, h, "huge")) != 0 {
		t.Errorf("tool_count %d, catalog %d tools; want none", s.GetToolCount(), len(toolIDs(t, h, "huge")))
	}
	if heap > 100<<20 {
		// Accepted, these 50,006 tools made the mesh grow by 840 MB.
		t.Errorf("Go heap grew %d MiB for a listing refused at 10000 tools", heap>>20)
	}
	_, err := call(t, h, "huge.filler_00000", nil)
	wantCode(t, err, codes.NotFound, `unknown tool "huge.filler_00000"`)
	if r, err := call(t, h, "ok.add", map[string]any{"a": 1, "b": 2}); err != nil || text(r) != "3" {
		t.Fatalf("another server: %v %v", r, err)
	}
	if ok, why := h.svc.Ready(); !ok {
		t.Errorf("Ready = false (%s): a degraded server is connected", why)
	}
}

// TestFaultListingLimits: a server whose tools grow past a listing limit keeps
// its last good catalog (and its tools work) while DEGRADED, and is READY with
// the new list once it is back within the limits.
func TestFaultListingLimits(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		grow int
		want string
	}{
		{"tools", Config{MaxToolsPerServer: 100}, 200, "the server lists more than 100 tools (104 in the first 26 pages), the limit (executor.max-tools-per-server)"},
		{"bytes", Config{MaxListBytes: 16 << 10}, 200, "over the 16384-byte limit (executor.max-list-bytes)"},
		{"bytes in one page", Config{MaxListBytes: 16 << 10}, 200, "over the 16384-byte limit (executor.max-list-bytes)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fdcheck.Check(t, 2)
			var opts []server.ServerOption
			if tc.name != "bytes in one page" {
				opts = append(opts, server.WithPaginationLimit(4))
			}
			ts := newTestMCP("grow", 0, opts...)
			hh := newHTTPHarness(t, streamableHandler(fixed(ts)))
			tc.cfg.Servers = map[string]mcpconfig.Server{"grow": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"}}
			h := startExecutor(t, tc.cfg)
			h.waitReady(t)
			before := toolIDs(t, h, "grow")

			tools, names := fillerTools(tc.grow)
			ts.srv.AddTools(tools...)
			eventually.Check(t, 5*time.Second, "degraded", func() string {
				s := serverState(t, h, "grow")
				if s.GetState() != toolmeshv1.ServerState_SERVER_STATE_DEGRADED {
					return fmt.Sprintf("state %v", s.GetState())
				}
				if !strings.Contains(s.GetLastError(), tc.want) || !strings.Contains(s.GetLastError(), "keeping the last good tool list") {
					return fmt.Sprintf("last_error %q", s.GetLastError())
				}
				return ""
			})
			if got := toolIDs(t, h, "grow"); !slices.Equal(got, before) {
				t.Errorf("catalog %d tools, want the last good %d", len(got), len(before))
			}
			if r, err := call(t, h, "grow.add", map[string]any{"a": 1, "b": 2}); err != nil || text(r) != "3" {
				t.Fatalf("a tool of the last good list: %v %v", r, err)
			}

			ts.srv.DeleteTools(names[5:]...)
			eventually.Check(t, 5*time.Second, "READY with the new list", func() string {
				s := serverState(t, h, "grow")
				if s.GetState() != toolmeshv1.ServerState_SERVER_STATE_READY || s.GetLastError() != "" || int(s.GetToolCount()) != len(before)+5 {
					return fmt.Sprintf("state %v (%s), %d tools", s.GetState(), s.GetLastError(), s.GetToolCount())
				}
				return ""
			})
		})
	}
}

// TestFaultListChangedFlood: a server sends tools/list_changed as fast as it
// can for 2 s. The debounce holds: at most one tools/list per debounce
// interval (plus the one in flight), calls keep working meanwhile, and the
// catalog ends up true.
func TestFaultListChangedFlood(t *testing.T) {
	guardProcess(t, 500<<20, 60*time.Second)
	fdcheck.Check(t, 2)
	ts := newTestMCP("flood", 0)
	counter := newFaultProxy() // no faults: it counts
	hh := newHTTPHarness(t, counter.wrap(streamableHandler(fixed(ts))))
	const debounce = 200 * time.Millisecond
	h := startExecutor(t, Config{ListChangedDebounce: debounce, Servers: map[string]mcpconfig.Server{
		"flood": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"},
	}})
	h.waitReady(t)
	listsBefore := counter.count(string(mcp.MethodToolsList))

	const flood = 2 * time.Second
	start := time.Now()
	sent := 0
	for time.Since(start) < flood {
		ts.srv.SendNotificationToAllClients(mcp.MethodNotificationToolsListChanged, nil)
		sent++
		if sent%1000 == 0 {
			if r, err := call(t, h, "flood.add", map[string]any{"a": 1, "b": 2}); err != nil || text(r) != "3" {
				t.Fatalf("a call during the flood: %v %v", r, err)
			}
		}
	}
	ts.srv.AddTool(mcp.NewTool("after_flood"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	})
	eventually.Check(t, 5*time.Second, "the catalog after the flood", func() string {
		if !slices.Contains(toolIDs(t, h, "flood"), "flood.after_flood") {
			return "flood.after_flood not listed"
		}
		return ""
	})
	lists := counter.count(string(mcp.MethodToolsList)) - listsBefore
	took := time.Since(start)
	t.Logf("%d notifications in %s: %d tools/list in %s", sent, flood, lists, took.Round(time.Millisecond))
	if most := int(took/debounce) + 2; lists > most {
		t.Errorf("%d tools/list, want at most %d (one per %s)", lists, most, debounce)
	}
	if s := serverState(t, h, "flood"); s.GetState() != toolmeshv1.ServerState_SERVER_STATE_READY {
		t.Errorf("state %v (%s), want READY", s.GetState(), s.GetLastError())
	}
}

// TestFaultNotificationStreamErrors: the server's subscriptions/listen fails
// (a JSON-RPC error, then an HTTP 500) while its tool list changes. The
// server is DEGRADED, saying why, its tools stay callable, and the executor
// keeps trying; once the stream works again the catalog follows the new list
// within seconds, and the server is READY. Without notifications at all, the
// periodic re-list alone brings the catalog up to date.
func TestFaultNotificationStreamErrors(t *testing.T) {
	cases := []struct {
		name   string
		answer fault
		want   string
	}{
		{"JSON-RPC error", jsonAnswer(`{"jsonrpc":"2.0","id":%ID%,"error":{"code":-32603,"message":"listen exploded"}}`), "listen exploded"},
		{"HTTP 500", rawAnswer(http.StatusInternalServerError, "text/plain", "upstream down"), "request failed with status 500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fdcheck.Check(t, 2)
			p := newFaultProxy()
			ts := newTestMCP("flaky", 0)
			hh := newHTTPHarness(t, p.wrap(streamableHandler(fixed(ts))))
			h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{
				"flaky": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"},
			}})
			h.waitReady(t)
			before := toolIDs(t, h, "flaky")

			// Break the stream: end the one open now (the server restarts
			// it) and fail every new one.
			p.set(string(mcp.MethodSubscriptionsListen), tc.answer)
			hh.kill()
			hh.restart()
			eventually.Check(t, 10*time.Second, "degraded", func() string {
				s := serverState(t, h, "flaky")
				if s.GetState() != toolmeshv1.ServerState_SERVER_STATE_DEGRADED || !strings.Contains(s.GetLastError(), tc.want) ||
					!strings.Contains(s.GetLastError(), "notification stream:") {
					return fmt.Sprintf("state %v (%s)", s.GetState(), s.GetLastError())
				}
				return ""
			})
			if r, err := call(t, h, "flaky.add", map[string]any{"a": 1, "b": 2}); err != nil || text(r) != "3" {
				t.Fatalf("a call while the stream is down: %v %v", r, err)
			}
			// The tool list changes while no notification can arrive.
			ts.srv.DeleteTools("whoami", "fail")
			ts.srv.AddTool(mcp.NewTool("newcomer"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("new"), nil
			})
			tries := p.count(string(mcp.MethodSubscriptionsListen))
			eventually.Check(t, 5*time.Second, "listening again and again", func() string {
				if n := p.count(string(mcp.MethodSubscriptionsListen)); n < tries+3 {
					return fmt.Sprintf("%d more attempts", n-tries)
				}
				return ""
			})
			if got := toolIDs(t, h, "flaky"); !slices.Equal(got, before) {
				t.Fatalf("catalog changed without a notification or a re-list: %v", got)
			}

			p.set(string(mcp.MethodSubscriptionsListen), nil)
			back := time.Now()
			want := []string{"flaky.add", "flaky.grow", "flaky.newcomer", "flaky.pid", "flaky.slow"}
			eventually.Check(t, 5*time.Second, "the catalog follows", func() string {
				if got := toolIDs(t, h, "flaky"); !slices.Equal(got, want) {
					return fmt.Sprintf("catalog %v", got)
				}
				s := serverState(t, h, "flaky")
				if s.GetState() != toolmeshv1.ServerState_SERVER_STATE_READY || s.GetLastError() != "" {
					return fmt.Sprintf("state %v (%s)", s.GetState(), s.GetLastError())
				}
				return ""
			})
			t.Logf("catalog true %s after the stream came back", time.Since(back).Round(time.Millisecond))
			if r, err := call(t, h, "flaky.newcomer", nil); err != nil || text(r) != "new" {
				t.Fatalf("the new tool: %v %v", r, err)
			}
		})
	}

	t.Run("periodic re-list", func(t *testing.T) {
		fdcheck.Check(t, 2)
		p := newFaultProxy()
		ts := newTestMCP("quiet", 0)
		hh := newHTTPHarness(t, p.wrap(streamableHandler(fixed(ts))))
		// The stream never works, and list_changed is never seen.
		p.set(string(mcp.MethodSubscriptionsListen), hang)
		h := startExecutor(t, Config{RelistInterval: 300 * time.Millisecond, Servers: map[string]mcpconfig.Server{
			"quiet": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"},
		}})
		h.waitReady(t)
		ts.srv.AddTool(mcp.NewTool("late"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("late"), nil
		})
		eventually.Check(t, 5*time.Second, "re-listed", func() string {
			if !slices.Contains(toolIDs(t, h, "quiet"), "quiet.late") {
				return "quiet.late not listed"
			}
			return ""
		})
	})
}

// TestFaultBoundedLabels: callers and servers cannot make up metric series. 38
// calls to tools the catalog does not have add none to
// mcp.client.operation.duration (the executor never calls them, and says
// UNKNOWN_TOOL, so the api labels them "unknown" too); a server answering
// with a new JSON-RPC error code on every call adds one series (_OTHER), not
// one per code.
func TestFaultBoundedLabels(t *testing.T) {
	fdcheck.Check(t, 2)
	p := newFaultProxy()
	ts := newTestMCP("calc", 0)
	ts.srv.AddTool(mcp.NewTool("odd"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("even"), nil
	})
	var code atomic.Int32
	code.Store(1000)
	p.set("tools/call:odd", func(w http.ResponseWriter, r *http.Request, msg rpcMessage) {
		jsonAnswer(fmt.Sprintf(`{"jsonrpc":"2.0","id":%%ID%%,"error":{"code":%d,"message":"odd"}}`, code.Add(1)))(w, r, msg)
	})
	hh := newHTTPHarness(t, p.wrap(streamableHandler(fixed(ts))))
	rec := newRecorded(t, "toolmesh-executor", telemetry.PayloadPolicy{})
	h := startTracedExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"calc": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"},
		"down": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://127.0.0.1:1/mcp"},
	}}, rec.tel)
	eventually.Check(t, 10*time.Second, "calc ready", func() string {
		if s := serverState(t, h, "calc"); s.GetState() != toolmeshv1.ServerState_SERVER_STATE_READY {
			return s.GetState().String()
		}
		return ""
	})
	series := func() []string {
		h, _ := rec.collect(t, "mcp.client.operation.duration").(metricdata.Histogram[float64])
		var out []string
		for _, dp := range h.DataPoints {
			out = append(out, dp.Attributes.Encoded(attribute.DefaultEncoder()))
		}
		slices.Sort(out)
		return out
	}
	if _, err := call(t, h, "calc.add", map[string]any{"a": 1, "b": 2}); err != nil {
		t.Fatal(err)
	}
	before := series()
	for i := range 38 {
		_, err := call(t, h, fmt.Sprintf("calc.nope_%02d", i), nil)
		st := wantCode(t, err, codes.NotFound, "unknown tool")
		if errreason.Of(st.Err()) != errreason.UnknownTool {
			t.Fatalf("NOT_FOUND without UNKNOWN_TOOL: %v", st.Details())
		}
	}
	if got := series(); !slices.Equal(got, before) {
		t.Errorf("38 unknown tools changed the series from %v to %v", before, got)
	}
	// A server that never listed its tools cannot say whether it has one.
	_, err := call(t, h, "down.anything", nil)
	if st := wantCode(t, err, codes.Unavailable, `server "down" is unavailable`); errreason.Of(st.Err()) != errreason.UnknownTool {
		t.Errorf("UNAVAILABLE for a tool not in the catalog without UNKNOWN_TOOL: %v", st.Details())
	}

	for range 10 {
		_, err := call(t, h, "calc.odd", nil)
		wantCode(t, err, codes.Unknown, "odd")
	}
	added := 0
	for _, s := range series() {
		if !slices.Contains(before, s) {
			added++
			if !strings.Contains(s, "error.type=_OTHER") || !strings.Contains(s, "gen_ai.tool.name=odd") {
				t.Errorf("new series %s, want error.type _OTHER", s)
			}
		}
	}
	if added != 1 {
		t.Errorf("10 error codes added %d series, want 1", added)
	}
}
