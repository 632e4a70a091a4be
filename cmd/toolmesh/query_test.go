package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llamatest"
)

// addTwoAndThree scripts the llama-server double for "What is 2 plus 3?": call
// calculator.add, then answer, then compose the final answer from the call's output.
func addTwoAndThree(t *testing.T) *llamatest.Double {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	d.ScriptFunc(func(r llamatest.Request) (llamatest.Reply, bool) {
		if !strings.Contains(r.Prompt, "What is 2 plus 3?") {
			return llamatest.Reply{}, false
		}
		switch {
		case r.Grammar == "": // compose
			return llamatest.Reply{Pieces: []string{"2 plus 3 ", "is 5."}}, true
		case !strings.Contains(r.Prompt, "<<call>>"):
			return llamatest.Reply{Pieces: []string{"<<function>>calculator.add(a=2, b=3)"}}, true
		}
		return llamatest.Reply{Pieces: []string{"The sum is 5."}}, true
	})
	return d
}

func checkAddQuery(t *testing.T, base string) {
	t.Helper()
	b := postJSON(t, base+"/v1/query", `{"query":"What is 2 plus 3?"}`, http.StatusOK)
	answer, _ := b["answer"].(string)
	calls, _ := b["tool_calls"].([]any)
	var first map[string]any
	if len(calls) > 0 {
		first, _ = calls[0].(map[string]any)
	}
	if !strings.Contains(answer, "5") || first["tool"] != "calculator.add" || b["iterations"] != float64(2) || b["stop_reason"] != "STOP_REASON_ANSWERED" {
		t.Errorf("POST /v1/query = %v; want an answer with 5, tool_calls[0].tool calculator.add, 2 iterations, answered", b)
	}
}

// TestUpQuery is the black-box check: `toolmesh up --llm-url URL` with a llama-server
// double, then a question that needs calculator.add; and the CLI prints the answer.
func TestUpQuery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	d := addTwoAndThree(t)
	bin := buildBinary(t)
	_, base := startUp(t, bin, "--llm-url", d.URL)
	checkAddQuery(t, base)

	cmd := exec.Command(bin, "query", "--api", base, "What is 2 plus 3?")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("toolmesh query: %v\n%s", err, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != "2 plus 3 is 5." {
		t.Errorf("toolmesh query stdout = %q, want the answer alone", got)
	}
	if !strings.Contains(stderr.String(), "calling calculator.add") {
		t.Errorf("toolmesh query stderr = %q, want the call among the progress lines", stderr.String())
	}
}

// TestMicroservicesQuery runs each target as its own process (`serve --target=...`) and the
// MCP servers as `toolmesh mcp`, asks the same question, then stops the inference process:
// questions get a 503 at once while direct calls keep working.
func TestMicroservicesQuery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	d := addTwoAndThree(t)
	bin := buildBinary(t)
	calc, conv := freeAddr(t), freeAddr(t)
	exe, ret, inf, api, rest := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	doc := fmt.Sprintf(`{"mcpServers": {"calculator": {"url": "http://%s/sse", "transport": "sse"}, "converter": {"url": "http://%s/sse", "transport": "sse"}}}`, calc, conv)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, bin, "mcp", "calculator", "--addr", calc)
	start(t, bin, "mcp", "converter", "--addr", conv)
	start(t, bin, "serve", "--target=executor", "--executor.grpc-addr="+exe, "--mcp-config="+cfg)
	start(t, bin, "serve", "--target=retriever", "--retriever.grpc-addr="+ret, "--retriever.executor-addr="+exe)
	inference := start(t, bin, "serve", "--target=inference", "--inference.grpc-addr="+inf, "--inference.llm.url="+d.URL)
	start(t, bin, "serve", "--target=api", "--api.http-addr="+rest, "--api.grpc-addr="+api,
		"--api.executor-addr="+exe, "--api.retriever-addr="+ret, "--api.inference-addr="+inf,
		// Questions go to the model at once: ready means the inference process answers too.
		"--api.ready-needs-inference")
	base := "http://" + rest
	waitReady(t, base)
	checkAddQuery(t, base)

	if err := inference.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = inference.Wait()
	started := time.Now()
	b := postJSON(t, base+"/v1/query", `{"query":"What is 2 plus 3?"}`, http.StatusServiceUnavailable)
	if msg, _ := b["message"].(string); !strings.Contains(msg, "inference at "+inf+" is unreachable") {
		t.Errorf("query with the inference process gone: %v; want a 503 naming %s", b, inf)
	}
	if took := time.Since(started); took > 10*time.Second {
		t.Errorf("the 503 took %s", took)
	}
	b = postJSON(t, base+"/v1/query", `{"query":"@calculator.add({\"a\":2,\"b\":3})"}`, http.StatusOK)
	if b["answer"] != "5" {
		t.Errorf("direct call with the inference process gone: %v", b)
	}
}

// start runs the binary until the test ends, and shows its output if the test failed.
func start(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() {
			t.Logf("toolmesh %s:\n%s", strings.Join(args, " "), out.String())
		}
	})
	return cmd
}

// freeAddr is a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
