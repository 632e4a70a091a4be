package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// waiter is the test's MCP server of one slow tool, wait(ms), which answers after ms unless
// its call is cancelled first; it counts the calls that started and those it saw cancelled.
type waiter struct {
	started, cancelled atomic.Int32
}

func (w *waiter) tools() []mcpserver.ServerTool {
	return []mcpserver.ServerTool{{
		Tool: mcp.NewTool("wait", mcp.WithDescription("Wait ms milliseconds, then answer waited."), mcp.WithNumber("ms", mcp.Required())),
		Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			w.started.Add(1)
			select {
			case <-time.After(time.Duration(req.GetFloat("ms", 0)) * time.Millisecond):
				return mcp.NewToolResultText("waited"), nil
			case <-ctx.Done():
				w.cancelled.Add(1)
				return nil, ctx.Err()
			}
		},
	}}
}

// startWaiterMesh runs a mesh (startMeshToken; token reads /readyz) whose one MCP server, slow,
// serves a waiter's tool, slow.wait.
func startWaiterMesh(t *testing.T, token string) (*mesh, *waiter) {
	t.Helper()
	w := &waiter{}
	cfg := filepath.Join(t.TempDir(), "toolmesh.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "mcpServers:\n  slow:\n    url: %s\n", serveTools(t, "slow", w.tools())), 0o600); err != nil {
		t.Fatal(err)
	}
	return startMeshToken(t, token, "--config="+cfg), w
}

// TestAttackSSEFlood (issue 26): a client with a token posts 48 slow calls at once to a legacy
// SSE session (/sse/message answers each POST with 202 and writes the result on the stream
// later). They used to run 16 at a time, the executor's limit per server, while another
// token's call waited behind them for seconds, and to run on after the client closed its
// stream. Now each call holds its token's place in flight until its result is written (8 per
// token, the stream holding one), so at most 7 run and the rest are refused with 429; the other
// token's calls take what they take alone; and closing the stream cancels the calls, which the
// MCP server sees as its calls' contexts ending.
func TestAttackSSEFlood(t *testing.T) {
	const (
		flood = "flood-token-0123456789abcdef"
		other = "other-token-0123456789abcdef"
	)
	t.Setenv("TOOLMESH_API_TOKENS", "flood:"+flood+",other:"+other)
	m, w := startWaiterMesh(t, other)
	// The other token's calls: 200 ms each at the server; the slowest of five, one after another.
	slowest := func() time.Duration {
		var most time.Duration
		for range 5 {
			start := time.Now()
			if code, b := do(t, other, http.MethodPost, m.base+"/v1/tools/slow/wait:call", `{"arguments":{"ms":200}}`); code != http.StatusOK {
				t.Fatalf("the other token's call: %d %s", code, b)
			}
			most = max(most, time.Since(start))
		}
		return most
	}
	alone := slowest()

	c, err := client.NewSSEMCPClient(m.base+"/sse", client.WithHeaders(map[string]string{"Authorization": "Bearer " + flood}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		t.Fatal(err)
	}
	before := w.started.Load()
	var wg sync.WaitGroup
	var refused atomic.Int32
	for range 48 {
		wg.Go(func() {
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = "slow__wait", map[string]any{"ms": 4000}
			start := time.Now()
			if _, err := c.CallTool(ctx, req); err != nil && time.Since(start) < time.Second {
				refused.Add(1) // answered at once: the POST was refused (429)
			}
		})
	}
	defer wg.Wait() // the calls end with the stream, closed below
	eventually.True(t, 10*time.Second, "the flood's calls reached the server", func() bool { return w.started.Load() > before })
	time.Sleep(300 * time.Millisecond) // the rest of the accepted ones, and the refusals
	running := w.started.Load() - before
	if running > 7 || refused.Load() < 48-7 {
		t.Errorf("%d of the flood's 48 calls reached the server and %d were refused; want at most 7 and the rest refused (8 requests in flight per token, the stream one of them)",
			running, refused.Load())
	}

	// Behind 48 calls of 4 s, 16 at a time, the other token's calls waited 8 s or more.
	// Alone they take about 200 ms; allow for a machine shared with other tests.
	under := slowest()
	t.Logf("the other token's slowest of 5 calls: %s alone, %s beside the flood (%d calls running, %d refused)",
		alone.Round(time.Millisecond), under.Round(time.Millisecond), running, refused.Load())
	if under > alone+250*time.Millisecond {
		t.Errorf("the other token's slowest call took %s beside the flood, %s alone; want at most 250 ms more", under, alone)
	}

	// The flood's client goes away while its calls run (4 s each; about 1.5 s have passed).
	_ = c.Close()
	eventually.True(t, 5*time.Second, "every running call of the closed stream cancelled at the server", func() bool {
		return w.cancelled.Load() >= running && running > 0
	})
}
