package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/toolid/toolname"
	"github.com/toolmesh/toolmesh/services/inference/chat/chattest"
	"github.com/toolmesh/toolmesh/services/inference/llmhttp"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func mustStruct(t testing.TB, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func weatherTools(t testing.TB) []*toolmeshv1.Tool {
	return []*toolmeshv1.Tool{
		{Id: "weather.get_forecast", Server: "weather", Name: "get_forecast", Description: "Forecast for a city.",
			InputSchema: mustStruct(t, map[string]any{"type": "object",
				"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}},
				"required":   []any{"city"}})},
		{Id: "files.read-file", Title: "Read a file"},
	}
}

func newTestClient(t testing.TB, url string, cfg Config) (*Client, *bytes.Buffer) {
	t.Helper()
	cfg.URL = url
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	var logs bytes.Buffer
	c, err := New(cfg, nil, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, &logs
}

func history(t testing.TB) []*toolmeshv1.ToolCallRecord {
	return []*toolmeshv1.ToolCallRecord{
		{Tool: "weather.get_forecast", Arguments: mustStruct(t, map[string]any{"city": "Paris", "days": 2}), Output: `{"temp":21}`, Step: 1},
		{Tool: "weather.get_forecast", Arguments: mustStruct(t, map[string]any{"city": "Oslo"}), Output: `{"temp":3}`, Step: 1},
		{Tool: "files.read-file", Output: "no such file", IsError: true, Step: 2},
		{Tool: "gone.tool", Output: "x"}, // not offered any more; step 0: its own turn
	}
}

func TestRequestGolden(t *testing.T) {
	c, _ := newTestClient(t, "http://127.0.0.1:1", Config{Model: "qwen2.5-7b-instruct", Temperature: new(0.0), MaxTokens: 300})
	body, names, err := c.BuildRequest(Request{Query: "What is the weather in Paris?", Tools: weatherTools(t), History: history(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "request.golden.json", body)
	if id, _ := names.ID("gone__tool"); id != "gone.tool" {
		t.Errorf("history-only tool not mapped back: %q", id)
	}
	if c.Endpoint() != "http://127.0.0.1:1/v1/chat/completions" {
		t.Errorf("endpoint %s", c.Endpoint())
	}

	// No tools: neither tools nor tool_choice are sent (OpenAI refuses tool_choice without tools).
	body, _, err = c.BuildRequest(Request{Query: "hi", MaxTokens: 7})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(body); got != `{"model":"qwen2.5-7b-instruct","messages":[{"role":"user","content":"hi"}],"max_tokens":7,"temperature":0,"stream":false}` {
		t.Errorf("no-tools body = %s", got)
	}
	if _, _, err := c.BuildRequest(Request{Query: "q", Tools: []*toolmeshv1.Tool{{Id: "a.b"}, {Id: "a.b"}}}); err == nil {
		t.Error("a tool offered twice was accepted")
	}
}

// checkGolden compares a request body, indented, with testdata/name (-update rewrites it).
func checkGolden(t *testing.T, name string, body []byte) {
	t.Helper()
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, body, "", "  "); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(pretty.Bytes(), want) {
		t.Errorf("request body differs from %s (-update rewrites it):\n%s", golden, pretty.Bytes())
	}
}

func TestEndpointFromBaseURL(t *testing.T) {
	for url, want := range map[string]string{
		"http://h:8080":        "http://h:8080/v1/chat/completions",
		"http://h:8080/":       "http://h:8080/v1/chat/completions",
		"http://h:11434/v1":    "http://h:11434/v1/chat/completions",
		"https://h/openai/v1/": "https://h/openai/v1/chat/completions",
		"http://h/prefix":      "http://h/prefix/v1/chat/completions",
	} {
		c, _ := newTestClient(t, url, Config{})
		if c.Endpoint() != want {
			t.Errorf("%s: endpoint %s, want %s", url, c.Endpoint(), want)
		}
	}
}

func TestHistoryMessages(t *testing.T) {
	names := toolname.New("weather.get_forecast", "files.read-file")
	msgs, err := historyMessages(history(t), names, nil)
	if err != nil {
		t.Fatal(err)
	}
	type m struct {
		role string
		ids  []string
	}
	var got []m
	for _, x := range msgs {
		e := m{role: x.Role}
		for _, tc := range x.ToolCalls {
			e.ids = append(e.ids, tc.ID+"="+tc.Function.Name+tc.Function.Arguments)
		}
		if x.Role == "tool" {
			e.ids = []string{x.ToolCallID + "=" + *x.Content}
		}
		got = append(got, e)
	}
	want := []m{
		{"assistant", []string{`call_1=weather__get_forecast{"city":"Paris","days":2}`, `call_2=weather__get_forecast{"city":"Oslo"}`}},
		{"tool", []string{`call_1={"temp":21}`}},
		{"tool", []string{`call_2={"temp":3}`}},
		{"assistant", []string{`call_3=files__read-file{}`}},
		{"tool", []string{"call_3=Error: no such file"}},
		{"assistant", []string{`call_4=gone__tool{}`}},
		{"tool", []string{"call_4=x"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("messages:\n got %v\nwant %v", got, want)
	}
	if _, err := historyMessages([]*toolmeshv1.ToolCallRecord{{Output: "x"}}, names, nil); err == nil {
		t.Error("a record without a tool was accepted")
	}
}

func TestGenerateAgainstDouble(t *testing.T) {
	d := chattest.NewDouble(t, chattest.Reply{
		ContentNull: true,
		ToolCalls: []chattest.ToolCall{
			{ID: "call_a", Name: "weather__get_forecast", Arguments: `{"city":"Paris","days":3,"opts":{"units":["C"],"x":null,"ok":true}}`},
			{ID: "call_b", Name: "files__read-file", Arguments: ``},
		},
		PromptTokens: 120, CompletionTokens: 31,
	}, chattest.Reply{Content: "It is sunny in Paris.", PromptTokens: 200, CompletionTokens: 6})
	c, _ := newTestClient(t, d.URL, Config{})
	ctx := t.Context()

	res, err := c.Generate(ctx, Request{Query: "Weather in Paris?", Tools: weatherTools(t), History: history(t)})
	if err != nil {
		t.Fatal(err)
	}
	want := []Call{
		{ToolID: "weather.get_forecast", CallID: "call_a", Arguments: map[string]any{"city": "Paris", "days": 3.0,
			"opts": map[string]any{"units": []any{"C"}, "x": nil, "ok": true}}},
		{ToolID: "files.read-file", CallID: "call_b", Arguments: map[string]any{}},
	}
	if !reflect.DeepEqual(res.Calls, want) || res.Answer != "" || res.FinishReason != "tool_calls" ||
		res.PromptTokens != 120 || res.CompletionTokens != 31 {
		t.Errorf("Generate = %+v", res)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(res.RawOutput), &raw); err != nil || raw["role"] != "assistant" || raw["tool_calls"] == nil {
		t.Errorf("RawOutput = %s (%v)", res.RawOutput, err)
	}
	// The arguments become a structpb.Struct for the service's answer.
	if _, err := structpb.NewStruct(res.Calls[0].Arguments); err != nil {
		t.Errorf("arguments do not convert to structpb: %v", err)
	}

	res, err = c.Generate(ctx, Request{Query: "Weather in Paris?", Tools: weatherTools(t), MaxTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "It is sunny in Paris." || len(res.Calls) != 0 || res.FinishReason != "stop" || res.PromptTokens != 200 {
		t.Errorf("Generate = %+v", res)
	}
	reqs := d.Requests()
	var last struct {
		MaxTokens  int    `json:"max_tokens"`
		ToolChoice string `json:"tool_choice"`
		Model      string `json:"model"`
	}
	_ = json.Unmarshal(reqs[len(reqs)-1], &last)
	if last.MaxTokens != 64 || last.ToolChoice != "auto" || last.Model != "test-model" {
		t.Errorf("request: %s", reqs[len(reqs)-1])
	}
}

func TestArguments(t *testing.T) {
	for _, tc := range []struct {
		name, args, finish string
		call               string
		want               map[string]any
		code               codes.Code
		errHas             []string
	}{
		{name: "object in a string", args: `{"city":"Oslo"}`, want: map[string]any{"city": "Oslo"}},
		{name: "empty string", args: ``, want: map[string]any{}},
		{name: "null in a string", args: `null`, want: map[string]any{}},
		{name: "big integer stays exact", args: `{"n":12345678901234567890}`, want: map[string]any{"n": 1.2345678901234567e19}},
		{name: "invalid JSON", args: `{"city":"Oslo"`, code: codes.Internal, errHas: []string{`tool call 0 ("weather__get_forecast", id "call_x")`, "not valid JSON"}},
		{name: "trailing text", args: `{"a":1} {"b":2}`, code: codes.Internal, errHas: []string{"text after the object"}},
		{name: "not an object", args: `[1,2]`, code: codes.Internal, errHas: []string{"not a JSON object"}},
		{name: "cut off", args: `{"city":"Os`, finish: "length", code: codes.ResourceExhausted, errHas: []string{"cut off", "max_tokens"}},
		{name: "unknown function", call: "weather.get_forecast", args: `{}`, code: codes.Internal, errHas: []string{`"weather.get_forecast"`, "not offered"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := tc.call
			if call == "" {
				call = "weather__get_forecast"
			}
			d := chattest.NewDouble(t, chattest.Reply{FinishReason: tc.finish,
				ToolCalls: []chattest.ToolCall{{ID: "call_x", Name: call, Arguments: tc.args}}})
			c, _ := newTestClient(t, d.URL, Config{})
			res, err := c.Generate(t.Context(), Request{Query: "q", Tools: weatherTools(t)})
			if tc.errHas == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(res.Calls[0].Arguments, tc.want) {
					t.Errorf("arguments %#v, want %#v", res.Calls[0].Arguments, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; result %+v", res)
			}
			if Code(err) != tc.code || status.Code(err) != tc.code {
				t.Errorf("code %v, want %v: %v", Code(err), tc.code, err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
	// Arguments given as an object (some servers) are read too.
	d := chattest.NewDouble(t, chattest.Reply{Raw: `{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"weather__get_forecast","arguments":{"city":"Rome"}}}]},"finish_reason":"tool_calls"}]}`})
	c, _ := newTestClient(t, d.URL, Config{})
	res, err := c.Generate(t.Context(), Request{Query: "q", Tools: weatherTools(t)})
	if err != nil || res.Calls[0].Arguments["city"] != "Rome" {
		t.Errorf("object arguments: %+v, %v", res, err)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reply    chattest.Reply
		code     codes.Code
		sentinel error
		has      string
	}{
		{"llama.cpp loading", chattest.Reply{Status: 503, Body: `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`}, codes.Unavailable, llmhttp.ErrNotReady, `"Loading model"`},
		{"llama.cpp --no-jinja", chattest.Reply{Status: 500, Body: `{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}`}, codes.InvalidArgument, nil, "start"},
		{"503 bare", chattest.Reply{Status: 503, Body: `upstream down`}, codes.Unavailable, nil, "upstream down"},
		{"llama.cpp bad request", chattest.Reply{Status: 400, Body: `{"error":{"code":400,"message":"tools param requires --jinja flag","type":"invalid_request_error"}}`}, codes.InvalidArgument, nil, "requires --jinja"},
		{"llama.cpp context", chattest.Reply{Status: 400, Body: `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`}, codes.ResourceExhausted, llmhttp.ErrContextExceeded, "exceeds the available context size"},
		{"OpenAI context", chattest.Reply{Status: 400, Body: chattest.APIErrorBody("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.", "invalid_request_error", "context_length_exceeded")}, codes.ResourceExhausted, llmhttp.ErrContextExceeded, "maximum context length"},
		{"vLLM old shape", chattest.Reply{Status: 400, Body: `{"object":"error","message":"This model's maximum context length is 2048 tokens.","type":"BadRequestError","param":null,"code":400}`}, codes.ResourceExhausted, llmhttp.ErrContextExceeded, "2048"},
		{"OpenAI 401", chattest.Reply{Status: 401, Body: chattest.APIErrorBody("Incorrect API key provided.", "invalid_request_error", "invalid_api_key")}, codes.Unauthenticated, nil, "Incorrect API key"},
		{"429", chattest.Reply{Status: 429, Body: chattest.APIErrorBody("Rate limit reached", "requests", "rate_limit_exceeded")}, codes.ResourceExhausted, nil, "Rate limit"},
		{"Ollama model missing", chattest.Reply{Status: 404, Body: chattest.APIErrorBody(`model "llama9" not found, try pulling it first`, "api_error", nil)}, codes.NotFound, nil, "try pulling"},
		{"Ollama native", chattest.Reply{Status: 500, Body: `{"error":"something broke"}`}, codes.Internal, nil, "something broke"},
		{"200 not JSON", chattest.Reply{Raw: `<html>proxy</html>`}, codes.Unavailable, nil, "<html>proxy</html>"},
		{"200 no choices", chattest.Reply{Raw: `{"choices":[]}`}, codes.Unavailable, nil, "no choices[0].message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := chattest.NewDouble(t, tc.reply)
			c, _ := newTestClient(t, d.URL, Config{})
			_, err := c.Generate(t.Context(), Request{Query: "q", Tools: weatherTools(t)})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not *Error", err)
			}
			if Code(err) != tc.code || status.Code(err) != tc.code {
				t.Errorf("code %v, want %v: %v", Code(err), tc.code, err)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Errorf("%v does not match %v", err, tc.sentinel)
			}
			// A context overflow is told from a rate limit (both RESOURCE_EXHAUSTED) by its reason.
			if tooLong := errreason.Of(err) == errreason.ContextTooLong; tooLong != (tc.sentinel == llmhttp.ErrContextExceeded) {
				t.Errorf("reason %q: want %s exactly for a context overflow", errreason.Of(err), errreason.ContextTooLong)
			}
			if !strings.Contains(err.Error(), tc.has) {
				t.Errorf("error %q does not quote %q", err, tc.has)
			}
		})
	}

	t.Run("connection refused", func(t *testing.T) {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := l.Addr().String()
		l.Close()
		c, _ := newTestClient(t, "http://"+addr, Config{})
		_, err := c.Generate(t.Context(), Request{Query: "q"})
		if Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("got %v (%v)", err, Code(err))
		}
	})
	t.Run("timeout", func(t *testing.T) {
		d := chattest.NewDouble(t, chattest.Reply{Delay: 5 * time.Second})
		c, _ := newTestClient(t, d.URL, Config{Timeout: 100 * time.Millisecond})
		_, err := c.Generate(t.Context(), Request{Query: "q"})
		if Code(err) != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after 100ms") {
			t.Errorf("got %v (%v)", err, Code(err))
		}
	})
	t.Run("canceled", func(t *testing.T) {
		d := chattest.NewDouble(t, chattest.Reply{Delay: 5 * time.Second})
		c, _ := newTestClient(t, d.URL, Config{})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Generate(ctx, Request{Query: "q"})
		if Code(err) != codes.DeadlineExceeded {
			t.Errorf("caller deadline: got %v (%v)", err, Code(err))
		}
		ctx2, cancel2 := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel2)
		_, err = c.Generate(ctx2, Request{Query: "q"})
		if Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
			t.Errorf("cancel: got %v (%v)", err, Code(err))
		}
	})
	t.Run("the double refuses what servers refuse", func(t *testing.T) {
		d := chattest.NewDouble(t)
		body := `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"tool","tool_call_id":"nope","content":"x"}]}`
		resp, err := http.Post(d.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("unmatched tool_call_id: status %d", resp.StatusCode)
		}
	})
}

func TestKeyNeverInErrors(t *testing.T) {
	const key = "sk-secret-123456"
	d := chattest.NewDouble(t)
	d.APIKey = key
	// Right key: works.
	c, logs := newTestClient(t, d.URL, Config{APIKey: key})
	if _, err := c.Generate(t.Context(), Request{Query: "q"}); err != nil {
		t.Fatal(err)
	}
	// A server that echoes the key back in its error.
	d.Script(chattest.Reply{Status: 400, Body: chattest.APIErrorBody("bad header Authorization: Bearer "+key, "invalid_request_error", nil)})
	_, err := c.Generate(t.Context(), Request{Query: "q"})
	if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("echoed key: %v", err)
	}
	// Wrong key: 401 Unauthenticated, and neither key appears.
	c2, logs2 := newTestClient(t, d.URL, Config{APIKey: "sk-wrong-987654"})
	_, err = c2.Generate(t.Context(), Request{Query: "q"})
	if Code(err) != codes.Unauthenticated || strings.Contains(err.Error(), "sk-wrong") || !strings.Contains(err.Error(), "Invalid API Key") {
		t.Errorf("wrong key: %v (%v)", err, Code(err))
	}
	// Unreachable server whose URL carries the key: the transport error is redacted too.
	c3, logs3 := newTestClient(t, "http://127.0.0.1:1/"+key, Config{APIKey: key})
	_, err = c3.Generate(t.Context(), Request{Query: "q"})
	if err == nil || strings.Contains(err.Error(), key) {
		t.Errorf("unreachable: %v", err)
	}
	for _, l := range []*bytes.Buffer{logs, logs2, logs3} {
		if strings.Contains(l.String(), key) || strings.Contains(l.String(), "sk-wrong") {
			t.Errorf("a key was logged: %s", l)
		}
	}
	if s := (&Error{Op: "chat", Message: "x"}).Error(); strings.Contains(s, key) {
		t.Error(s)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{URL: "http://h:1", Model: "m"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"no url":           {func(c *Config) { c.URL = "" }, "URL: required"},
		"bad scheme":       {func(c *Config) { c.URL = "ftp://h" }, "scheme"},
		"no host":          {func(c *Config) { c.URL = "http://" }, "no host"},
		"password hidden":  {func(c *Config) { c.URL = "http://u:pw@/x" }, "xxxxx"},
		"no model":         {func(c *Config) { c.Model = " " }, "Model: required"},
		"neg timeout":      {func(c *Config) { c.Timeout = -1 }, "Timeout"},
		"neg max tokens":   {func(c *Config) { c.MaxTokens = -1 }, "MaxTokens"},
		"temperature":      {func(c *Config) { c.Temperature = new(3.0) }, "Temperature"},
		"key newline":      {func(c *Config) { c.APIKey = "a\nb" }, "APIKey"},
		"key in the query": {func(c *Config) { c.URL = "http://h:1/v1?api_key=pw-secret" }, "TOOLMESH_LLM_API_KEY"},
	} {
		c := ok
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "pw") {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
		if _, err := New(c, nil, nil); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	c, err := New(ok, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Config().Timeout != DefaultTimeout || c.Config().MaxTokens != DefaultMaxTokens {
		t.Errorf("defaults: %+v", c.Config())
	}
}
