package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/fdcheck"
	"github.com/toolmesh/toolmesh/internal/llamatest"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// addScript is the double's script for "What is 2 plus 3?": add, then text, then the
// composed answer from the calculator's output.
func addScript(p string, calls int, compose bool) string {
	switch {
	case compose:
		return "2 plus 3 is " + outputOf(p) + "."
	case calls == 0:
		return "<<function>>calculator.add(a=2, b=3)"
	}
	return "The sum is " + outputOf(p)
}

// errorBody is the JSON body of an error answer.
type errorBody struct {
	Code    any    `json:"code"`
	Message string `json:"message"`
}

func decodeError(t *testing.T, b []byte) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, b)
	}
	return e
}

// checkFDs fails the test when it ends holding more file descriptors than it began with; the
// tests' HTTP client keeps idle connections, which are closed first.
func checkFDs(t *testing.T) {
	t.Helper()
	fdcheck.Check(t, 2)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
}

// within fails the test when f does not return within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	if took := time.Since(start); took > d {
		t.Errorf("%s took %s, want under %s", what, took, d)
	}
}

func TestFaultLlamaLoading(t *testing.T) {
	checkFDs(t)
	m := startMesh(t)
	m.model.set("What is 2 plus 3?", addScript)
	m.double.Loading(1000, false)
	var code int
	var b []byte
	within(t, 10*time.Second, "a query while llama-server loads", func() {
		code, b = post(t, m.base+"/v1/query", `{"query":"What is 2 plus 3?"}`)
	})
	e := decodeError(t, b)
	if code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "llama-server") || !strings.Contains(strings.ToLower(e.Message), "loading") {
		t.Errorf("while loading: %d %s; want 503 naming llama-server and saying it is loading", code, b)
	}
	m.double.Loading(0, false)
	got := query(t, m.base, `{"query":"What is 2 plus 3?"}`)
	if got.Answer != "2 plus 3 is 5." || got.StopReason != "STOP_REASON_ANSWERED" {
		t.Errorf("once loaded: answer %q, stop_reason %s; want 2 plus 3 is 5., answered", got.Answer, got.StopReason)
	}
}

func TestFaultLlamaGarbage(t *testing.T) {
	checkFDs(t)
	m := startMesh(t)
	m.model.set("What is 2 plus 3?", addScript)
	m.double.Garbage(1000)
	var code int
	var b []byte
	within(t, 10*time.Second, "a query while llama-server answers garbage", func() {
		code, b = post(t, m.base+"/v1/query", `{"query":"What is 2 plus 3?"}`)
	})
	// An answer that cannot be read is a bad gateway: gRPC UNAVAILABLE, 503 over REST.
	e := decodeError(t, b)
	if code != 503 || !strings.Contains(e.Message, "llama-server") || !strings.Contains(e.Message, "not JSON") ||
		strings.Contains(e.Message, "start one") {
		t.Errorf("garbage: %d %s; want 503 naming llama-server and its unreadable answer", code, b)
	}
	m.double.Garbage(0)
	got := query(t, m.base, `{"query":"What is 2 plus 3?"}`)
	if got.Answer != "2 plus 3 is 5." || got.StopReason != "STOP_REASON_ANSWERED" {
		t.Errorf("after garbage: answer %q, stop_reason %s; want 2 plus 3 is 5., answered", got.Answer, got.StopReason)
	}
}

func TestFaultLlamaHang(t *testing.T) {
	checkFDs(t)
	m := startMesh(t)
	m.model.set("What is 2 plus 3?", addScript)
	m.model.set("Wait forever.", func(string, int, bool) string { return "HANG" })
	var code int
	var b []byte
	within(t, 4*time.Second, "a query with timeout_seconds 1 on a hung llama-server", func() {
		code, b = post(t, m.base+"/v1/query", `{"query":"Wait forever.","timeout_seconds":1}`)
	})
	var r queryResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if code != http.StatusOK || r.StopReason != "STOP_REASON_DEADLINE" || !strings.Contains(r.Error, "deadline") ||
		!strings.Contains(r.Error, "model") {
		t.Errorf("hang: %d stop_reason %s error %q; want 200, deadline, an error saying the deadline passed asking the model",
			code, r.StopReason, r.Error)
	}
	eventually.Check(t, 5*time.Second, "the double sees the request canceled", func() string {
		if n := m.double.Canceled(); n < 1 {
			return fmt.Sprintf("canceled = %d", n)
		}
		return ""
	})
	got := query(t, m.base, `{"query":"What is 2 plus 3?"}`)
	if got.Answer != "2 plus 3 is 5." {
		t.Errorf("after the hang: answer %q", got.Answer)
	}
}

// runApp runs targets with args once they have started, and hands back the app and a stop
// function so a test can stop it midway; stop is idempotent and also runs when the test ends.
func runApp(t *testing.T, args []string, targets ...string) (a *App, stop func()) {
	t.Helper()
	a, stop, err := launch(t, args, nil, nil, targets...)
	if err != nil {
		t.Fatalf("Run returned before starting: %v", err)
	}
	return a, stop
}

// freeAddr is a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestFaultExecutorRestartedUnderAPI runs the api and the executor as two apps, as
// microservices mode does: with the executor stopped a direct call answers 503 naming the
// executor, and a new executor on the same address serves the same api again.
func TestFaultExecutorRestartedUnderAPI(t *testing.T) {
	checkFDs(t)
	addr := freeAddr(t)
	execArgs := []string{"--executor.grpc-addr=" + addr, "--demo.calculator-addr=127.0.0.1:0",
		"--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0", "--drain-timeout=2s"}
	_, stopExec := runApp(t, execArgs, "demo", "executor")
	base := startApp(t, "", []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0",
		"--api.executor-addr=" + addr, "--api.retriever-addr=", "--api.inference-addr=", "--drain-timeout=2s"}, "api")
	const direct = `{"query":"@calculator.add({\"a\":2,\"b\":3})"}`
	if got := query(t, base, direct); got.Answer != "5" {
		t.Fatalf("before the restart: answer %q, want 5", got.Answer)
	}

	stopExec()
	var code int
	var b []byte
	within(t, 10*time.Second, "a tool call with the executor down", func() {
		code, b = post(t, base+"/v1/tools/calculator/add:call", `{"arguments":{"a":2,"b":3}}`)
	})
	if e := decodeError(t, b); code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "executor at "+addr+" is unreachable") {
		t.Errorf("tool call, executor down: %d %s; want 503 naming the executor", code, b)
	}
	within(t, 10*time.Second, "a direct query with the executor down", func() { code, b = post(t, base+"/v1/query", direct) })
	// The user sees the error in the call's record either way.
	if !strings.Contains(string(b), "executor at "+addr+" is unreachable") {
		t.Errorf("direct query, executor down: %d %s; want the executor named", code, b)
	}
	t.Run("direct query answers 503", func(t *testing.T) {
		if code != http.StatusServiceUnavailable {
			t.Errorf("direct query, executor down: %d %s; want 503 naming the executor", code, b)
		}
	})

	runApp(t, execArgs, "demo", "executor")
	eventually.Check(t, 10*time.Second, "direct calls work again through the same api", func() string {
		code, b := post(t, base+"/v1/query", direct)
		if code != http.StatusOK || !strings.Contains(string(b), `"answer":"5"`) {
			return fmt.Sprintf("%d %s", code, b)
		}
		return ""
	})
}

// slowTools is an MCP server over streamable HTTP with one tool, slow_echo, that while slow
// is set waits (until its call is canceled or release closes) before echoing its message.
type slowTools struct {
	slow    atomic.Bool
	started chan struct{} // gets a value when a slow call starts
	release chan struct{} // closed when the test ends: no call outlives it
}

func (s *slowTools) serve(t *testing.T, l net.Listener) *httptest.Server {
	t.Helper()
	m := server.NewMCPServer("dyn", "0.1.0", server.WithToolCapabilities(true))
	// Read-only, so that the model is offered it (mcp-go marks a tool destructive by default).
	m.AddTool(mcp.NewTool("slow_echo", mcp.WithDescription("Echo a message back, slowly."), mcp.WithString("message", mcp.Required()),
		mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if s.slow.Load() {
				select {
				case s.started <- struct{}{}:
				default:
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-s.release:
					return nil, errors.New("test over")
				}
			}
			return mcp.NewToolResultText(r.GetString("message", "")), nil
		})
	hs := httptest.NewUnstartedServer(server.NewStreamableHTTPServer(m))
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	return hs
}

// TestFaultMCPServerKilledMidCall kills an MCP server during a slow call: the call's record
// is an error saying so and the loop goes on to an answer; restarted on the same address, the
// server's tools work again within seconds, without restarting toolmesh.
func TestFaultMCPServerKilledMidCall(t *testing.T) {
	checkFDs(t)
	tools := &slowTools{started: make(chan struct{}, 1), release: make(chan struct{})}
	tools.slow.Store(true)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	srv := tools.serve(t, l)
	// Registered first, so it runs after the mesh (which holds a stream open) has stopped.
	t.Cleanup(func() {
		close(tools.release)
		srv.CloseClientConnections()
		srv.Close()
	})
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	doc := fmt.Sprintf(`{"mcpServers": {"dyn": {"url": "http://%s/mcp"}}}`, addr)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}

	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	model := &scriptedModel{scripts: map[string]script{}}
	d.ScriptFunc(model.reply)
	const question = "Echo the message hello back slowly."
	model.set(question, func(p string, calls int, compose bool) string {
		switch {
		case compose:
			return "The echo said: " + outputOf(p)
		case calls == 0:
			return `<<function>>dyn.slow_echo(message="hello")`
		}
		return "done"
	})
	base := startApp(t, "", []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=" + d.URL, "--mcp-config=" + cfg,
	}, "executor", "retriever", "inference", "api")

	type answer struct {
		code int
		body []byte
	}
	done := make(chan answer, 1)
	go func() {
		code, b := post(t, base+"/v1/query", `{"query":"`+question+`","timeout_seconds":20}`)
		done <- answer{code, b}
	}()
	select {
	case <-tools.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow call did not start within 10s")
	}
	srv.CloseClientConnections()
	srv.Close()
	var got answer
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the query did not end within 10s of the server going away")
	}
	var r queryResponse
	if err := json.Unmarshal(got.body, &r); err != nil || got.code != http.StatusOK {
		t.Fatalf("killed mid-call: %d %s", got.code, got.body)
	}
	if len(r.ToolCalls) == 0 || !r.ToolCalls[0].IsError || r.ToolCalls[0].Tool != "dyn.slow_echo" ||
		!strings.Contains(r.ToolCalls[0].Output, `server "dyn" is unavailable`) {
		t.Errorf("killed mid-call: tool_calls %v; want dyn.slow_echo recorded as an error saying server dyn is unavailable", r.calls())
	}
	if r.StopReason != "STOP_REASON_ANSWERED" || r.Iterations < 2 {
		t.Errorf("killed mid-call: stop_reason %s after %d iterations; want the loop to go on to an answer", r.StopReason, r.Iterations)
	}

	tools.slow.Store(false)
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	srv = tools.serve(t, l)
	eventually.Check(t, 10*time.Second, "the restarted server's tool works again", func() string {
		code, b := post(t, base+"/v1/query", `{"query":"`+question+`","timeout_seconds":5}`)
		var r queryResponse
		if err := json.Unmarshal(b, &r); err != nil || code != http.StatusOK {
			return fmt.Sprintf("%d %s", code, b)
		}
		if len(r.ToolCalls) != 1 || r.ToolCalls[0].IsError || r.ToolCalls[0].Output != "hello" {
			return fmt.Sprintf("tool_calls %v", r.calls())
		}
		return ""
	})
}

// TestFaultLlamaDownAndBack: llama-server is down when the mesh starts, comes up, goes down
// again and comes back, all on one address: each query answers 503 naming the URL while it is
// down and answers normally once it is back, with no restart of the mesh.
func TestFaultLlamaDownAndBack(t *testing.T) {
	checkFDs(t)
	addr := freeAddr(t)
	m := startMesh(t, "--llm-url=http://"+addr)
	m.model.set("What is 2 plus 3?", addScript)

	down := func(when string) {
		t.Helper()
		var code int
		var b []byte
		within(t, 10*time.Second, "a query while llama-server is down "+when, func() {
			code, b = post(t, m.base+"/v1/query", `{"query":"What is 2 plus 3?"}`)
		})
		if e := decodeError(t, b); code != http.StatusServiceUnavailable || !strings.Contains(e.Message, addr) {
			t.Errorf("down %s: %d %s; want 503 naming %s", when, code, b, addr)
		}
	}
	up := func(when string) {
		t.Helper()
		eventually.Check(t, 10*time.Second, "an answer once llama-server is back "+when, func() string {
			code, b := post(t, m.base+"/v1/query", `{"query":"What is 2 plus 3?"}`)
			if code != http.StatusOK || !strings.Contains(string(b), "2 plus 3 is 5.") {
				return fmt.Sprintf("%d %s", code, b)
			}
			return ""
		})
	}

	down("at start")
	fwd := forward(t, addr, m.double.URL)
	up("the first time")
	fwd.close()
	down("after it stopped")
	fwd = forward(t, addr, m.double.URL)
	up("again")
	fwd.close()
}

// forwarder stands in for a llama-server process on addr: it relays connections to the double,
// and close drops the listener and every connection, as a killed process would.
type forwarder struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func forward(t *testing.T, addr, target string) *forwarder {
	t.Helper()
	var ln net.Listener
	var err error
	// The address was freed a moment ago; give the kernel a moment if it is slow to let go.
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	t.Cleanup(f.close)
	to := strings.TrimPrefix(target, "http://")
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, u)
			f.mu.Unlock()
			// Plain copies: io.Copy between TCP conns would splice through a pipe pair that
			// net keeps pooled, which checkFDs would count as a leak.
			f.wg.Go(func() { _, _ = io.Copy(struct{ io.Writer }{u}, struct{ io.Reader }{c}); u.Close() })
			f.wg.Go(func() { _, _ = io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{u}); c.Close() })
		}
	})
	return f
}

func (f *forwarder) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

// TestFaultOversizedToolResult: a result over --executor.max-result-bytes is cut to it and ends
// with the executor's marker (before issue 27 it failed with 502): over REST with 200, the
// Toolmesh-Result-Cut header and the marker naming the limit; a direct query's output keeps the
// marker; smaller results pass whole. TestAttackHugeResult takes 50 MiB through every front.
func TestFaultOversizedToolResult(t *testing.T) {
	checkFDs(t)
	m := startMesh(t, "--executor.max-result-bytes=2000")
	big := `{"arguments":{"sql":"SELECT hex(zeroblob(4000)) AS x"}}`
	code, h, b := doHeader(t, "", http.MethodPost, m.base+"/v1/tools/sqlite/query_database:call", big)
	if code != http.StatusOK || h.Get("Toolmesh-Result-Cut") != "2000" || !strings.Contains(string(b), "over the 2000-byte limit (executor.max-result-bytes)") {
		t.Errorf("oversized result: %d, Toolmesh-Result-Cut %q, %.300s; want 200, the limit and the marker naming it", code, h.Get("Toolmesh-Result-Cut"), b)
	}
	code, b = post(t, m.base+"/v1/query", `{"query":"@sqlite.query_database({\"sql\":\"SELECT hex(zeroblob(4000)) AS x\"})"}`)
	if r := decodeQuery(t, b); code != http.StatusOK || len(r.ToolCalls) != 1 || !strings.Contains(r.ToolCalls[0].Output, "[toolmesh: result cut") {
		t.Errorf("oversized result in a direct query: %d %.300s; want 200 and the marker in the call's output", code, b)
	}
	code, h, b = doHeader(t, "", http.MethodPost, m.base+"/v1/tools/sqlite/query_database:call", `{"arguments":{"sql":"SELECT hex(zeroblob(100)) AS x"}}`)
	if code != http.StatusOK || h.Get("Toolmesh-Result-Cut") != "" || strings.Contains(string(b), "result cut") {
		t.Errorf("small result after an oversized one: %d %s", code, b)
	}
}
