package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/bench/internal/addscript"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logWriter sends the bench's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runShort runs the bench for d and checks that every query was answered right and took the
// scripted path: 3 requests to the model per query. edit changes the options first.
func runShort(t *testing.T, mode string, d time.Duration, edit ...func(o *options)) {
	t.Helper()
	o := options{duration: d, warmup: 100 * time.Millisecond, clients: []int{1},
		modes: []string{mode}, vias: []string{"rest"}, timeout: 10 * time.Second}
	for _, e := range edit {
		e(&o)
	}
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	results, err := run(t.Context(), o, logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(o.vias) {
		t.Fatalf("got %d results, want %d", len(results), len(o.vias))
	}
	for _, r := range results {
		checkResult(t, r)
	}
}

func checkResult(t *testing.T, r result) {
	t.Helper()
	if r.errors != 0 || r.queries == 0 {
		t.Errorf("%d queries, %d errors (first: %s); want some queries and no errors", r.queries, r.errors, r.firstErr)
	}
	if r.llamaPerQuery != 3 {
		t.Errorf("%.2f model requests per query, want 3 (2 steps and the compose)", r.llamaPerQuery)
	}
	if r.modelPerQuery <= 0 || r.iterP50 <= 0 || r.cpuPerQuery <= 0 {
		t.Errorf("model time %s, overhead/iter p50 %s, CPU/query %s; want all positive", r.modelPerQuery, r.iterP50, r.cpuPerQuery)
	}
}

func TestInproc(t *testing.T) { runShort(t, "inproc", time.Second) }

// TestInprocChat: chat completions are answered right through the same loop as /v1/query.
func TestInprocChat(t *testing.T) {
	runShort(t, "inproc", 500*time.Millisecond, func(o *options) { o.vias = []string{"rest", "chat"} })
}

func TestMicro(t *testing.T) {
	if testing.Short() {
		t.Skip("micro mode builds toolmesh and starts seven processes")
	}
	// Shorter: building toolmesh and starting the processes take most of this test's time.
	runShort(t, "micro", 500*time.Millisecond)
}

// TestMicroTLS: with -tls the mesh's processes talk mutual TLS and the gRPC clients TLS, and
// every query is still answered right.
func TestMicroTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("micro mode builds toolmesh and starts seven processes")
	}
	runShort(t, "micro", 500*time.Millisecond, func(o *options) { o.tls, o.vias = true, []string{"rest", "grpc"} })
}

func TestCheck(t *testing.T) {
	good := answer{text: addscript.Answer, stopReason: "STOP_REASON_ANSWERED", iterations: 2,
		calls: []call{{tool: "calculator.add", output: "5"}}}
	if err := good.check(); err != nil {
		t.Fatalf("check(right answer) = %v", err)
	}
	bad := map[string]func(a *answer){
		"error":      func(a *answer) { a.err = "step 2: boom" },
		"stop":       func(a *answer) { a.stopReason = "STOP_REASON_MAX_ITERATIONS" },
		"iterations": func(a *answer) { a.iterations = 3 },
		"no call":    func(a *answer) { a.calls = nil },
		"output":     func(a *answer) { a.calls = []call{{tool: "calculator.add", output: "6"}} },
		"is_error":   func(a *answer) { a.calls = []call{{tool: "calculator.add", output: "5", isError: true}} },
		"answer":     func(a *answer) { a.text = "2 plus 3 is ." },
	}
	for name, spoil := range bad {
		a := good
		spoil(&a)
		if a.check() == nil {
			t.Errorf("%s: check accepted %+v", name, a)
		}
	}
}

// TestChatAnswer: a chat completion passes only as the scripted run in OpenAI's shape; the
// fixture is a real answer of the mesh to the standard question.
func TestChatAnswer(t *testing.T) {
	good, err := os.ReadFile("testdata/chat-completion.json")
	if err != nil {
		t.Fatal(err)
	}
	a, err := chatAnswer(good)
	if err != nil {
		t.Fatalf("chatAnswer(right answer) = %v", err)
	}
	if err := a.check(); err != nil {
		t.Fatalf("check(right answer) = %v (%+v)", err, a)
	}
	choice := func(c map[string]any) map[string]any { return c["choices"].([]any)[0].(map[string]any) }
	message := func(c map[string]any) map[string]any { return choice(c)["message"].(map[string]any) }
	ext := func(c map[string]any) map[string]any { return c["toolmesh"].(map[string]any) }
	firstCall := func(c map[string]any) map[string]any { return ext(c)["tool_calls"].([]any)[0].(map[string]any) }
	bad := map[string]func(c map[string]any){
		"chunk":             func(c map[string]any) { c["object"] = "chat.completion.chunk" },
		"two choices":       func(c map[string]any) { c["choices"] = append(c["choices"].([]any), choice(c)) },
		"finish length":     func(c map[string]any) { choice(c)["finish_reason"] = "length" },
		"finish tool_calls": func(c map[string]any) { choice(c)["finish_reason"] = "tool_calls" },
		"null content":      func(c map[string]any) { message(c)["content"] = nil },
		"wrong answer":      func(c map[string]any) { message(c)["content"] = "2 plus 3 is ." },
		"call handed back": func(c map[string]any) {
			message(c)["tool_calls"] = []any{map[string]any{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "calculator__add", "arguments": "{}"}}}
		},
		"no extension":   func(c map[string]any) { delete(c, "toolmesh") },
		"max iterations": func(c map[string]any) { ext(c)["stop_reason"] = "max_iterations" },
		"error":          func(c map[string]any) { ext(c)["error"] = "step 2: boom" },
		"3 iterations":   func(c map[string]any) { ext(c)["iterations"] = 3 },
		"no call":        func(c map[string]any) { delete(ext(c), "tool_calls") },
		"output 6":       func(c map[string]any) { firstCall(c)["output"] = "6" },
		"is_error":       func(c map[string]any) { firstCall(c)["is_error"] = true },
		"other tool":     func(c map[string]any) { firstCall(c)["tool"] = "calculator.multiply" },
	}
	for name, spoil := range bad {
		t.Run(name, func(t *testing.T) {
			var c map[string]any
			if err := json.Unmarshal(good, &c); err != nil {
				t.Fatal(err)
			}
			spoil(c)
			b, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			a, err := chatAnswer(b)
			if err == nil {
				err = a.check()
			}
			if err == nil {
				t.Errorf("accepted %s", b)
			}
		})
	}
	if _, err := chatAnswer([]byte(`{"error":{"message":"x"`)); err == nil {
		t.Error("accepted a body that is not JSON")
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	if p50, p99 := percentile(ds, 0.5), percentile(ds, 0.99); p50 != 50 || p99 != 99 {
		t.Errorf("p50, p99 of 1..100 = %d, %d; want 50, 99", p50, p99)
	}
	if got := percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("p99 of one = %d, want 7", got)
	}
}
