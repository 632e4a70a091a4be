package openaiface

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// agentDouble is a test double of the api's AgentService client: it records the native request
// each completion became and answers with a canned result, or a canned stream of events.
type agentDouble struct {
	mu      sync.Mutex
	queries []*toolmeshv1.QueryRequest
	streams []*toolmeshv1.QueryStreamRequest
	md      []metadata.MD
	resp    *toolmeshv1.QueryResponse
	err     error
	header  metadata.MD
	events  []*toolmeshv1.QueryStreamResponse
	// failAfter ends the stream with err after that many events (with events sent first).
	failAfter int
	models    []*toolmeshv1.Model
}

func (a *agentDouble) Query(ctx context.Context, in *toolmeshv1.QueryRequest, opts ...grpc.CallOption) (*toolmeshv1.QueryResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	md, _ := metadata.FromOutgoingContext(ctx)
	a.queries, a.md = append(a.queries, in), append(a.md, md)
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok && a.header != nil {
			*h.HeaderAddr = a.header
		}
	}
	if a.err != nil {
		return nil, a.err
	}
	return proto.Clone(a.resp).(*toolmeshv1.QueryResponse), nil
}

func (a *agentDouble) QueryStream(ctx context.Context, in *toolmeshv1.QueryStreamRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.QueryStreamResponse], error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.streams = append(a.streams, in)
	evs := a.events
	err := a.err
	if err != nil && a.failAfter > 0 {
		evs = evs[:a.failAfter]
	} else if err == nil {
		evs = append(evs, &toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_Done{Done: a.resp}})
	}
	return &streamDouble{ctx: ctx, events: evs, err: err, header: a.header}, nil
}

func (a *agentDouble) ListModels(context.Context, *toolmeshv1.ListModelsRequest, ...grpc.CallOption) (*toolmeshv1.ListModelsResponse, error) {
	return &toolmeshv1.ListModelsResponse{Models: a.models}, nil
}

// streamDouble plays events, then err (io.EOF when nil).
type streamDouble struct {
	grpc.ClientStream
	ctx    context.Context
	events []*toolmeshv1.QueryStreamResponse
	err    error
	header metadata.MD
}

func (s *streamDouble) Recv() (*toolmeshv1.QueryStreamResponse, error) {
	if s.ctx.Err() != nil {
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
	if len(s.events) == 0 {
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	}
	ev := s.events[0]
	s.events = s.events[1:]
	return ev, nil
}

func (s *streamDouble) Header() (metadata.MD, error) { return s.header, nil }

func newFace(t *testing.T, a *agentDouble) *httptest.Server {
	t.Helper()
	f := New(a, func(r *http.Request) metadata.MD {
		return metadata.Pairs("authorization", r.Header.Get("Authorization"))
	}, slog.New(slog.DiscardHandler))
	mux := http.NewServeMux()
	for _, p := range Routes {
		mux.Handle(p, f)
	}
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+chatPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func answered(answer string) *toolmeshv1.QueryResponse {
	return &toolmeshv1.QueryResponse{Answer: answer, StopReason: toolmeshv1.StopReason_STOP_REASON_ANSWERED, FinishReason: "stop",
		Iterations: 2, TraceId: "0af7651916cd43dd8448eb211c80319c", Model: "gorilla-openfunctions-v2",
		Usage:     &toolmeshv1.Usage{PromptTokens: 120, CompletionTokens: 7},
		ToolCalls: []*toolmeshv1.ToolCallRecord{{Tool: "calculator.add", Arguments: mustStruct(map[string]any{"a": 2, "b": 3}), Output: "5", Step: 1}},
		Steps: []*toolmeshv1.Step{{Number: 1, ModelOutput: "<<function>>calculator.add(a=2, b=3)",
			Retrieved: []*toolmeshv1.ScoredTool{{Tool: &toolmeshv1.Tool{Id: "calculator.add", Description: "long"}, Score: 1}}}},
	}
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

func errorOf(t *testing.T, b []byte) apiError {
	t.Helper()
	var e errorResponse
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	return e.Error
}

func str0(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

func TestChatCompletion(t *testing.T) {
	a := &agentDouble{resp: answered("2 plus 3 is 5.")}
	ts := newFace(t, a)
	resp, b := post(t, ts.URL, `{"model":"gorilla-openfunctions-v2","messages":[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":[{"type":"text","text":"What is"},{"type":"text","text":"2 plus 3?"}]}],
		"temperature":0.2,"top_p":0.9,"seed":7,"stop":"END","max_completion_tokens":64,"user":"u-1",
		"toolmesh":{"servers":["calculator"],"k":3}}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	checkSchema(t, "CreateChatCompletionResponse", b)
	var c struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage    usage `json:"usage"`
		Toolmesh struct {
			TraceID    string            `json:"trace_id"`
			StopReason string            `json:"stop_reason"`
			ToolCalls  []json.RawMessage `json:"tool_calls"`
			Steps      []json.RawMessage `json:"steps"`
		} `json:"toolmesh"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.ID, "chatcmpl-") || c.Object != "chat.completion" || c.Model != "gorilla-openfunctions-v2" {
		t.Errorf("id %q object %q model %q", c.ID, c.Object, c.Model)
	}
	if got := str0(c.Choices[0].Message.Content); got != "2 plus 3 is 5." || c.Choices[0].FinishReason != "stop" || c.Choices[0].Message.Role != "assistant" {
		t.Errorf("choice %+v content %q", c.Choices[0], got)
	}
	if c.Usage != (usage{120, 7, 127}) {
		t.Errorf("usage %+v", c.Usage)
	}
	if c.Toolmesh.TraceID == "" || c.Toolmesh.StopReason != "answered" || len(c.Toolmesh.ToolCalls) != 1 || len(c.Toolmesh.Steps) != 1 {
		t.Errorf("extension %+v", c.Toolmesh)
	}
	if strings.Contains(string(c.Toolmesh.Steps[0]), "model_output") || strings.Contains(string(c.Toolmesh.Steps[0]), "long") {
		t.Errorf("a step in the extension carries the raw model output or tool definitions: %s", c.Toolmesh.Steps[0])
	}

	q := a.queries[0]
	want := &toolmeshv1.QueryRequest{Model: "gorilla-openfunctions-v2", Servers: []string{"calculator"}, K: 3,
		Messages: []*toolmeshv1.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "What is\n2 plus 3?"}},
		Generation: &toolmeshv1.GenerationOptions{MaxTokens: 64, Temperature: proto.Float64(0.2), TopP: proto.Float64(0.9),
			Seed: proto.Int64(7), Stop: []string{"END"}}}
	if !proto.Equal(q, want) {
		t.Errorf("native query\n got %v\nwant %v", q, want)
	}
	if got := a.md[0].Get("authorization"); len(got) != 1 || got[0] != "Bearer sk-test" {
		t.Errorf("forwarded authorization %q", got)
	}
}

func TestChatFunctionCalls(t *testing.T) {
	resp := answered("")
	resp.StopReason, resp.FinishReason = toolmeshv1.StopReason_STOP_REASON_FUNCTION_CALLS, "tool_calls"
	resp.FunctionCalls = []*toolmeshv1.FunctionCall{{Id: "call_1", ToolId: "get_weather", Arguments: mustStruct(map[string]any{"city": "Paris"})}}
	a := &agentDouble{resp: resp}
	ts := newFace(t, a)
	r, b := post(t, ts.URL, `{"model":"m","messages":[{"role":"user","content":"Weather in Paris?"}],
		"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],
		"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", r.StatusCode, b)
	}
	checkSchema(t, "CreateChatCompletionResponse", b)
	var c completion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	m := c.Choices[0].Message
	if m.Content != nil || c.Choices[0].FinishReason != "tool_calls" || len(m.ToolCalls) != 1 {
		t.Fatalf("message %+v finish %q", m, c.Choices[0].FinishReason)
	}
	if tc := m.ToolCalls[0]; tc.ID != "call_1" || tc.Type != "function" || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Paris"}` {
		t.Errorf("tool call %+v", tc)
	}
	q := a.queries[0]
	if len(q.GetFunctions()) != 1 || q.GetFunctions()[0].GetParameters().GetFields()["type"].GetStringValue() != "object" ||
		q.GetToolChoice().GetMode() != toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_FUNCTION || q.GetToolChoice().GetFunction() != "get_weather" {
		t.Errorf("native functions %v tool choice %v", q.GetFunctions(), q.GetToolChoice())
	}

	// The caller's next request carries the call and its result.
	a.resp = answered("It is sunny in Paris.")
	r, b = post(t, ts.URL, `{"model":"m","messages":[{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"}]}`)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", r.StatusCode, b)
	}
	msgs := a.queries[1].GetMessages()
	if len(msgs) != 3 || msgs[1].GetToolCalls()[0].GetId() != "call_1" || msgs[1].GetToolCalls()[0].GetArguments().GetFields()["city"].GetStringValue() != "Paris" ||
		msgs[2].GetToolCallId() != "call_1" || msgs[2].GetContent() != "sunny" {
		t.Errorf("native messages %v", msgs)
	}
}

func TestChatBadInput(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, body, param, code string
	}{
		{"not JSON", `{"model":`, "", ""},
		{"not an object", `[1]`, "", ""},
		{"no model", `{` + user + `}`, "model", "missing_required_parameter"},
		{"no messages", `{"model":"m"}`, "messages", "missing_required_parameter"},
		{"empty messages", `{"model":"m","messages":[]}`, "messages", "invalid_value"},
		{"unknown parameter", `{"model":"m",` + user + `,"bogus":1}`, "bogus", "unknown_parameter"},
		{"n of 2", `{"model":"m",` + user + `,"n":2}`, "n", "unsupported_parameter"},
		{"audio", `{"model":"m",` + user + `,"audio":{"voice":"alloy","format":"mp3"}}`, "audio", "unsupported_parameter"},
		{"modalities with audio", `{"model":"m",` + user + `,"modalities":["text","audio"]}`, "modalities", "unsupported_parameter"},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "messages[0].content[0].type", "unsupported_parameter"},
		{"audio part", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_audio","input_audio":{}}]}]}`, "messages[0].content[1].type", "unsupported_parameter"},
		{"unknown role", `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`, "messages[0].role", "invalid_value"},
		{"function role", `{"model":"m","messages":[{"role":"function","name":"f","content":"hi"}]}`, "messages[0].role", "unsupported_parameter"},
		{"no role", `{"model":"m","messages":[{"content":"hi"}]}`, "messages[0].role", "missing_required_parameter"},
		{"unknown message field", `{"model":"m","messages":[{"role":"user","content":"hi","tool_call_id":"x"}]}`, "messages[0].tool_call_id", "unknown_parameter"},
		{"name", `{"model":"m","messages":[{"role":"user","name":"bob","content":"hi"}]}`, "messages[0].name", "unsupported_parameter"},
		{"content a number", `{"model":"m","messages":[{"role":"user","content":5}]}`, "messages[0].content", "invalid_value"},
		{"arguments not JSON", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{nope"}}]}]}`,
			"messages[1].tool_calls[0].function.arguments", "invalid_value"},
		{"call without id", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
			"messages[1].tool_calls[0].id", "missing_required_parameter"},
		{"custom tool", `{"model":"m",` + user + `,"tools":[{"type":"custom","custom":{"name":"x"}}]}`, "tools[0].type", "unsupported_parameter"},
		{"unknown function field", `{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f","params":{}}}]}`, "tools[0]", "invalid_value"},
		{"tool without name", `{"model":"m",` + user + `,"tools":[{"type":"function","function":{"description":"x"}}]}`, "tools[0].function.name", "missing_required_parameter"},
		{"strict tool", `{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f","strict":true}}]}`, "tools[0].function.strict", "unsupported_parameter"},
		{"tool_choice unknown function", `{"model":"m",` + user + `,"tool_choice":{"type":"function","function":{"name":"nope"}}}`, "tool_choice", "invalid_value"},
		{"tool_choice word", `{"model":"m",` + user + `,"tool_choice":"always"}`, "tool_choice", "invalid_value"},
		{"temperature too high", `{"model":"m",` + user + `,"temperature":3}`, "temperature", "invalid_value"},
		{"top_p a string", `{"model":"m",` + user + `,"top_p":"x"}`, "top_p", "invalid_value"},
		{"max_tokens zero", `{"model":"m",` + user + `,"max_tokens":0}`, "max_tokens", "invalid_value"},
		{"both max tokens", `{"model":"m",` + user + `,"max_tokens":5,"max_completion_tokens":6}`, "max_completion_tokens", "invalid_value"},
		{"five stops", `{"model":"m",` + user + `,"stop":["a","b","c","d","e"]}`, "stop", "invalid_value"},
		{"seed a float", `{"model":"m",` + user + `,"seed":1.5}`, "seed", "invalid_value"},
		{"stream_options without stream", `{"model":"m",` + user + `,"stream_options":{"include_usage":true}}`, "stream_options", "invalid_value"},
		{"store", `{"model":"m",` + user + `,"store":true}`, "store", "unsupported_parameter"},
		{"logprobs", `{"model":"m",` + user + `,"logprobs":true}`, "logprobs", "unsupported_parameter"},
		{"json mode", `{"model":"m",` + user + `,"response_format":{"type":"json_object"}}`, "response_format", "unsupported_parameter"},
		{"parallel calls off", `{"model":"m",` + user + `,"parallel_tool_calls":false}`, "parallel_tool_calls", "unsupported_parameter"},
		{"penalty", `{"model":"m",` + user + `,"presence_penalty":0.5}`, "presence_penalty", "unsupported_parameter"},
		{"deprecated functions", `{"model":"m",` + user + `,"functions":[{"name":"f"}]}`, "functions", "unsupported_parameter"},
		{"schema bomb", `{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","default":` +
			strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}}}]}`, "tools[0].function.parameters", "invalid_value"},
		{"arguments bomb", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":` +
			strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}"}}]}]}`, "messages[1].tool_calls[0].function.arguments", "invalid_value"},
		{"extension field", `{"model":"m",` + user + `,"toolmesh":{"servrs":["x"]}}`, "toolmesh", "invalid_value"},
	}
	a := &agentDouble{resp: answered("x")}
	ts := newFace(t, a)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, b := post(t, ts.URL, tc.body)
			if r.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", r.StatusCode, b)
			}
			checkSchema(t, "ErrorResponse", b)
			e := errorOf(t, b)
			if p := str0(e.Param); tc.param != "" && p != tc.param || tc.param == "" && e.Param != nil {
				t.Errorf("param %s, want %q (%s)", p, tc.param, e.Message)
			}
			if c := str0(e.Code); tc.code != "" && c != tc.code {
				t.Errorf("code %s, want %s (%s)", c, tc.code, e.Message)
			}
			if e.Type != "invalid_request_error" || e.Message == "" {
				t.Errorf("type %q message %q", e.Type, e.Message)
			}
		})
	}
	if len(a.queries) > 0 {
		t.Errorf("a bad request reached the loop: %v", a.queries)
	}
}

// TestChatErrorStatus: the loop's gRPC statuses become the HTTP statuses the OpenAI SDKs raise
// their error classes by.
func TestChatErrorStatus(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		header     metadata.MD
		status     int
		param      string
		code, kind string
		retry      string
	}{
		{"bad field", errreason.InvalidField("functions[0].name", `"calculator__add" is the name of the mesh's tool calculator.add`), nil,
			400, "tools[0].function.name", "", "invalid_request_error", ""},
		{"bad message", errreason.InvalidField("messages[2].tool_call_id", "answers no call"), nil, 400, "messages[2].tool_call_id", "", "invalid_request_error", ""},
		{"bad generation", errreason.InvalidField("generation.max_tokens", "too many"), nil, 400, "max_tokens", "", "invalid_request_error", ""},
		{"unauthenticated", status.Error(codes.Unauthenticated, "missing bearer token"), nil, 401, "", "invalid_api_key", "invalid_request_error", ""},
		{"scope", status.Error(codes.PermissionDenied, "token may not ask"), nil, 403, "", "permission_denied", "invalid_request_error", ""},
		{"unknown model", status.Error(codes.NotFound, `the model "gpt-4o" does not exist`), nil, 404, "model", "model_not_found", "invalid_request_error", ""},
		{"rate limit", status.Error(codes.ResourceExhausted, "rate limit"), metadata.Pairs("retry-after", "3"), 429, "", "rate_limit_exceeded", "requests", "3"},
		{"context", errreason.Error(codes.ResourceExhausted, errreason.ContextTooLong, "does not fit"), nil, 400, "messages", "context_length_exceeded", "invalid_request_error", ""},
		{"model down", status.Error(codes.Unavailable, "no model to answer with"), nil, 503, "", "", "server_error", ""},
		{"timeout", status.Error(codes.DeadlineExceeded, "deadline"), nil, 504, "", "", "timeout", ""},
		{"internal", status.Error(codes.Internal, "bug"), nil, 500, "", "", "server_error", ""},
		{"a bound no retry helps", status.Error(codes.ResourceExhausted, "a call is required, but no call fits max_tokens"), nil, 400, "", "", "invalid_request_error", ""},
		{"nothing to call", errreason.InvalidField("require_call", "nothing to call"), nil, 400, "tool_choice", "", "invalid_request_error", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				a := &agentDouble{err: tc.err, header: tc.header}
				ts := newFace(t, a)
				r, b := post(t, ts.URL, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":`+map[bool]string{false: "false", true: "true"}[stream]+`}`)
				if r.StatusCode != tc.status {
					t.Fatalf("stream %v: status %d, want %d: %s", stream, r.StatusCode, tc.status, b)
				}
				checkSchema(t, "ErrorResponse", b)
				e := errorOf(t, b)
				if str0(e.Param) != map[bool]string{true: tc.param, false: "<null>"}[tc.param != ""] || tc.code != "" && str0(e.Code) != tc.code || e.Type != tc.kind {
					t.Errorf("stream %v: error %+v param %s code %s", stream, e, str0(e.Param), str0(e.Code))
				}
				if got := r.Header.Get("Retry-After"); got != tc.retry {
					t.Errorf("stream %v: Retry-After %q, want %q", stream, got, tc.retry)
				}
			}
		})
	}
}

// readChunks reads a stream's events: the JSON of each data line, and whether it ended with
// [DONE].
func readChunks(t *testing.T, b []byte) ([]json.RawMessage, bool) {
	t.Helper()
	var out []json.RawMessage
	done := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		if done {
			t.Errorf("data after [DONE]: %s", data)
		}
		out = append(out, json.RawMessage(data))
	}
	return out, done
}

// assembled is what a client makes of a stream's chunks: the text, the tool calls, the finish
// reason, the usage, and the toolmesh events in order.
type assembled struct {
	text    string
	calls   []toolCall
	finish  string
	usage   *usage
	events  []string
	ids     map[string]bool
	errBody *apiError
}

func assemble(t *testing.T, chunks []json.RawMessage) assembled {
	t.Helper()
	a := assembled{ids: map[string]bool{}}
	for _, raw := range chunks {
		var c struct {
			chunk
			Error *apiError `json:"error"`
			Usage *usage    `json:"usage"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("chunk %s: %v", raw, err)
		}
		if c.Error != nil {
			a.errBody = c.Error
			continue
		}
		checkSchema(t, "CreateChatCompletionStreamResponse", raw)
		a.ids[c.ID] = true
		if c.Tool != nil {
			a.events = append(a.events, c.Tool.Event)
		}
		if c.Usage != nil {
			a.usage = c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				a.text += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				for len(a.calls) <= *tc.Index {
					a.calls = append(a.calls, toolCall{})
				}
				cur := &a.calls[*tc.Index]
				if tc.ID != "" {
					cur.ID, cur.Type = tc.ID, tc.Type
				}
				cur.Function.Name += tc.Function.Name
				cur.Function.Arguments += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				a.finish = *ch.FinishReason
			}
		}
	}
	return a
}

func streamEvents(resp *toolmeshv1.QueryResponse) []*toolmeshv1.QueryStreamResponse {
	step := resp.GetSteps()[0]
	call := resp.GetToolCalls()[0]
	return []*toolmeshv1.QueryStreamResponse{
		{Event: &toolmeshv1.QueryStreamResponse_Retrieved{Retrieved: step}},
		{Event: &toolmeshv1.QueryStreamResponse_ModelOutput{ModelOutput: step}},
		{Event: &toolmeshv1.QueryStreamResponse_ToolCallStarted{ToolCallStarted: call}},
		{Event: &toolmeshv1.QueryStreamResponse_ToolCallFinished{ToolCallFinished: call}},
		{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: "2 plus 3 "}},
		{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: "is 5."}},
	}
}

func TestChatStream(t *testing.T) {
	resp := answered("2 plus 3 is 5.")
	a := &agentDouble{resp: resp, events: streamEvents(resp)}
	ts := newFace(t, a)
	r, b := post(t, ts.URL, `{"model":"m","messages":[{"role":"user","content":"What is 2 plus 3?"}],"stream":true,"stream_options":{"include_usage":true}}`)
	if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %s: %s", r.StatusCode, r.Header.Get("Content-Type"), b)
	}
	chunks, done := readChunks(t, b)
	if !done {
		t.Fatalf("no [DONE]:\n%s", b)
	}
	got := assemble(t, chunks)
	if got.text != "2 plus 3 is 5." || got.finish != "stop" || len(got.ids) != 1 {
		t.Errorf("text %q finish %q ids %v", got.text, got.finish, got.ids)
	}
	if got.usage == nil || *got.usage != (usage{120, 7, 127}) {
		t.Errorf("usage %+v", got.usage)
	}
	want := []string{"retrieved", "model_output", "tool_call_started", "tool_call_finished", "done"}
	if strings.Join(got.events, ",") != strings.Join(want, ",") {
		t.Errorf("toolmesh events %v, want %v", got.events, want)
	}
	// The last chunk is the usage; every chunk before it says usage: null.
	var last map[string]json.RawMessage
	_ = json.Unmarshal(chunks[len(chunks)-1], &last)
	if string(last["choices"]) != "[]" || last["usage"] == nil || string(last["usage"]) == "null" {
		t.Errorf("last chunk %s", chunks[len(chunks)-1])
	}
	for _, c := range chunks[:len(chunks)-1] {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(c, &m)
		if string(m["usage"]) != "null" {
			t.Errorf("chunk before the last has usage %s", m["usage"])
		}
	}

	// Without include_usage, no chunk has a usage field.
	r, b = post(t, ts.URL, `{"model":"m","messages":[{"role":"user","content":"What is 2 plus 3?"}],"stream":true}`)
	if r.StatusCode != http.StatusOK {
		t.Fatal(r.StatusCode)
	}
	chunks, _ = readChunks(t, b)
	for _, c := range chunks {
		if bytes.Contains(c, []byte(`"usage"`)) {
			t.Errorf("usage without include_usage: %s", c)
		}
	}
}

func TestChatStreamFunctionCalls(t *testing.T) {
	resp := answered("")
	resp.StopReason, resp.FinishReason = toolmeshv1.StopReason_STOP_REASON_FUNCTION_CALLS, "tool_calls"
	resp.FunctionCalls = []*toolmeshv1.FunctionCall{
		{Id: "call_a", ToolId: "get_weather", Arguments: mustStruct(map[string]any{"city": "Paris"})},
		{Id: "call_b", ToolId: "get_time", Arguments: mustStruct(map[string]any{})},
	}
	a := &agentDouble{resp: resp, events: streamEvents(resp)[:4]}
	ts := newFace(t, a)
	r, b := post(t, ts.URL, `{"model":"m","messages":[{"role":"user","content":"Weather and time in Paris?"}],"stream":true,
		"tools":[{"type":"function","function":{"name":"get_weather"}},{"type":"function","function":{"name":"get_time"}}]}`)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", r.StatusCode, b)
	}
	chunks, done := readChunks(t, b)
	got := assemble(t, chunks)
	if !done || got.finish != "tool_calls" || got.text != "" || len(got.calls) != 2 {
		t.Fatalf("done %v finish %q text %q calls %+v", done, got.finish, got.text, got.calls)
	}
	if c := got.calls[0]; c.ID != "call_a" || c.Type != "function" || c.Function.Name != "get_weather" || c.Function.Arguments != `{"city":"Paris"}` {
		t.Errorf("call 0 %+v", c)
	}
	if c := got.calls[1]; c.ID != "call_b" || c.Function.Name != "get_time" || c.Function.Arguments != `{}` {
		t.Errorf("call 1 %+v", c)
	}
}

// TestChatStreamFailures: what fails before the first model turn is an error answer with its
// status; what fails after it ends the stream with OpenAI's error event, and no [DONE].
func TestChatStreamFailures(t *testing.T) {
	resp := answered("x")
	evs := streamEvents(resp)
	t.Run("after retrieval", func(t *testing.T) {
		a := &agentDouble{events: evs, failAfter: 1, err: status.Error(codes.Unavailable, "no model to answer with")}
		r, b := post(t, newFace(t, a).URL, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
		if r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(errorOf(t, b).Message, "no model") {
			t.Errorf("status %d: %s", r.StatusCode, b)
		}
	})
	t.Run("mid answer", func(t *testing.T) {
		a := &agentDouble{events: evs, failAfter: 5, err: status.Error(codes.Internal, "the model broke off")}
		r, b := post(t, newFace(t, a).URL, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("status %d", r.StatusCode)
		}
		chunks, done := readChunks(t, b)
		got := assemble(t, chunks)
		if done || got.errBody == nil || !strings.Contains(got.errBody.Message, "broke off") || got.text != "2 plus 3 " {
			t.Errorf("done %v error %+v text %q", done, got.errBody, got.text)
		}
	})
	t.Run("deadline with nothing to say", func(t *testing.T) {
		fail := &toolmeshv1.QueryResponse{StopReason: toolmeshv1.StopReason_STOP_REASON_DEADLINE, Error: "the query's 5s deadline passed in step 1 while asking the model"}
		a := &agentDouble{resp: fail, events: evs[:2]}
		r, b := post(t, newFace(t, a).URL, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
		chunks, done := readChunks(t, b)
		got := assemble(t, chunks)
		if r.StatusCode != http.StatusOK || done || got.errBody == nil || got.errBody.Type != "timeout" {
			t.Errorf("status %d done %v error %+v", r.StatusCode, done, got.errBody)
		}
		a = &agentDouble{resp: fail}
		r, b = post(t, newFace(t, a).URL, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		if r.StatusCode != http.StatusGatewayTimeout || !strings.Contains(errorOf(t, b).Message, "deadline") {
			t.Errorf("unary: status %d: %s", r.StatusCode, b)
		}
	})
}

// TestChatStreamKeepAlive: a stream that waits on a tool sends SSE comments, which clients
// pass over, so a proxy does not close it.
func TestChatStreamKeepAlive(t *testing.T) {
	resp := answered("done")
	slow := &slowAgent{agentDouble: agentDouble{resp: resp, events: streamEvents(resp)}, pause: 120 * time.Millisecond}
	f := New(slow, func(*http.Request) metadata.MD { return nil }, slog.New(slog.DiscardHandler))
	f.keepAlive = 20 * time.Millisecond
	ts := httptest.NewServer(f)
	defer ts.Close()
	r, b := post(t, ts.URL, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	if r.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(": keep-alive\n\n")) {
		t.Errorf("status %d, no keep-alive comment:\n%s", r.StatusCode, b)
	}
	if _, done := readChunks(t, b); !done {
		t.Error("no [DONE]")
	}
}

// slowAgent pauses before the tool call finishes.
type slowAgent struct {
	agentDouble
	pause time.Duration
}

func (s *slowAgent) QueryStream(ctx context.Context, in *toolmeshv1.QueryStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.QueryStreamResponse], error) {
	st, err := s.agentDouble.QueryStream(ctx, in, opts...)
	return &pausingStream{ServerStreamingClient: st, pause: s.pause}, err
}

type pausingStream struct {
	grpc.ServerStreamingClient[toolmeshv1.QueryStreamResponse]
	pause time.Duration
	n     int
}

func (p *pausingStream) Recv() (*toolmeshv1.QueryStreamResponse, error) {
	if p.n++; p.n == 4 {
		time.Sleep(p.pause)
	}
	return p.ServerStreamingClient.Recv()
}

func TestModels(t *testing.T) {
	a := &agentDouble{models: []*toolmeshv1.Model{{Id: "gorilla-openfunctions-v2", Backend: "llama.cpp", Ready: true}}}
	ts := newFace(t, a)
	get := func(path string) (int, []byte) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, b := get("/v1/models")
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	checkSchema(t, "ListModelsResponse", b)
	var list modelList
	_ = json.Unmarshal(b, &list)
	if len(list.Data) != 1 || list.Data[0].ID != "gorilla-openfunctions-v2" || list.Data[0].Object != "model" || list.Data[0].Created == 0 {
		t.Errorf("list %+v", list)
	}
	code, b = get("/v1/models/gorilla-openfunctions-v2")
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	checkSchema(t, "Model", b)
	code, b = get("/v1/models/gpt-4o")
	if code != 404 || str0(errorOf(t, b).Code) != "model_not_found" {
		t.Errorf("unknown model: %d %s", code, b)
	}
	resp, err := http.Post(ts.URL+"/v1/models", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
		t.Errorf("POST /v1/models: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestErrorBody(t *testing.T) {
	cases := []struct {
		status   int
		in       string
		kind     string
		code     string
		verbatim bool
	}{
		{401, `{"code":16,"message":"missing bearer token","details":[],"trace_id":"abc"}`, "invalid_request_error", "invalid_api_key", false},
		{429, `{"code":8,"message":"too many failed attempts","details":[]}`, "requests", "rate_limit_exceeded", false},
		{413, `{"code":8,"message":"body: too big","details":[]}`, "invalid_request_error", "request_too_large", false},
		{403, `{"code":7,"message":"origin refused","details":[]}`, "invalid_request_error", "permission_denied", false},
		{400, `{"error":{"message":"already OpenAI's","type":"invalid_request_error","param":null,"code":null}}`, "", "", true},
	}
	for _, tc := range cases {
		out := ErrorBody(tc.status, []byte(tc.in))
		if tc.verbatim {
			if string(out) != tc.in {
				t.Errorf("%d: rewrote an OpenAI body: %s", tc.status, out)
			}
			continue
		}
		checkSchema(t, "ErrorResponse", out)
		e := errorOf(t, out)
		if e.Type != tc.kind || str0(e.Code) != tc.code || e.Message == "" {
			t.Errorf("%d: %s", tc.status, out)
		}
	}
}

func TestParamOf(t *testing.T) {
	for in, want := range map[string]string{
		"query": "messages", "messages[3].content": "messages[3].content", "messages[1].tool_calls[0].tool_id": "messages[1].tool_calls[0].function.name",
		"messages[1].tool_calls[2].arguments": "messages[1].tool_calls[2].function.arguments", "functions[2].name": "tools[2].function.name",
		"functions": "tools", "tool_choice.function": "tool_choice", "generation.temperature": "temperature", "generation.stop[1]": "stop[1]",
		"servers[0]": "toolmesh.servers[0]", "k": "toolmesh.k", "model": "model",
	} {
		if got := paramOf(in); got != want {
			t.Errorf("paramOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDepth(t *testing.T) {
	for in, want := range map[string]int{
		`{}`: 1, `{"a":[1,{"b":2}]}`: 3, `"[[[["`: 0, `{"a":"\"[[["}`: 1, `{"a":"\\","b":[[]]}`: 3, `[]`: 1, `7`: 0,
	} {
		if got := depth([]byte(in)); got != want {
			t.Errorf("depth(%s) = %d, want %d", in, got, want)
		}
	}
}
