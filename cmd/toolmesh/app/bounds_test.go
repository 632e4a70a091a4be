package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/llamatest"
)

// hugeAnswer is what the huge server's dump tool answers: 50 MiB of text.
const hugeAnswer = 50 << 20

// serveHuge serves an MCP server "big" over streamable HTTP whose tool dump answers with
// hugeAnswer bytes of text, written in chunks as the client reads them, so that what the test
// process holds of it is what the mesh holds; small answers a few bytes.
func serveHuge(t *testing.T) string {
	t.Helper()
	m := mcpserver.NewMCPServer("big", "0.1.0", mcpserver.WithToolCapabilities(false))
	small := func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	}
	m.AddTools(
		mcpserver.ServerTool{Tool: mcp.NewTool("dump", mcp.WithDescription("Dump the whole audit table as text."), mcp.WithReadOnlyHintAnnotation(true)), Handler: small},
		mcpserver.ServerTool{Tool: mcp.NewTool("small", mcp.WithDescription("Say ok."), mcp.WithReadOnlyHintAnnotation(true)), Handler: small},
	)
	inner := mcpserver.NewStreamableHTTPServer(m)
	dump := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" && msg.Params.Name == "dump" {
				w.Header().Set("Content-Type", "application/json")
				if _, err := fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, msg.ID); err != nil {
					return
				}
				chunk := []byte(strings.Repeat("row 0042: nothing to see here\\n", 1<<10))
				for left := hugeAnswer; left > 0; left -= len(chunk) {
					if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
						return // the mesh stopped reading
					}
				}
				_, _ = io.WriteString(w, `"}]}}`)
				return
			}
		}
		inner.ServeHTTP(w, r)
	})
	return serveHandler(t, dump)
}

// serveHandler serves h on loopback until the test ends and returns its /mcp URL.
func serveHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String() + "/mcp"
}

// memoryWatch samples the process's heap in use while a request runs: past budget bytes above
// where it started, the test fails at once and cancel stops the request, so a result read
// whole cannot take the machine with it.
type memoryWatch struct {
	t      *testing.T
	base   uint64
	peak   uint64
	done   chan struct{}
	wg     sync.WaitGroup
	rssAt0 int
}

func watchMemory(t *testing.T, budget uint64, cancel func()) *memoryWatch {
	t.Helper()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w := &memoryWatch{t: t, base: m.HeapInuse, done: make(chan struct{}), rssAt0: vmRSS(t)}
	w.wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > w.base {
				w.peak = max(w.peak, m.HeapInuse-w.base)
			}
			if w.peak > budget {
				t.Errorf("the heap grew by %d MiB, more than the %d MiB allowed: the request was stopped", w.peak>>20, budget>>20)
				cancel()
				return
			}
		}
	})
	return w
}

// stop ends the watch and returns the heap's largest growth and the resident set's growth.
func (w *memoryWatch) stop() (heap uint64, rss int) {
	close(w.done)
	w.wg.Wait()
	return w.peak, vmRSS(w.t) - w.rssAt0
}

// vmRSS is the process's resident set in bytes (/proc/self/status VmRSS).
func vmRSS(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/self/status")
	}
	kb, _ := strconv.Atoi(string(m[1]))
	return kb << 10
}

// TestAttackHugeResult: a tool answers 50 MiB (issue 27's check). The mesh stops reading at the
// server's maxResultBytes (256 KiB): its heap and resident set grow by a small part of the
// answer; a REST client, an MCP client and the agent loop each get the result cut, with the
// marker saying so (REST also the Toolmesh-Result-Cut header); and the model's next prompt holds
// no more of it than the step's budget (api.step-output-tokens) in the model's own tokens.
func TestAttackHugeResult(t *testing.T) {
	checkFDs(t)
	const limit, budget = 256 << 10, 512
	cfg := filepath.Join(t.TempDir(), "toolmesh.yaml")
	doc := fmt.Sprintf("mcpServers:\n  big:\n    url: %s\n    maxResultBytes: %d\n", serveHuge(t), limit)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "--config="+cfg, fmt.Sprintf("--api.step-output-tokens=%d", budget))
	var prompts sync.Map // calls → the prompt the model was given with that many calls made
	m.model.set("Dump the audit table.", func(p string, calls int, compose bool) string {
		switch {
		case compose:
			prompts.Store("compose", p)
			return "It is long."
		case calls == 0 && offers(p, "big.dump"):
			return "<<function>>big.dump()"
		}
		prompts.Store(calls, p)
		return "It is long."
	})
	// Each path is watched on its own; the bounds are far below what reading 50 MiB whole
	// takes (decoding it alone allocates several times that).
	const heapBudget, rssBudget = 48 << 20, 96 << 20
	measured := func(name string, f func(ctx context.Context)) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			w := watchMemory(t, heapBudget, cancel)
			start := time.Now()
			f(ctx)
			heap, rss := w.stop()
			t.Logf("took %s; heap grew by at most %d KiB, the resident set by %d KiB", time.Since(start).Round(time.Millisecond), heap>>10, rss>>10)
			if rss > rssBudget {
				t.Errorf("the resident set grew by %d MiB for a %d MiB answer cut at %d KiB", rss>>20, hugeAnswer>>20, limit>>10)
			}
		})
	}

	measured("REST", func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.base+"/v1/tools/big/dump:call", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Toolmesh-Result-Cut") != strconv.Itoa(limit) {
			t.Fatalf("%d, Toolmesh-Result-Cut %q, %.300s; want 200 and the limit", resp.StatusCode, resp.Header.Get("Toolmesh-Result-Cut"), b)
		}
		if !bytes.Contains(b, []byte(`[toolmesh: result cut: the tool answered more than 262144 bytes, over the 262144-byte limit (maxResultBytes of server \"big\")`)) ||
			len(b) > 2*limit {
			t.Errorf("a body of %d bytes ending %q; want the cut text and the marker", len(b), b[max(0, len(b)-300):])
		}
	})

	waitMCPTools(t, m.base+"/mcp", "", "big__dump")
	measured("MCP", func(ctx context.Context) {
		c := mcpClient(t, m.base+"/mcp", mcp.LATEST_PROTOCOL_VERSION, "")
		req := mcp.CallToolRequest{}
		req.Params.Name = "big__dump"
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		last, _ := res.Content[len(res.Content)-1].(mcp.TextContent)
		if res.IsError || !strings.HasPrefix(last.Text, "[toolmesh: result cut") {
			t.Errorf("isError %v, last block %.200q; want the cut result with the marker", res.IsError, last.Text)
		}
	})

	measured("query", func(ctx context.Context) {
		r := query(t, m.base, `{"query":"Dump the audit table.","k":2}`)
		if len(r.ToolCalls) != 1 || r.ToolCalls[0].IsError || !strings.Contains(r.ToolCalls[0].Output, "cut to this step's budget for tool output (api.step-output-tokens=512)") {
			t.Fatalf("calls %.500v; want big.dump's output cut to the step's budget, saying so", r.calls())
		}
		for _, key := range []any{1, "compose"} {
			v, ok := prompts.Load(key)
			if !ok {
				t.Fatalf("the model was not asked with the call's output (%v)", key)
			}
			p := v.(string)
			out := outputLiteral(p)
			if out == "" {
				t.Fatalf("the %v prompt holds no output", key)
			}
			// What the output costs the prompt: its tokens with it, less those with '' instead.
			i := strings.LastIndex(p, out)
			n := len(llamatest.Tokenize(p, true, true)) - len(llamatest.Tokenize(p[:i]+"''"+p[i+len(out):], true, true))
			t.Logf("the %v prompt gives the output %d tokens (%d bytes)", key, n, len(out))
			if n > budget {
				t.Errorf("the %v prompt gives the output %d tokens (%d bytes); want at most the step's budget of %d", key, n, len(out), budget)
			}
		}
	})
}

// TestAttackToolRateLimit: paid.lookup allows 3 calls a minute per token (issue 27's check). A
// burst of 6 from one token gets 3 answers, then 429 with Retry-After over REST (and for a
// direct query), an error result over MCP that says when to retry, and, when the model chose
// the call, a tool error the model reads while the question is still answered; the server's
// other tool and another token's calls of the same tool are not affected.
func TestAttackToolRateLimit(t *testing.T) {
	checkFDs(t)
	const tokA, tokB, probe = "a-token-0123456789abcdef", "b-token-0123456789abcdef", "probe-token-0123456789abcdef"
	t.Setenv("TOOLMESH_API_TOKENS", "a:"+tokA+",b:"+tokB+",probe:"+probe)
	ok := func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("found"), nil
	}
	url := serveTools(t, "paid", []mcpserver.ServerTool{
		{Tool: mcp.NewTool("lookup", mcp.WithDescription("Look up a company in the paid registry."), mcp.WithReadOnlyHintAnnotation(true)), Handler: ok},
		{Tool: mcp.NewTool("free", mcp.WithDescription("Say hello."), mcp.WithReadOnlyHintAnnotation(true)), Handler: ok},
	})
	cfg := filepath.Join(t.TempDir(), "toolmesh.yaml")
	doc := fmt.Sprintf("mcpServers:\n  paid:\n    url: %s\n    tools:\n      lookup: {rateLimit: {calls: 3, per: 1m}}\n", url)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	m := startMeshToken(t, probe, "--config="+cfg)
	m.model.set("Look up ACME in the registry.", func(p string, calls int, compose bool) string {
		switch {
		case compose:
			return "The registry is busy."
		case calls == 0 && offers(p, "paid.lookup"):
			return "<<function>>paid.lookup()"
		}
		return "The registry is busy."
	})

	var codes []int
	for i := range 6 {
		code, h, b := doHeader(t, tokA, "POST", m.base+"/v1/tools/paid/lookup:call", `{}`)
		codes = append(codes, code)
		if i < 3 {
			continue
		}
		ra, err := strconv.Atoi(h.Get("Retry-After"))
		if code != http.StatusTooManyRequests || err != nil || ra < 1 || ra > 60 ||
			!strings.Contains(string(b), `rate limit of paid.lookup reached for token a: 3 calls per 1m0s (mcpServers.paid.tools.lookup.rateLimit)`) {
			t.Errorf("call %d: %d, Retry-After %q, %.300s; want 429 saying when to retry", i+1, code, h.Get("Retry-After"), b)
		}
	}
	if fmt.Sprint(codes[:3]) != "[200 200 200]" {
		t.Errorf("the burst's first calls: %v; want 3 answers", codes)
	}
	for _, c := range []struct{ name, token, path string }{
		{"the server's other tool", tokA, "/v1/tools/paid/free:call"},
		{"another token", tokB, "/v1/tools/paid/lookup:call"},
	} {
		if code, _, b := doHeader(t, c.token, "POST", m.base+c.path, `{}`); code != http.StatusOK {
			t.Errorf("%s: %d %.200s; want 200", c.name, code, b)
		}
	}
	if code, h, b := doHeader(t, tokA, "POST", m.base+"/v1/query", `{"query":"@paid.lookup()"}`); code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Errorf("a direct query: %d, Retry-After %q, %.200s; want 429 with Retry-After", code, h.Get("Retry-After"), b)
	}

	waitMCPTools(t, m.base+"/mcp", tokA, "paid__lookup")
	c := mcpClient(t, m.base+"/mcp", mcp.LATEST_PROTOCOL_VERSION, tokA)
	req := mcp.CallToolRequest{}
	req.Params.Name = "paid__lookup"
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatalf("MCP: %v; want an error result the client's model reads", err)
	}
	text, _ := res.Content[0].(mcp.TextContent)
	if !res.IsError || !strings.Contains(text.Text, "rate limit of paid.lookup reached for token a") || !strings.Contains(text.Text, "retry after") {
		t.Errorf("MCP: isError %v, %q; want an error result saying when to retry", res.IsError, text.Text)
	}

	code, b := do(t, tokA, "POST", m.base+"/v1/query", `{"query":"Look up ACME in the registry.","k":2}`)
	if code != http.StatusOK {
		t.Fatalf("a question whose model calls the tool over its limit: %d %.300s; want it answered", code, b)
	}
	r := decodeQuery(t, b)
	if len(r.ToolCalls) != 1 || !r.ToolCalls[0].IsError || !strings.Contains(r.ToolCalls[0].Output, "rate limit of paid.lookup reached for token a") ||
		r.Answer != "The registry is busy." {
		t.Errorf("calls %v, answer %q; want paid.lookup refused by its rate limit as a tool error, and the answer", r.calls(), r.Answer)
	}
}
