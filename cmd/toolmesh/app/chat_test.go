package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamatest"
)

// chatCompletion is a chat.completion as its JSON reads, with toolmesh's extension.
type chatCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Toolmesh struct {
		TraceID    string `json:"trace_id"`
		StopReason string `json:"stop_reason"`
		Error      string `json:"error"`
		ToolCalls  []struct {
			Tool      string         `json:"tool"`
			Arguments map[string]any `json:"arguments"`
			Output    string         `json:"output"`
			IsError   bool           `json:"is_error"`
		} `json:"tool_calls"`
		Steps []struct {
			Number  int `json:"number"`
			History struct {
				Turns      int `json:"turns"`
				Summarized int `json:"summarized"`
				Dropped    int `json:"dropped"`
			} `json:"history"`
		} `json:"steps"`
	} `json:"toolmesh"`
}

func (c chatCompletion) content() string {
	if len(c.Choices) == 0 || c.Choices[0].Message.Content == nil {
		return "<null>"
	}
	return *c.Choices[0].Message.Content
}

// meshCalls lists the extension's calls as "tool args -> output".
func (c chatCompletion) meshCalls() []string {
	var out []string
	for _, tc := range c.Toolmesh.ToolCalls {
		args, _ := json.Marshal(tc.Arguments)
		out = append(out, fmt.Sprintf("%s %s -> %s", tc.Tool, args, tc.Output))
	}
	return out
}

func chat(t *testing.T, base string, body any) chatCompletion {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	code, out := post(t, base+"/v1/chat/completions", string(b))
	if code != http.StatusOK {
		t.Fatalf("POST /v1/chat/completions %s: %d %s", b, code, out)
	}
	return decodeChat(t, out)
}

func decodeChat(t *testing.T, b []byte) chatCompletion {
	t.Helper()
	var c chatCompletion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return c
}

// afterQuestion is the part of a prompt from the question on: this turn's calls and results.
func afterQuestion(prompt string) string {
	i := strings.LastIndex(prompt, "<<question>>")
	if i < 0 {
		return ""
	}
	return prompt[i:]
}

// meshModel answers the chat tests' questions: the scripted llama-server double's text for each.
func chatScripts(m *mesh) {
	// A mesh tool, then the answer composed from its result.
	m.model.set("What is 2 plus 3?", func(p string, _ int, compose bool) string {
		turn := afterQuestion(p)
		switch {
		case compose:
			return "2 plus 3 is " + outputOf(turn) + "."
		case !strings.Contains(turn, "<<call>>"):
			return "<<function>>calculator.add(a=2, b=3)"
		}
		return "The sum is " + outputOf(turn)
	})
	// The second turn needs the first: the prompt shows it, so the model multiplies its result.
	m.model.set("Now multiply that by 4.", func(p string, _ int, compose bool) string {
		turn := afterQuestion(p)
		switch {
		case !strings.Contains(p, "<<user>>'What is 2 plus 3?'") || !strings.Contains(p, "<<assistant>>'2 plus 3 is 5.'"):
			return "I do not know what that is."
		case compose:
			return "That times 4 is " + outputOf(turn) + "."
		case !strings.Contains(turn, "<<call>>"):
			return "<<function>>calculator.multiply(a=5, b=4)"
		}
		return "done"
	})
	m.model.set("And subtract 1.", func(p string, _ int, compose bool) string {
		turn := afterQuestion(p)
		switch {
		case !strings.Contains(p, "<<assistant>>'That times 4 is 20.'") || !strings.Contains(p, "<<user>>'Now multiply that by 4.'"):
			return "I do not know what that is."
		case compose:
			return "It is " + outputOf(turn) + " now."
		case !strings.Contains(turn, "<<call>>"):
			return "<<function>>calculator.subtract(a=20, b=1)"
		}
		return "done"
	})
	// The caller's function: the model calls it, the caller runs it, the model answers.
	m.model.set("What is the weather in Paris?", func(p string, _ int, compose bool) string {
		turn := afterQuestion(p)
		switch {
		case compose:
			return "In Paris it is " + outputOf(turn) + "."
		case !strings.Contains(turn, "<<call>>"):
			return "<<function>>get_weather(city='Paris')"
		}
		return "done"
	})
	// A mesh tool and a caller's function in one model turn: the mesh runs its tool, the caller
	// its function, and the turn's next request shows the model both results.
	m.model.set("Add 2 and 3 and tell my phone.", func(p string, _ int, compose bool) string {
		turn := afterQuestion(p)
		switch {
		case compose:
			return fmt.Sprintf("Sent. (mesh saw add: %v, notify: %v)",
				strings.Contains(turn, "<<call>>calculator.add(a=2, b=3)\n<<output>>'5'"),
				strings.Contains(turn, "<<call>>notify(text='5')\n<<output>>'delivered'"))
		case !strings.Contains(turn, "<<call>>"):
			return "<<function>>calculator.add(a=2, b=3)<<function>>notify(text='5')"
		}
		return "done"
	})
	// tool_choice none: the model is offered nothing and answers in words.
	m.model.set("Say hello without tools.", func(p string, _ int, _ bool) string {
		if strings.Contains(p, "<<function>>") {
			return "<<function>>calculator.add(a=1, b=1)"
		}
		return "Hello."
	})
}

// TestChatCompletions drives POST /v1/chat/completions through the whole mesh (retriever,
// executor, the demo calculator, inference against the scripted llama-server double): a
// question a mesh tool answers, a three-turn conversation, the caller's own function and its
// round trip, a mesh tool and a caller's function in one turn, and tool_choice none.
func TestChatCompletions(t *testing.T) {
	m := startMesh(t)
	chatScripts(m)
	model := modelName(t, m.base)
	user := func(s string) map[string]any { return map[string]any{"role": "user", "content": s} }
	assistant := func(s string) map[string]any { return map[string]any{"role": "assistant", "content": s} }

	t.Run("a mesh tool answers", func(t *testing.T) {
		c := chat(t, m.base, map[string]any{"model": model, "messages": []any{user("What is 2 plus 3?")}})
		if c.content() != "2 plus 3 is 5." || c.Choices[0].FinishReason != "stop" || c.Object != "chat.completion" || c.Model != model {
			t.Errorf("content %q finish %q object %q model %q", c.content(), c.Choices[0].FinishReason, c.Object, c.Model)
		}
		if got := c.meshCalls(); len(got) != 1 || got[0] != `calculator.add {"a":2,"b":3} -> 5` {
			t.Errorf("mesh calls %v", got)
		}
		if c.Usage.PromptTokens == 0 || c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens || c.Toolmesh.TraceID == "" {
			t.Errorf("usage %+v trace %q", c.Usage, c.Toolmesh.TraceID)
		}
	})

	t.Run("three turns", func(t *testing.T) {
		msgs := []any{map[string]any{"role": "system", "content": "Answer with numbers."}, user("What is 2 plus 3?")}
		c := chat(t, m.base, map[string]any{"model": model, "messages": msgs})
		msgs = append(msgs, assistant(c.content()), user("Now multiply that by 4."))
		c = chat(t, m.base, map[string]any{"model": model, "messages": msgs})
		if c.content() != "That times 4 is 20." {
			t.Fatalf("second turn: %q (calls %v)", c.content(), c.meshCalls())
		}
		msgs = append(msgs, assistant(c.content()), user("And subtract 1."))
		c = chat(t, m.base, map[string]any{"model": model, "messages": msgs})
		if c.content() != "It is 19 now." || len(c.meshCalls()) != 1 {
			t.Errorf("third turn: %q (calls %v)", c.content(), c.meshCalls())
		}
		if h := c.Toolmesh.Steps[0].History; h.Turns != 2 || h.Summarized != 0 || h.Dropped != 0 {
			t.Errorf("history fit %+v, want 2 turns whole", h)
		}
	})

	weather := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "The weather in a city.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}
	t.Run("the caller's function", func(t *testing.T) {
		msgs := []any{user("What is the weather in Paris?")}
		c := chat(t, m.base, map[string]any{"model": model, "messages": msgs, "tools": []any{weather}})
		calls := c.Choices[0].Message.ToolCalls
		if c.Choices[0].FinishReason != "tool_calls" || len(calls) != 1 || c.Choices[0].Message.Content != nil {
			t.Fatalf("finish %q calls %+v content %q", c.Choices[0].FinishReason, calls, c.content())
		}
		if calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city":"Paris"}` || !strings.HasPrefix(calls[0].ID, "call_") {
			t.Errorf("call %+v", calls[0])
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": calls[0].ID, "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": calls[0].Function.Arguments}}}},
			map[string]any{"role": "tool", "tool_call_id": calls[0].ID, "content": "sunny, 21 °C"})
		c = chat(t, m.base, map[string]any{"model": model, "messages": msgs, "tools": []any{weather}})
		if c.content() != "In Paris it is sunny, 21 °C." || c.Choices[0].FinishReason != "stop" {
			t.Errorf("after the result: %q %q", c.content(), c.Choices[0].FinishReason)
		}
	})

	t.Run("a mesh tool and the caller's function in one turn", func(t *testing.T) {
		notify := map[string]any{"type": "function", "function": map[string]any{"name": "notify", "description": "Send a text to my phone.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}}}
		msgs := []any{user("Add 2 and 3 and tell my phone.")}
		c := chat(t, m.base, map[string]any{"model": model, "messages": msgs, "tools": []any{notify}})
		calls := c.Choices[0].Message.ToolCalls
		if len(calls) != 1 || calls[0].Function.Name != "notify" || len(c.meshCalls()) != 1 {
			t.Fatalf("calls %+v, mesh calls %v", calls, c.meshCalls())
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": calls[0].ID, "type": "function",
			"function": map[string]any{"name": "notify", "arguments": calls[0].Function.Arguments}}}},
			map[string]any{"role": "tool", "tool_call_id": calls[0].ID, "content": "delivered"})
		c = chat(t, m.base, map[string]any{"model": model, "messages": msgs, "tools": []any{notify}})
		if c.content() != "Sent. (mesh saw add: true, notify: true)" {
			t.Errorf("the turn's end: %q", c.content())
		}
	})

	t.Run("tool_choice none", func(t *testing.T) {
		c := chat(t, m.base, map[string]any{"model": model, "messages": []any{user("Say hello without tools.")}, "tool_choice": "none"})
		if c.content() != "Hello." || len(c.meshCalls()) != 0 {
			t.Errorf("content %q calls %v", c.content(), c.meshCalls())
		}
	})

	t.Run("a caller's function named like a mesh tool", func(t *testing.T) {
		clash := map[string]any{"type": "function", "function": map[string]any{"name": "calculator__add"}}
		code, b := post(t, m.base+"/v1/chat/completions", mustJSON(t, map[string]any{"model": model, "messages": []any{user("What is 2 plus 3?")}, "tools": []any{clash}}))
		if code != 400 || !strings.Contains(string(b), `"param":"tools[0].function.name"`) || !strings.Contains(string(b), "calculator.add") {
			t.Errorf("%d %s", code, b)
		}
	})

	t.Run("an unknown model", func(t *testing.T) {
		code, b := post(t, m.base+"/v1/chat/completions", mustJSON(t, map[string]any{"model": "gpt-4o", "messages": []any{user("What is 2 plus 3?")}}))
		if code != 404 || !strings.Contains(string(b), `"code":"model_not_found"`) || !strings.Contains(string(b), model) {
			t.Errorf("%d %s", code, b)
		}
	})
}

// TestChatCompletionsStream: a streamed completion carries the mesh's steps as extension
// chunks, the answer as content deltas, the usage last, and [DONE].
func TestChatCompletionsStream(t *testing.T) {
	m := startMesh(t)
	chatScripts(m)
	model := modelName(t, m.base)
	code, b := post(t, m.base+"/v1/chat/completions", mustJSON(t, map[string]any{"model": model, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "messages": []any{map[string]any{"role": "user", "content": "What is 2 plus 3?"}}}))
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var text strings.Builder
	var events []string
	var finish string
	done := false
	var lastUsage json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage    json.RawMessage `json:"usage"`
			Toolmesh *struct {
				Event string `json:"event"`
			} `json:"toolmesh"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Toolmesh != nil {
			events = append(events, c.Toolmesh.Event)
		}
		lastUsage = c.Usage
	}
	if !done || text.String() != "2 plus 3 is 5." || finish != "stop" || !strings.Contains(string(lastUsage), "total_tokens") {
		t.Errorf("done %v text %q finish %q last usage %s", done, text.String(), finish, lastUsage)
	}
	want := "retrieved,model_output,tool_call_started,tool_call_finished,retrieved,model_output,done"
	if got := strings.Join(events, ","); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}

// TestChatHistoryDoesNotFit: a conversation longer than the model's context keeps the question
// and this turn, shortens and then leaves out the oldest turns, and says so in the step record.
func TestChatHistoryDoesNotFit(t *testing.T) {
	m := startMesh(t)
	chatScripts(m)
	model := modelName(t, m.base)
	var msgs []any
	long := strings.Repeat("The weather was discussed at length, with many words about clouds. ", 40)
	for i := range 12 {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Turn %d: %s", i, long)},
			map[string]any{"role": "assistant", "content": long})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "What is 2 plus 3?"})
	c := chat(t, m.base, map[string]any{"model": model, "messages": msgs})
	h := c.Toolmesh.Steps[0].History
	if c.content() != "2 plus 3 is 5." || h.Turns != 12 || h.Summarized+h.Dropped == 0 {
		t.Errorf("content %q history %+v", c.content(), h)
	}
}

// modelName is the model GET /v1/models lists.
func modelName(t *testing.T, base string) string {
	t.Helper()
	return modelNameAs(t, base, "")
}

// modelNameAs is modelName for a mesh with API tokens.
func modelNameAs(t *testing.T, base, token string) string {
	t.Helper()
	code, b := do(t, token, http.MethodGet, base+"/v1/models", "")
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if code != 200 || json.Unmarshal(b, &list) != nil || len(list.Data) != 1 {
		t.Fatalf("GET /v1/models: %d %s", code, b)
	}
	return list.Data[0].ID
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChatTrace: one chat completion is one trace, from the REST request through the loop,
// the model's turns and the tool call, with the GenAI attributes of the request and response on
// the request's span.
func TestChatTrace(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	m := &mesh{model: &scriptedModel{scripts: map[string]script{}}, double: d}
	d.ScriptFunc(m.model.reply)
	chatScripts(m)
	spans := tracetest.NewInMemoryExporter()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	a, _, err := launch(t, meshArgs("--llm-url="+d.URL), nil, func(c *Config) { c.Telemetry.SpanExporter = spans }, allTargets...)
	if err != nil {
		t.Fatal(err)
	}
	base := endpoint(a, "REST")
	eventually.True(t, 30*time.Second, "the mesh is ready", func() bool { code, _ := do(t, "", http.MethodGet, base+"/readyz", ""); return code == 200 })
	model := modelName(t, base)

	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(mustJSON(t, map[string]any{
		"model": model, "temperature": 0.5, "messages": []any{map[string]any{"role": "user", "content": "What is 2 plus 3?"}}})))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var c chatCompletion
	err = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d: %v", resp.StatusCode, err)
	}
	traceID := resp.Header.Get("X-Trace-Id")
	if traceID == "" || traceID != c.Toolmesh.TraceID {
		t.Fatalf("X-Trace-Id %q, extension's trace_id %q", traceID, c.Toolmesh.TraceID)
	}
	want := []string{"invoke_agent toolmesh", "execute_tool calculator.add", "chat " + model}
	var names []string
	// The root (the REST request's span) ends after the client has its answer, so it can be
	// exported in a later batch than the rest: wait for it too.
	eventually.True(t, 10*time.Second, "the request's spans are exported, its root included", func() bool {
		names = names[:0]
		rooted := false
		for _, s := range spans.GetSpans() {
			if s.SpanContext.TraceID().String() == traceID {
				names = append(names, s.Name)
				rooted = rooted || !s.Parent.IsValid()
			}
		}
		if !rooted {
			return false
		}
		for _, w := range want {
			if !slices.Contains(names, w) {
				return false
			}
		}
		return true
	})
	var root *tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.SpanContext.TraceID().String() == traceID && !s.Parent.IsValid() {
			if root != nil {
				t.Fatalf("two root spans in the trace: %q and %q", root.Name, s.Name)
			}
			root = &s
		}
	}
	if root == nil {
		t.Fatalf("no root span among %v", names)
	}
	attrs := map[string]string{}
	for _, kv := range root.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.response.id": c.ID,
		"gen_ai.request.temperature": "0.5", "gen_ai.response.model": model, "gen_ai.response.finish_reasons": `["stop"]`,
		"gen_ai.usage.input_tokens": fmt.Sprint(c.Usage.PromptTokens), "gen_ai.usage.output_tokens": fmt.Sprint(c.Usage.CompletionTokens)} {
		if attrs[k] != v {
			t.Errorf("root span %q: %s = %q, want %q", root.Name, k, attrs[k], v)
		}
	}
}

// TestQueryConversation: the native POST /v1/query takes the earlier turns and the caller's
// functions too, and stops with the function calls for the caller to run.
func TestQueryConversation(t *testing.T) {
	m := startMesh(t)
	chatScripts(m)
	r := query(t, m.base, `{"query":"Now multiply that by 4.","messages":[{"role":"user","content":"What is 2 plus 3?"},{"role":"assistant","content":"2 plus 3 is 5."}]}`)
	if r.Answer != "That times 4 is 20." || r.StopReason != "STOP_REASON_ANSWERED" {
		t.Errorf("answer %q stop %s", r.Answer, r.StopReason)
	}
	code, b := post(t, m.base+"/v1/query", `{"query":"What is the weather in Paris?","functions":[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}`)
	var fr struct {
		StopReason    string `json:"stop_reason"`
		FinishReason  string `json:"finish_reason"`
		FunctionCalls []struct {
			ToolID    string         `json:"tool_id"`
			Arguments map[string]any `json:"arguments"`
			ID        string         `json:"id"`
		} `json:"function_calls"`
	}
	if code != 200 || json.Unmarshal(b, &fr) != nil || fr.StopReason != "STOP_REASON_FUNCTION_CALLS" || fr.FinishReason != "tool_calls" ||
		len(fr.FunctionCalls) != 1 || fr.FunctionCalls[0].ToolID != "get_weather" || fr.FunctionCalls[0].Arguments["city"] != "Paris" {
		t.Fatalf("%d %s", code, b)
	}
	id := fr.FunctionCalls[0].ID
	r = query(t, m.base, `{"messages":[{"role":"user","content":"What is the weather in Paris?"},
		{"role":"assistant","tool_calls":[{"id":"`+id+`","tool_id":"get_weather","arguments":{"city":"Paris"}}]},
		{"role":"tool","tool_call_id":"`+id+`","content":"cloudy"}],"functions":[{"name":"get_weather"}]}`)
	if r.Answer != "In Paris it is cloudy." {
		t.Errorf("after the result: %q", r.Answer)
	}
}

// TestChatBadConversation: a conversation of a shape OpenAI refuses is refused with a 400 that
// names the message and field, before anything runs: no model turn, no tool call.
func TestChatBadConversation(t *testing.T) {
	m := startMesh(t)
	chatScripts(m)
	model := modelName(t, m.base)
	before := len(m.double.Requests())
	user := map[string]any{"role": "user", "content": "What is 2 plus 3?"}
	call := func(id string) map[string]any {
		return map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}}
	}
	result := func(id string) map[string]any {
		return map[string]any{"role": "tool", "tool_call_id": id, "content": "sunny"}
	}
	cases := []struct {
		name  string
		msgs  []any
		param string
	}{
		{"a tool message without its call", []any{user, result("call_x")}, "messages[1].tool_call_id"},
		{"a call without its result", []any{user, call("call_a"), user}, "messages[1].tool_calls"},
		{"a result for another call", []any{user, call("call_a"), result("call_b")}, "messages[2].tool_call_id"},
		{"no user message", []any{map[string]any{"role": "system", "content": "hi"}}, "messages"},
		{"ends with the assistant's words", []any{user, map[string]any{"role": "assistant", "content": "5"}}, "messages[1].role"},
		{"an empty user message", []any{map[string]any{"role": "user", "content": ""}}, "messages[0].content"},
		{"an unknown role", []any{map[string]any{"role": "narrator", "content": "Once"}, user}, "messages[0].role"},
		{"an oversized message", []any{map[string]any{"role": "user", "content": strings.Repeat("x", 65<<10)}}, "messages[0].content"},
		{"oversized history", func() []any {
			var out []any
			for range 9 {
				out = append(out, map[string]any{"role": "user", "content": strings.Repeat("y", 60<<10)})
			}
			return out
		}(), "messages"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, b := post(t, m.base+"/v1/chat/completions", mustJSON(t, map[string]any{"model": model, "messages": tc.msgs,
				"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}}))
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if code != 400 || json.Unmarshal(b, &e) != nil || e.Error.Param == nil || *e.Error.Param != tc.param || e.Error.Type != "invalid_request_error" {
				t.Errorf("%d %.300s, want 400 naming %s", code, b, tc.param)
			}
		})
	}
	if n := len(m.double.Requests()) - before; n != 0 {
		t.Errorf("the refused requests reached the model %d times", n)
	}
}

// TestContextTooLong: a question that does not fit the model's context even with every earlier
// turn and tool left out is the request's fault, on both faces: a 400 (OpenAI's
// context_length_exceeded), never a 429 that would have a client retry it.
func TestContextTooLong(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: 256})
	d.SetDefault(llamatest.Reply{Pieces: []string{"never asked"}})
	base := startApp(t, "", meshArgs("--llm-url="+d.URL), allTargets...)
	question := strings.Repeat("Please add these numbers for me. ", 200)
	code, b := post(t, base+"/v1/query", mustJSON(t, map[string]any{"query": question}))
	if code != 400 || !strings.Contains(string(b), "CONTEXT_TOO_LONG") {
		t.Errorf("/v1/query: %d %.400s; want 400 CONTEXT_TOO_LONG", code, b)
	}
	code, b = post(t, base+"/v1/chat/completions", mustJSON(t, map[string]any{"model": modelName(t, base),
		"messages": []any{map[string]any{"role": "user", "content": question}}}))
	if code != 400 || !strings.Contains(string(b), `"code":"context_length_exceeded"`) {
		t.Errorf("/v1/chat/completions: %d %.400s; want 400 context_length_exceeded", code, b)
	}
}
