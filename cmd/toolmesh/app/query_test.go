package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llamatest"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/searchbounds"
)

// script answers the llama-server double for one question: calls is how many calls the
// prompt shows as already made, prompt the whole prompt; compose is set for the final,
// grammar-free answer. It returns the model's text.
type script func(prompt string, calls int, compose bool) string

// scriptedModel routes the double's requests to the script of the question in the prompt, so
// one mesh serves every test question.
type scriptedModel struct {
	mu      sync.Mutex
	scripts map[string]script
}

// questionInPrompt finds the question's line, not a <<question>> quoted inside an earlier
// turn's message (those lines start with <<user>>, <<assistant>>...).
var questionInPrompt = regexp.MustCompile(`(?m)(?:^|### Instruction: )<<question>> ?([^\n]*)`)

func (m *scriptedModel) set(question string, s script) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scripts[question] = s
}

func (m *scriptedModel) reply(req llamatest.Request) (llamatest.Reply, bool) {
	q := questionInPrompt.FindStringSubmatch(req.Prompt)
	if q == nil {
		return llamatest.Reply{}, false
	}
	m.mu.Lock()
	s := m.scripts[q[1]]
	m.mu.Unlock()
	if s == nil {
		return llamatest.Reply{}, false
	}
	// The calls of this turn come after the question; earlier turns' calls come before it.
	text := s(req.Prompt, strings.Count(afterQuestion(req.Prompt), "<<call>>"), req.Grammar == "")
	if text == "HANG" {
		return llamatest.Reply{Hang: true}, true
	}
	if rest, ok := strings.CutPrefix(text, "BREAK:"); ok {
		// The stream ends with a server error after its first piece.
		return llamatest.Reply{Pieces: splitPieces(rest), FailAfter: 1,
			Fail: &llamatest.APIError{Code: 500, Message: "slot crashed", Type: "server_error"}}, true
	}
	return llamatest.Reply{Pieces: splitPieces(text)}, true
}

// splitPieces streams text in a few events, as a server does.
func splitPieces(s string) []string {
	var out []string
	for len(s) > 8 {
		out = append(out, s[:8])
		s = s[8:]
	}
	return append(out, s)
}

// mesh is every target in one process against a llama-server double.
type mesh struct {
	base   string
	model  *scriptedModel
	double *llamatest.Double
}

func startMesh(t *testing.T, extra ...string) *mesh {
	t.Helper()
	return startMeshToken(t, "", extra...)
}

// startMeshToken is startMesh for a mesh that needs token on its /readyz.
func startMeshToken(t *testing.T, token string, extra ...string) *mesh {
	t.Helper()
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	m := &scriptedModel{scripts: map[string]script{}}
	d.ScriptFunc(m.reply)
	// The executor, retriever and inference as `up` runs them: called in the process (no
	// listener); a test that needs them on gRPC gives their addresses in extra.
	args := append([]string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=" + d.URL,
	}, extra...)
	base := startApp(t, token, args, "demo", "executor", "retriever", "inference", "api")
	return &mesh{base: base, model: m, double: d}
}

// startApp runs targets with args until the test ends and returns the REST base URL once
// /readyz says ready.
func startApp(t *testing.T, token string, args []string, targets ...string) string {
	t.Helper()
	a, _ := runApp(t, args, targets...)
	var base string
	for _, e := range a.Endpoints {
		if e.Name == "REST" {
			base = e.Addr
		}
	}
	if base == "" {
		return ""
	}
	// Generous: a mesh that is ready answers at once, but one of BFCL's 1,951 tools was ready
	// in 1 s alone, 7 s under -race and over 30 s under -race beside two other test binaries
	// on 2 cores (its executor's schema checks and the index's encoding are CPU-bound).
	const readyWithin = 90 * time.Second
	deadline := time.Now().Add(readyWithin)
	for {
		req, _ := http.NewRequest(http.MethodGet, base+"/readyz", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz not ready within %v: %d %s", readyWithin, resp.StatusCode, b)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("/readyz: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// queryResponse is QueryResponse as its JSON reads.
type queryResponse struct {
	Answer    string `json:"answer"`
	ToolCalls []struct {
		Tool      string         `json:"tool"`
		Arguments map[string]any `json:"arguments"`
		Output    string         `json:"output"`
		IsError   bool           `json:"is_error"`
		Step      int            `json:"step"`
		Index     int            `json:"index"`
	} `json:"tool_calls"`
	Steps []struct {
		Number    int `json:"number"`
		Retrieved []struct {
			Tool  struct{ ID string } `json:"tool"`
			Score float64             `json:"score"`
		} `json:"retrieved"`
		ModelOutput string `json:"model_output"`
		Usage       struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	} `json:"steps"`
	Iterations int    `json:"iterations"`
	StopReason string `json:"stop_reason"`
	Error      string `json:"error"`
	TraceID    string `json:"trace_id"`
}

// calls lists the response's calls as "tool args -> output" lines, in order.
func (r queryResponse) calls() []string {
	var out []string
	for _, c := range r.ToolCalls {
		args, _ := json.Marshal(c.Arguments)
		line := fmt.Sprintf("%d %s %s -> %s", c.Step, c.Tool, args, c.Output)
		if c.IsError {
			line += " (error)"
		}
		out = append(out, line)
	}
	return out
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	return do(t, "", http.MethodPost, url, body)
}

func query(t *testing.T, base, body string) queryResponse {
	t.Helper()
	code, b := post(t, base+"/v1/query", body)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/query %s: %d %s", body, code, b)
	}
	return decodeQuery(t, b)
}

// outputOf reads the last <<output>> of a prompt, quotes removed.
func outputOf(prompt string) string {
	return strings.Trim(outputLiteral(prompt), `'"`)
}

// outputLiteral is the quoted literal of the prompt's last <<output>>, quotes and all.
func outputLiteral(prompt string) string {
	i := strings.LastIndex(prompt, "<<output>>")
	if i < 0 {
		return ""
	}
	rest := prompt[i+len("<<output>>"):]
	if end := strings.Index(rest, "\n"); end >= 0 {
		rest = rest[:end]
	}
	return rest
}

func TestQueryLoop(t *testing.T) {
	m := startMesh(t)
	cases := []struct {
		name     string
		question string
		script   script
		body     string // extra request fields
		want     queryResponse
		calls    []string
		answer   string // the answer contains this
	}{
		{
			name: "answers directly", question: "Tell me a joke about temperature conversion.",
			script: func(_ string, _ int, _ bool) string { return "I am a tool-calling assistant." },
			want:   queryResponse{Iterations: 1, StopReason: "STOP_REASON_ANSWERED"},
			answer: "I am a tool-calling assistant.",
		},
		{
			name: "one call then an answer", question: "What is 2 plus 3?",
			script: func(p string, calls int, compose bool) string {
				switch {
				case compose:
					return "2 plus 3 is " + outputOf(p) + "."
				case calls == 0:
					return "<<function>>calculator.add(a=2, b=3)"
				}
				return "The sum is " + outputOf(p)
			},
			want:   queryResponse{Iterations: 2, StopReason: "STOP_REASON_ANSWERED"},
			calls:  []string{`1 calculator.add {"a":2,"b":3} -> 5`},
			answer: "2 plus 3 is 5.",
		},
		{
			name: "chains two calls, the second on the first's result", question: "Add 2 and 3, then multiply the sum by 4.",
			script: func(p string, calls int, compose bool) string {
				switch {
				case compose:
					return "The result is " + outputOf(p) + "."
				case calls == 0:
					return "<<function>>calculator.add(a=2, b=3)"
				case calls == 1:
					return "<<function>>calculator.multiply(a=" + outputOf(p) + ", b=4)"
				}
				return "done"
			},
			want:   queryResponse{Iterations: 3, StopReason: "STOP_REASON_ANSWERED"},
			calls:  []string{`1 calculator.add {"a":2,"b":3} -> 5`, `2 calculator.multiply {"a":5,"b":4} -> 20`},
			answer: "The result is 20.",
		},
		{
			name: "chains a database query and a calculation on its result",
			// The question names the calculation: step 2 searches with the question and step 1's
			// call, never with what the database returned (tool output is data), and the
			// lexical index cannot tell that "what would a raise cost" wants a calculator.
			question: "What is the average salary in the Engineering department, and what would a 12% raise cost per person? Calculate it.",
			script: func(p string, calls int, compose bool) string {
				avg := regexp.MustCompile(`avg_salary\\?"?:(\d+)`).FindStringSubmatch(p)
				switch {
				case compose:
					return "The average Engineering salary is " + avg[1] + "; a 12% raise costs " + outputOf(p) + " per person."
				case calls == 0:
					return `<<function>>sqlite.query_database(sql="SELECT AVG(s.annual_salary_usd) AS avg_salary FROM salaries s ` +
						`JOIN employees e ON e.id = s.employee_id JOIN departments d ON d.id = e.department_id WHERE d.name = 'Engineering'")`
				case calls == 1:
					return `<<function>>calculator.calculate(expression="` + avg[1] + ` * 0.12")`
				}
				return "done"
			},
			want: queryResponse{Iterations: 3, StopReason: "STOP_REASON_ANSWERED"},
			calls: []string{`1 sqlite.query_database {"sql":"SELECT AVG(s.annual_salary_usd) AS avg_salary FROM salaries s JOIN employees e ON e.id = s.employee_id JOIN departments d ON d.id = e.department_id WHERE d.name = 'Engineering'"} -> 1 row; columns: avg_salary
{"avg_salary":125200}`, `2 calculator.calculate {"expression":"125200 * 0.12"} -> 15024`},
			answer: "The average Engineering salary is 125200; a 12% raise costs 15024 per person.",
		},
		{
			name: "two calls in one step", question: "What are 1 plus 2 and 3 times 4?",
			script: func(p string, calls int, compose bool) string {
				switch {
				case compose:
					return "3 and 12"
				case calls == 0:
					return "<<function>>calculator.add(a=1, b=2)<<function>>calculator.multiply(a=3, b=4)"
				}
				return "3 and 12"
			},
			want:   queryResponse{Iterations: 2, StopReason: "STOP_REASON_ANSWERED"},
			calls:  []string{`1 calculator.add {"a":1,"b":2} -> 3`, `1 calculator.multiply {"a":3,"b":4} -> 12`},
			answer: "3 and 12",
		},
		{
			name: "a failing call is fed back and the model recovers", question: "Divide 1 by 0, or else by 2.",
			script: func(p string, calls int, compose bool) string {
				switch {
				case compose:
					return "1 divided by 2 is " + outputOf(p)
				case calls == 0:
					return "<<function>>calculator.divide(a=1, b=0)"
				case calls == 1 && strings.Contains(p, "<<error>>'cannot divide 1 by zero'"):
					return "<<function>>calculator.divide(a=1, b=2)"
				}
				return "ok"
			},
			want: queryResponse{Iterations: 3, StopReason: "STOP_REASON_ANSWERED"},
			calls: []string{`1 calculator.divide {"a":1,"b":0} -> cannot divide 1 by zero (error)`,
				`2 calculator.divide {"a":1,"b":2} -> 0.5`},
			answer: "1 divided by 2 is 0.5",
		},
		{
			name: "loops until the cap and says so", question: "Keep adding one.",
			script: func(p string, calls int, compose bool) string {
				if compose {
					return fmt.Sprintf("I added one %d times.", calls)
				}
				return fmt.Sprintf("<<function>>calculator.add(a=%d, b=1)", calls)
			},
			body: `,"max_iterations":3`,
			want: queryResponse{Iterations: 3, StopReason: "STOP_REASON_MAX_ITERATIONS"},
			calls: []string{`1 calculator.add {"a":0,"b":1} -> 1`, `2 calculator.add {"a":1,"b":1} -> 2`,
				`3 calculator.add {"a":2,"b":1} -> 3`},
			answer: "I added one 3 times.",
		},
		{
			name: "direct call without a model", question: `@calculator.add({"a": 2, "b": 3})`,
			want:   queryResponse{Iterations: 1, StopReason: "STOP_REASON_ANSWERED"},
			calls:  []string{`1 calculator.add {"a":2,"b":3} -> 5`},
			answer: "5",
		},
		{
			name: "two direct calls", question: `@calculator.add({"a":2,"b":3}) @converter.celsius_to_fahrenheit({"celsius":100})`,
			want:   queryResponse{Iterations: 1, StopReason: "STOP_REASON_ANSWERED"},
			calls:  []string{`1 calculator.add {"a":2,"b":3} -> 5`, `1 converter.celsius_to_fahrenheit {"celsius":100} -> 212`},
			answer: "calculator.add: 5\nconverter.celsius_to_fahrenheit: 212",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.script != nil {
				m.model.set(tc.question, tc.script)
			}
			q, _ := json.Marshal(tc.question)
			got := query(t, m.base, `{"query":`+string(q)+tc.body+`}`)
			if got.Iterations != tc.want.Iterations || got.StopReason != tc.want.StopReason || got.Error != "" {
				t.Errorf("iterations, stop_reason, error = %d, %s, %q; want %d, %s, none",
					got.Iterations, got.StopReason, got.Error, tc.want.Iterations, tc.want.StopReason)
			}
			if gotCalls := got.calls(); strings.Join(gotCalls, "\n") != strings.Join(tc.calls, "\n") {
				t.Errorf("tool_calls:\n%s\nwant:\n%s", strings.Join(gotCalls, "\n"), strings.Join(tc.calls, "\n"))
			}
			if !strings.Contains(got.Answer, tc.answer) {
				t.Errorf("answer = %q, want it to contain %q", got.Answer, tc.answer)
			}
			if len(got.Steps) != got.Iterations {
				t.Fatalf("%d steps for %d iterations", len(got.Steps), got.Iterations)
			}
			for i, c := range got.ToolCalls {
				if c.Index != i {
					t.Errorf("tool_calls[%d].index = %d", i, c.Index)
				}
			}
			if tc.script == nil {
				return
			}
			for i, s := range got.Steps {
				if s.Number != i+1 || len(s.Retrieved) == 0 || s.ModelOutput == "" || s.Usage.PromptTokens == 0 {
					t.Errorf("step %d = %+v; want its number, tools retrieved, the model's output and tokens", i+1, s)
				}
			}
			// The tools the model called were among those retrieved for its step.
			for _, c := range got.ToolCalls {
				var ids []string
				for _, r := range got.Steps[c.Step-1].Retrieved {
					ids = append(ids, r.Tool.ID)
				}
				if !strings.Contains(" "+strings.Join(ids, " ")+" ", " "+c.Tool+" ") {
					t.Errorf("step %d called %s, not among the tools retrieved: %v", c.Step, c.Tool, ids)
				}
			}
		})
	}
}

func TestQueryStreamEventsInOrder(t *testing.T) {
	m := startMesh(t)
	m.model.set("What is 2 plus 3?", func(p string, calls int, compose bool) string {
		switch {
		case compose:
			return "2 plus 3 is 5, as the calculator says."
		case calls == 0:
			return "<<function>>calculator.add(a=2, b=3)"
		}
		return "5"
	})
	code, b := post(t, m.base+"/v1/query:stream", `{"query":"What is 2 plus 3?"}`)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/query:stream: %d %s", code, b)
	}
	var kinds []string
	var answer strings.Builder
	var done queryResponse
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		var line struct {
			Result map[string]json.RawMessage `json:"result"`
			Error  json.RawMessage            `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Error != nil {
			t.Fatalf("stream line %s: %v", sc.Bytes(), err)
		}
		for k, v := range line.Result {
			if len(kinds) == 0 || kinds[len(kinds)-1] != k {
				kinds = append(kinds, k)
			}
			switch k {
			case "answer_delta":
				var s string
				_ = json.Unmarshal(v, &s)
				answer.WriteString(s)
			case "done":
				_ = json.Unmarshal(v, &done)
			}
		}
	}
	want := "retrieved model_output tool_call_started tool_call_finished retrieved model_output answer_delta done"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("events:\n%s\nwant\n%s", got, want)
	}
	if answer.String() != "2 plus 3 is 5, as the calculator says." || done.Answer != answer.String() {
		t.Errorf("streamed answer %q, done answer %q", answer.String(), done.Answer)
	}
	if done.StopReason != "STOP_REASON_ANSWERED" || len(done.ToolCalls) != 1 || done.ToolCalls[0].Output != "5" {
		t.Errorf("done = %+v", done)
	}
}

func TestQueryLimitsAndFailures(t *testing.T) {
	m := startMesh(t, "--api.query-timeout=2s")
	m.model.set("Hang on.", func(string, int, bool) string { return "HANG" })
	m.model.set("Add then hang.", func(p string, calls int, _ bool) string {
		if calls == 0 {
			return "<<function>>calculator.add(a=2, b=3)"
		}
		return "HANG"
	})

	t.Run("bad requests name the field", func(t *testing.T) {
		cases := []struct{ body, want string }{
			{`{}`, "query: is required"},
			{`{"query":"  "}`, "query: is required"},
			{`{"query":"x","k":51}`, "k: must be between 1 and 50"},
			{`{"query":"x","k":-1}`, "k: must be between 1 and 50"},
			{`{"query":"x","max_iterations":33}`, "max_iterations: must be between 1 and 32"},
			{`{"query":"x","timeout_seconds":601}`, "timeout_seconds: must be between 1 and 600"},
			{`{"query":"x","servers":["Bad Name"]}`, "servers[0]: must match"},
			{`{"query":"` + strings.Repeat("a", 9000) + `"}`, "query: is 9000 bytes"},
			{`{"query":"@calculator.add({\"a\":1)"}`, "query: direct call: byte 16: arguments of calculator.add are not valid JSON"},
			{`{"query":"@calculator({})"}`, "not a tool id of the form SERVER.TOOL"},
			{`{"query":"x","bogus":1}`, "bogus"},
		}
		for _, tc := range cases {
			code, b := post(t, m.base+"/v1/query", tc.body)
			if code != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
				t.Errorf("POST %.60s: %d %s; want 400 naming %q", tc.body, code, b, tc.want)
			}
		}
	})

	t.Run("an answer that breaks off part way is an error, with what came", func(t *testing.T) {
		m.model.set("Add 2 and 3, please.", func(p string, calls int, compose bool) string {
			switch {
			case compose:
				return "BREAK:The sum of 2 and 3 is 5."
			case calls == 0:
				return "<<function>>calculator.add(a=2, b=3)"
			}
			return "5"
		})
		got := query(t, m.base, `{"query":"Add 2 and 3, please."}`)
		if got.StopReason != "STOP_REASON_ERROR" || !strings.Contains(got.Error, "composing the answer failed part way") ||
			got.Answer != "The sum " || len(got.ToolCalls) != 1 {
			t.Errorf("stop_reason %s, error %q, answer %q, %d calls", got.StopReason, got.Error, got.Answer, len(got.ToolCalls))
		}
	})

	t.Run("the deadline ends the loop with what was done", func(t *testing.T) {
		start := time.Now()
		got := query(t, m.base, `{"query":"Add then hang.","timeout_seconds":1}`)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("took %s with a 1s deadline", took)
		}
		if got.StopReason != "STOP_REASON_DEADLINE" || !strings.Contains(got.Error, "deadline passed in step 2 while asking the model") {
			t.Errorf("stop_reason, error = %s, %q", got.StopReason, got.Error)
		}
		if len(got.ToolCalls) != 1 || got.ToolCalls[0].Output != "5" {
			t.Errorf("tool_calls = %v, want the add made before the deadline", got.calls())
		}
	})

	t.Run("a client that goes away cancels the model request", func(t *testing.T) {
		before := m.double.Canceled()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.base+"/v1/query:stream", strings.NewReader(`{"query":"Hang on."}`))
		req.Header.Set("Content-Type", "application/json")
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		eventually.True(t, 5*time.Second, "the model request to start", func() bool { return m.double.Processing() > 0 })
		cancel()
		eventually.True(t, 5*time.Second, "the model request to be canceled after the client left", func() bool { return m.double.Canceled() > before })
		<-done
	})
}

// TestQueryLongQuestion: the longest question the api takes is searched for and answered. The
// retriever once took half as much as the api, so such a question failed at the search; now every
// hop applies searchbounds.MaxQueryBytes. (The double tokenizes a byte a token: its context is raised so
// the question fits, as it would in Gorilla's 4096 tokens at about four bytes a token.)
func TestQueryLongQuestion(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: 16384})
	d.SetDefault(llamatest.Reply{Pieces: []string{"Long question, short answer."}})
	base := startApp(t, "", []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=" + d.URL,
	}, "demo", "executor", "retriever", "inference", "api")
	question, _ := json.Marshal(strings.Repeat("add two numbers ", searchbounds.MaxQueryBytes/16))
	got := query(t, base, `{"query":`+string(question)+`}`)
	if got.StopReason != "STOP_REASON_ANSWERED" || len(got.Steps) == 0 || len(got.Steps[0].Retrieved) == 0 {
		t.Errorf("a %d-byte question: stop %s, error %q, %d steps; want it answered with tools retrieved", searchbounds.MaxQueryBytes, got.StopReason, got.Error, len(got.Steps))
	}
}

func TestQueryWithoutModel(t *testing.T) {
	// Nothing listens on port 1 of loopback: a llama-server that is not running.
	base := startApp(t, "", []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=http://127.0.0.1:1",
	}, "demo", "executor", "retriever", "inference", "api")

	start := time.Now()
	code, b := post(t, base+"/v1/query", `{"query":"What is 2 plus 3?"}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(b), "http://127.0.0.1:1") || !strings.Contains(string(b), "llama-server -m") {
		t.Errorf("query without a model: %d %s; want 503 naming the URL tried and how to start one", code, b)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the 503 took %s", took)
	}
	got := query(t, base, `{"query":"@calculator.add({\"a\":2,\"b\":3})"}`)
	if got.Answer != "5" {
		t.Errorf("direct call without a model answered %q, want 5", got.Answer)
	}
	code, b = post(t, base+"/v1/tools/calculator/add:call", `{"arguments":{"a":1,"b":1}}`)
	if code != http.StatusOK {
		t.Errorf("tool call without a model: %d %s", code, b)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ready struct {
		Inference struct {
			Ready      bool   `json:"ready"`
			BackendURL string `json:"backend_url"`
			Error      string `json:"error"`
		} `json:"inference"`
	}
	_ = json.Unmarshal(rb, &ready)
	if ready.Inference.Ready || ready.Inference.BackendURL != "http://127.0.0.1:1" || ready.Inference.Error == "" {
		t.Errorf("/readyz = %s; want inference not ready, naming its URL and why", rb)
	}
}

// TestQueryOnRealServer runs the whole loop against a real llama-server with the tiny
// random-weight model: its text is noise, but under the grammar whatever it emits must become
// calls to offered tools that the executor runs, and every query must end with a stop reason.
func TestQueryOnRealServer(t *testing.T) {
	// A bias on "<" makes the noise call tools often; temperature 1 explores the grammar.
	srv := llamatest.StartServer(t, llamatest.ServerOptions{Args: llamatest.CallBias()})
	base := startApp(t, "", []string{
		"--inference.llm.temperature=1",
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=" + srv.URL,
	}, "demo", "executor", "retriever", "inference", "api")
	questions := []string{
		"What is %d plus 3?", "Multiply %d by 7.", "Convert %d degrees celsius to fahrenheit.",
		"Divide %d by 4 and add 2.", "What is %d fahrenheit in celsius?", "Calculate (%d + 2) * 5.",
	}
	stops := map[string]int{}
	calls := 0
	for i := range 12 {
		text := fmt.Sprintf(questions[i%len(questions)], i)
		q, _ := json.Marshal(text)
		got := query(t, base, `{"query":`+string(q)+`,"max_iterations":3,"timeout_seconds":120}`)
		stops[got.StopReason]++
		if got.StopReason != "STOP_REASON_ANSWERED" && got.StopReason != "STOP_REASON_MAX_ITERATIONS" {
			t.Errorf("%q: stop_reason %s, error %q", text, got.StopReason, got.Error)
		}
		for _, c := range got.ToolCalls {
			calls++
			var offered []string
			for _, r := range got.Steps[c.Step-1].Retrieved {
				offered = append(offered, r.Tool.ID)
			}
			if !strings.Contains(" "+strings.Join(offered, " ")+" ", " "+c.Tool+" ") {
				t.Errorf("%q: step %d called %s, not among the tools offered: %v", text, c.Step, c.Tool, offered)
			}
			if c.Output == "" {
				t.Errorf("%q: call %s %v has no output", text, c.Tool, c.Arguments)
			}
		}
	}
	t.Logf("12 queries: stop reasons %v, %d tool calls run", stops, calls)
	if calls == 0 {
		t.Error("no query made a tool call: with the bias on \"<\" the noise model calls tools in most queries, so the loop's calls went untested")
	}
}

func TestQueryNeedsToken(t *testing.T) {
	const token = "a-long-enough-test-token-0123456789"
	t.Setenv("TOOLMESH_API_TOKENS", "tester:"+token)
	base := startApp(t, token, []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=http://127.0.0.1:1", "--api.rate-limit=0.01", "--api.rate-burst=20",
	}, "demo", "executor", "retriever", "inference", "api")
	do := func(method, path, body, auth string) (int, http.Header, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	direct := `{"query":"@calculator.add({\"a\":2,\"b\":3})"}`
	cases := []struct {
		method, path, body, auth string
		want                     int
	}{
		{"GET", "/healthz", "", "", 200},
		{"GET", "/readyz", "", "", 401},
		{"GET", "/openapi.json", "", "Bearer wrong-token-wrong-token", 401},
		{"GET", "/v1/tools", "", "", 401},
		{"GET", "/v1/tools", "", "Basic " + token, 401},
		{"POST", "/v1/query", direct, "Bearer nope-nope-nope-nope-nope", 401},
		{"POST", "/v1/query:stream", direct, "", 401},
		{"GET", "/v1/tools", "", "Bearer " + token, 200},
		{"POST", "/v1/query", direct, "Bearer " + token, 200},
		{"GET", "/readyz", "", "Bearer " + token, 200},
	}
	for _, tc := range cases {
		code, h, body := do(tc.method, tc.path, tc.body, tc.auth)
		if code != tc.want {
			t.Errorf("%s %s with %q: %d %s, want %d", tc.method, tc.path, tc.auth, code, body, tc.want)
		}
		if code == 401 && (h.Get("WWW-Authenticate") != "Bearer" || strings.Contains(body, token)) {
			t.Errorf("%s %s: 401 with WWW-Authenticate %q, body %s", tc.method, tc.path, h.Get("WWW-Authenticate"), body)
		}
	}
	// The burst of 20 is spent by now or soon: the next requests are refused with a wait.
	for range 25 {
		code, h, body := do("GET", "/v1/tools", "", "Bearer "+token)
		if code == http.StatusTooManyRequests {
			if h.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After: %s", body)
			}
			return
		}
	}
	t.Error("no 429 after the burst was spent")
}

// TestTraceIDsAndMetrics: without a collector spans are not exported, but every answer and
// every error still names its trace, and /metrics counts what happened.
func TestTraceIDsAndMetrics(t *testing.T) {
	m := startMesh(t)
	got := query(t, m.base, `{"query":"@calculator.add({\"a\":2,\"b\":3})"}`)
	code, b := post(t, m.base+"/v1/query", `{"query":"x","k":99}`)
	var bad struct {
		Message string `json:"message"`
		TraceID string `json:"trace_id"`
	}
	_ = json.Unmarshal(b, &bad)
	traceID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	if code != http.StatusBadRequest || !traceID.MatchString(bad.TraceID) {
		t.Errorf("bad request: %d %s; want 400 with a trace_id", code, b)
	}
	resp, err := http.Get(m.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`toolmesh_query_tool_calls_total{gen_ai_tool_name="calculator.add",outcome="ok",service_name="toolmesh-api"} 1`,
		`toolmesh_query_duration_seconds_count{service_name="toolmesh-api",toolmesh_query_stop_reason="answered"} 1`,
		`rpc_server_call_duration_seconds_count{`, `service_name="toolmesh-executor"`, `service_name="toolmesh-retriever"`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !traceID.MatchString(got.TraceID) {
		t.Errorf("query response trace_id = %q", got.TraceID)
	}
}
