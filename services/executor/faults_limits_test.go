package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc/codes"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/fdcheck"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// Fault tests of issue 17: a server that publishes what would take the mesh
// down. Each runs under guardProcess, because without the limits under test
// the executor grows by ~150 MB/s until the machine has no memory left: the
// guard ends the test binary first.

// processGuard watches the test process from outside the code under test.
type processGuard struct {
	base, peak atomic.Int64 // resident set, bytes
	stop       chan struct{}
	done       chan struct{}
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
}

// growth is how far the resident set grew over the mark, at its peak.
func (g *processGuard) growth() int64 {
	time.Sleep(20 * time.Millisecond) // one more sample
	return g.peak.Load() - g.base.Load()
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
