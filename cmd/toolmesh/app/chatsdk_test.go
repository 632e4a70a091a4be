package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// sdkToken is the API key the SDK tests give the mesh (an API token is an OpenAI API key).
const sdkToken = "sk-toolmesh-sdk-test-token-0123456789"

// startSDKMesh is the chat tests' mesh with an API token, and a rate limit that the tests use up
// on purpose at the end (each question spends a request and a unit per tool call).
func startSDKMesh(t *testing.T) *mesh {
	t.Helper()
	t.Setenv("TOOLMESH_API_TOKENS", "app:"+sdkToken)
	m := startMeshToken(t, sdkToken, "--api.rate-limit=0.2", "--api.rate-burst=80", "--api.auth-failures-per-minute=0")
	chatScripts(m)
	return m
}

// exhaust spends the token's rate limit until a request is refused with 429.
func exhaust(t *testing.T, base string) {
	t.Helper()
	for range 200 {
		if code, _ := do(t, sdkToken, http.MethodGet, base+"/v1/models", ""); code == http.StatusTooManyRequests {
			return
		}
	}
	t.Fatal("the rate limit never refused a request")
}

// jsStep is one line the openai npm SDK runner (services/api/openaiface/testdata/jsclient)
// printed.
type jsStep struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Chunks []struct {
		Choices []struct {
			Delta struct {
				Content *string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		Toolmesh *struct {
			Event string `json:"event"`
		} `json:"toolmesh"`
	} `json:"chunks"`
	Error *struct {
		Class      string   `json:"class"`
		Status     int      `json:"status"`
		Message    string   `json:"message"`
		Type       string   `json:"type"`
		Param      string   `json:"param"`
		Code       string   `json:"code"`
		InstanceOf []string `json:"instanceof"`
	} `json:"error"`
}

// runJS runs the npm SDK runner with a plan of steps against base and returns a line per step.
func runJS(t *testing.T, sdk []string, base, key string, steps ...any) []jsStep {
	t.Helper()
	script := nodeScript(t, filepath.Join("..", "..", "..", "services", "api", "openaiface", "testdata", "jsclient", "client.mjs"), sdk[1])
	plan, err := json.Marshal(map[string]any{"base_url": base + "/v1", "api_key": key, "steps": steps})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sdk[0], script)
	cmd.Stdin = strings.NewReader(string(plan))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, stderr.String())
	}
	var lines []jsStep
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var s jsStep
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("runner line %q: %v", l, err)
		}
		lines = append(lines, s)
	}
	if len(lines) != len(steps) {
		t.Fatalf("%d lines for %d steps:\n%s\n%s", len(lines), len(steps), out, stderr.String())
	}
	return lines
}

func (s jsStep) completion(t *testing.T) chatCompletion {
	t.Helper()
	if !s.OK {
		t.Fatalf("the SDK threw: %+v", s.Error)
	}
	c := decodeChat(t, s.Result)
	if len(c.Choices) != 1 {
		t.Fatalf("completion %s", s.Result)
	}
	return c
}

// TestChatOpenAINodeSDK uses the mesh from the official openai npm SDK (pinned in
// services/api/openaiface/testdata/jsclient): a completion, a stream reassembled by the SDK's
// own helper (text, and a caller's function call from its deltas), a three-turn conversation,
// a caller's function round trip, the model list, and the SDK's error classes for a bad key, a
// bad parameter, an unknown model and a rate limit.
func TestChatOpenAINodeSDK(t *testing.T) {
	sdk := testbackend.OpenAISDK.Need(t)
	m := startSDKMesh(t)
	model := modelNameAs(t, m.base, sdkToken)
	user := func(s string) map[string]any { return map[string]any{"role": "user", "content": s} }
	weather := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}
	ask := func(msgs ...any) map[string]any {
		return map[string]any{"op": "create", "params": map[string]any{"model": model, "messages": msgs}}
	}

	steps := runJS(t, sdk, m.base, sdkToken,
		ask(user("What is 2 plus 3?")),
		map[string]any{"op": "stream", "params": map[string]any{"model": model, "messages": []any{user("What is 2 plus 3?")},
			"stream_options": map[string]any{"include_usage": true}}},
		ask(user("What is 2 plus 3?"), map[string]any{"role": "assistant", "content": "2 plus 3 is 5."}, user("Now multiply that by 4.")),
		ask(user("What is 2 plus 3?"), map[string]any{"role": "assistant", "content": "2 plus 3 is 5."}, user("Now multiply that by 4."),
			map[string]any{"role": "assistant", "content": "That times 4 is 20."}, user("And subtract 1.")),
		map[string]any{"op": "stream", "params": map[string]any{"model": model, "messages": []any{user("What is the weather in Paris?")}, "tools": []any{weather}}},
		map[string]any{"op": "models"},
		map[string]any{"op": "model", "id": model},
	)
	if got := steps[0].completion(t).content(); got != "2 plus 3 is 5." {
		t.Errorf("completion: %q", got)
	}
	streamed := steps[1].completion(t)
	if streamed.content() != "2 plus 3 is 5." || streamed.Usage.TotalTokens == 0 {
		t.Errorf("stream reassembled by the SDK: %q usage %+v", streamed.content(), streamed.Usage)
	}
	var events []string
	for _, c := range steps[1].Chunks {
		if c.Toolmesh != nil {
			events = append(events, c.Toolmesh.Event)
		}
	}
	if !strings.Contains(strings.Join(events, ","), "tool_call_finished") {
		t.Errorf("the SDK's chunks lost the toolmesh events: %v", events)
	}
	if got := steps[2].completion(t).content(); got != "That times 4 is 20." {
		t.Errorf("second turn: %q", got)
	}
	if got := steps[3].completion(t).content(); got != "It is 19 now." {
		t.Errorf("third turn: %q", got)
	}
	fn := steps[4].completion(t)
	calls := fn.Choices[0].Message.ToolCalls
	if fn.Choices[0].FinishReason != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city":"Paris"}` {
		t.Fatalf("streamed function call reassembled by the SDK: %s", steps[4].Result)
	}
	if !strings.Contains(string(steps[5].Result), `"id":"`+model+`"`) || !strings.Contains(string(steps[6].Result), `"object":"model"`) {
		t.Errorf("models %s, model %s", steps[5].Result, steps[6].Result)
	}

	// The caller runs its function and goes on with the result, sending the assistant's message
	// back as the SDK gave it (messages.push(completion.choices[0].message)), once from the
	// stream helper's final completion and once from a plain one.
	var streamedMsg struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(steps[4].Result, &streamedMsg); err != nil {
		t.Fatal(err)
	}
	plain := runJS(t, sdk, m.base, sdkToken, map[string]any{"op": "create", "params": map[string]any{"model": model,
		"messages": []any{user("What is the weather in Paris?")}, "tools": []any{weather}}})
	var plainMsg struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(plain[0].Result, &plainMsg); err != nil {
		t.Fatal(err)
	}
	plainCall := plain[0].completion(t).Choices[0].Message.ToolCalls[0]
	done := runJS(t, sdk, m.base, sdkToken,
		ask(user("What is the weather in Paris?"), streamedMsg.Choices[0].Message, map[string]any{"role": "tool", "tool_call_id": calls[0].ID, "content": "rainy"}),
		ask(user("What is the weather in Paris?"), plainMsg.Choices[0].Message, map[string]any{"role": "tool", "tool_call_id": plainCall.ID, "content": "hail"}))
	if got := done[0].completion(t).content(); got != "In Paris it is rainy." {
		t.Errorf("after the function's result (the stream's message sent back): %q", got)
	}
	if got := done[1].completion(t).content(); got != "In Paris it is hail." {
		t.Errorf("after the function's result (the completion's message sent back): %q", got)
	}

	// Each failure raises the SDK's own class.
	bad := runJS(t, sdk, m.base, "sk-wrong-key-wrong-key-wrong-key-0123", ask(user("What is 2 plus 3?")))
	checkJSError(t, "bad key", bad[0], "AuthenticationError", 401, "")
	bad = runJS(t, sdk, m.base, sdkToken,
		map[string]any{"op": "create", "params": map[string]any{"model": model, "messages": []any{user("hi")}, "temperature": 7}},
		map[string]any{"op": "create", "params": map[string]any{"model": "gpt-4o", "messages": []any{user("What is 2 plus 3?")}}},
		map[string]any{"op": "model", "id": "gpt-4o"})
	checkJSError(t, "bad parameter", bad[0], "BadRequestError", 400, "temperature")
	checkJSError(t, "unknown model", bad[1], "NotFoundError", 404, "model")
	checkJSError(t, "unknown model retrieved", bad[2], "NotFoundError", 404, "model")
	exhaust(t, m.base)
	limited := runJS(t, sdk, m.base, sdkToken, ask(user("What is 2 plus 3?")))
	checkJSError(t, "rate limit", limited[0], "RateLimitError", 429, "")

	// A mesh whose model does not answer: the SDK's server error, with what to do in its message.
	down := startApp(t, sdkToken, meshArgs(), allTargets...)
	failed := runJS(t, sdk, down, sdkToken, map[string]any{"op": "create",
		"params": map[string]any{"model": modelNameAs(t, down, sdkToken), "messages": []any{user("What is 2 plus 3?")}}})
	checkJSError(t, "model down", failed[0], "InternalServerError", 503, "")
	if !strings.Contains(failed[0].Error.Message, "llama-server") {
		t.Errorf("model down: %q does not say what to start", failed[0].Error.Message)
	}
}

func checkJSError(t *testing.T, what string, s jsStep, class string, status int, param string) {
	t.Helper()
	if s.OK || s.Error == nil {
		t.Errorf("%s: the SDK did not throw: %s", what, s.Result)
		return
	}
	e := s.Error
	if e.Class != class || e.Status != status || e.Param != param || len(e.InstanceOf) == 0 || e.InstanceOf[0] != class || e.Message == "" {
		t.Errorf("%s: threw %+v, want %s %d param %q", what, *e, class, status, param)
	}
}

// TestChatOpenAIGoSDK uses the mesh from github.com/openai/openai-go/v3: a completion, a
// stream through the SDK's ChatCompletionAccumulator, a caller's function round trip with the
// message turned back into a parameter by the SDK, and the SDK's *openai.Error for a bad key, a
// bad parameter, an unknown model and a rate limit.
func TestChatOpenAIGoSDK(t *testing.T) {
	m := startSDKMesh(t)
	model := modelNameAs(t, m.base, sdkToken)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(m.base+"/v1"), option.WithAPIKey(sdkToken), option.WithMaxRetries(0))

	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is 2 plus 3?")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "2 plus 3 is 5." || resp.Usage.TotalTokens == 0 {
		t.Errorf("completion %q usage %+v", resp.Choices[0].Message.Content, resp.Usage)
	}
	if ext, ok := resp.JSON.ExtraFields["toolmesh"]; !ok || !strings.Contains(ext.Raw(), "calculator.add") {
		t.Errorf("the extension is not in the SDK's extra fields: %v", resp.JSON.ExtraFields)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is 2 plus 3?")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("the accumulator refused a chunk: %s", stream.Current().RawJSON())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != "2 plus 3 is 5." || acc.Choices[0].FinishReason != "stop" || acc.Usage.TotalTokens == 0 {
		t.Errorf("accumulated %q finish %q usage %+v", acc.Choices[0].Message.Content, acc.Choices[0].FinishReason, acc.Usage)
	}

	params := openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Description: openai.String("The weather in a city."),
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
		})}}
	resp, err = client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Choices[0].Message.ToolCalls
	if resp.Choices[0].FinishReason != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_weather" {
		t.Fatalf("function call: %s", resp.RawJSON())
	}
	params.Messages = append(params.Messages, resp.Choices[0].Message.ToParam(), openai.ToolMessage("foggy", calls[0].ID))
	resp, err = client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "In Paris it is foggy." {
		t.Errorf("after the function's result: %q", resp.Choices[0].Message.Content)
	}

	checkGoError := func(what string, err error, status int, param string) {
		t.Helper()
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Errorf("%s: %v is not an *openai.Error", what, err)
			return
		}
		if apiErr.StatusCode != status || apiErr.Param != param || apiErr.Message == "" {
			t.Errorf("%s: status %d param %q message %q, want %d %q", what, apiErr.StatusCode, apiErr.Param, apiErr.Message, status, param)
		}
	}
	ask := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is 2 plus 3?")}}
	wrong := openai.NewClient(option.WithBaseURL(m.base+"/v1"), option.WithAPIKey("sk-wrong-key-wrong-key-wrong-key-0123"), option.WithMaxRetries(0))
	_, err = wrong.Chat.Completions.New(ctx, ask)
	checkGoError("bad key", err, 401, "")
	badTemp := ask
	badTemp.Temperature = openai.Float(7)
	_, err = client.Chat.Completions.New(ctx, badTemp)
	checkGoError("bad parameter", err, 400, "temperature")
	unknown := ask
	unknown.Model = "gpt-4o"
	_, err = client.Chat.Completions.New(ctx, unknown)
	checkGoError("unknown model", err, 404, "model")
	_, err = client.Models.Get(ctx, "gpt-4o")
	checkGoError("unknown model retrieved", err, 404, "model")
	page, err := client.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != model {
		t.Errorf("models %+v: %v", page, err)
	}
	exhaust(t, m.base)
	_, err = client.Chat.Completions.New(ctx, ask)
	checkGoError("rate limit", err, 429, "")
}

// TestChatRealLlamaServer runs chat completions through the whole mesh against a real
// llama-server (the tiny random-weight model: real protocol, real grammar-constrained decoding,
// meaningless text), from openai-go: a two-turn conversation with sampling options, a stop
// string and a token bound, not streamed and streamed. It checks what a random model cannot
// change: the wire format, the bounds, the usage, the trace, the end of the stream.
func TestChatRealLlamaServer(t *testing.T) {
	srv := llamatest.StartServer(t, llamatest.ServerOptions{CtxSize: 4096})
	base := startApp(t, "", meshArgs("--llm-url="+srv.URL, "--api.query-timeout=60s"), allTargets...)
	model := modelName(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("Answer briefly."), openai.UserMessage("What is 2 plus 3?"),
			openai.AssistantMessage("5."), openai.UserMessage("And 4 plus 4?")},
		Temperature: openai.Float(0.7), TopP: openai.Float(0.9), Seed: openai.Int(42),
		MaxCompletionTokens: openai.Int(12), Stop: openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"\n\n"}}}
	opts := []option.RequestOption{option.WithJSONSet("toolmesh", map[string]any{"max_iterations": 2})}

	resp, err := client.Chat.Completions.New(ctx, params, opts...)
	if err != nil {
		t.Fatalf("completion: %v", err)
	}
	t.Logf("completion: %s", resp.RawJSON())
	ch := resp.Choices[0]
	if resp.Model != model || resp.Usage.PromptTokens == 0 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens ||
		!slices.Contains([]string{"stop", "length", "tool_calls"}, string(ch.FinishReason)) || strings.Contains(ch.Message.Content, "\n\n") {
		t.Errorf("completion %s", resp.RawJSON())
	}
	var ext struct {
		TraceID string `json:"trace_id"`
		Steps   []struct {
			History struct {
				Turns int `json:"turns"`
			} `json:"history"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(resp.JSON.ExtraFields["toolmesh"].Raw()), &ext); err != nil || ext.TraceID == "" || len(ext.Steps) == 0 || ext.Steps[0].History.Turns != 1 {
		t.Errorf("extension %s: %v", resp.JSON.ExtraFields["toolmesh"].Raw(), err)
	}
	if ch.FinishReason == "stop" && ch.Message.Content == "" && len(ch.Message.ToolCalls) == 0 {
		t.Errorf("an empty answer that says it stopped: %s", resp.RawJSON())
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params, opts...)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		chunks++
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("the accumulator refused chunk %d: %s", chunks, stream.Current().RawJSON())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(acc.Choices) != 1 || acc.Usage.PromptTokens == 0 || acc.Model != model ||
		!slices.Contains([]string{"stop", "length", "tool_calls"}, string(acc.Choices[0].FinishReason)) {
		t.Errorf("streamed completion after %d chunks: %+v", chunks, acc.ChatCompletion)
	}
}
