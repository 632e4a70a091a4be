package chat

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/toolid/toolname"
	"github.com/toolmesh/toolmesh/services/inference/chat/chattest"
)

// conversationRequest reads testdata/conversation.json: an app's conversation (instructions, a
// turn that called one of its functions, its answer), its functions, sampling options, and
// this turn's calls so far (the caller's function with the id it gave, a mesh tool beside it in
// the same earlier request, a mesh tool after).
func conversationRequest(t *testing.T) Request {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "conversation.json"))
	if err != nil {
		t.Fatal(err)
	}
	var req toolmeshv1.GenerateRequest
	if err := protojson.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	return Request{Query: req.GetQuery(), Messages: req.GetMessages(), Tools: weatherTools(t), Functions: req.GetFunctions(),
		History: req.GetHistory(), MaxTokens: int(req.GetMaxTokens()), Generation: req.GetGeneration()}
}

// TestConversationRequestGolden: the conversation goes as it is (developer as system), then the
// question, then this turn's calls; the caller's functions are tools under their own names,
// before the mesh's; its call ids are kept and ours avoid them; the sampling options are sent.
func TestConversationRequestGolden(t *testing.T) {
	c, _ := newTestClient(t, "http://127.0.0.1:1", Config{Model: "qwen2.5-7b-instruct", Temperature: new(0.0), MaxTokens: 300})
	body, names, err := c.BuildRequest(conversationRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "conversation.golden.json", body)
	for name, id := range map[string]string{"get_time": "get_time", "lookup-user": "lookup-user", "weather__get_forecast": "weather.get_forecast"} {
		if got, _ := names.ID(name); got != id {
			t.Errorf("name %q maps back to %q, want %q", name, got, id)
		}
	}
}

// TestConversationAgainstDouble: the double, which checks messages as OpenAI does (every tool
// message answers an earlier call), takes the conversation; a call of the caller's function
// comes back under its name with the server's id, and the finish reason as the server gave it.
func TestConversationAgainstDouble(t *testing.T) {
	d := chattest.NewDouble(t,
		chattest.Reply{ContentNull: true, ToolCalls: []chattest.ToolCall{{ID: "up_1", Name: "lookup-user", Arguments: `{"name":"ada"}`}}},
		chattest.Reply{Content: "It is noon", FinishReason: "length"})
	c, _ := newTestClient(t, d.URL, Config{})
	res, err := c.Generate(t.Context(), conversationRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []Call{{ToolID: "lookup-user", CallID: "up_1", Arguments: map[string]any{"name": "ada"}}}
	if !reflect.DeepEqual(res.Calls, want) || res.FinishReason != "tool_calls" {
		t.Errorf("calls %+v finish %q, want %+v and tool_calls", res.Calls, res.FinishReason, want)
	}
	res, err = c.Generate(t.Context(), conversationRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "It is noon" || res.FinishReason != "length" {
		t.Errorf("answer %q finish %q, want the server's \"length\"", res.Answer, res.FinishReason)
	}
}

// TestToolChoice: require_call is "required", or the one tool or function by name; without it
// "auto"; nothing offered, no tools and no tool_choice (OpenAI refuses tool_choice alone).
func TestToolChoice(t *testing.T) {
	fn := []*toolmeshv1.Function{{Name: "get_time"}}
	for _, tc := range []struct {
		name      string
		tools     []*toolmeshv1.Tool
		functions []*toolmeshv1.Function
		require   bool
		want      string // tool_choice as JSON, "" when absent
	}{
		{"nothing offered", nil, nil, false, ""},
		{"nothing offered, call required", nil, nil, true, ""},
		{"tools", weatherTools(t), nil, false, `"auto"`},
		{"tools and functions, call required", weatherTools(t), fn, true, `"required"`},
		{"one function, call required", nil, fn, true, `{"type":"function","function":{"name":"get_time"}}`},
		{"one tool, call required", weatherTools(t)[:1], nil, true, `{"type":"function","function":{"name":"weather__get_forecast"}}`},
		{"one function", nil, fn, false, `"auto"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestClient(t, "http://127.0.0.1:1", Config{})
			body, _, err := c.BuildRequest(Request{Query: "q", Tools: tc.tools, Functions: tc.functions, RequireCall: tc.require})
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				ToolChoice json.RawMessage `json:"tool_choice"`
				Tools      []any           `json:"tools"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if string(got.ToolChoice) != tc.want || len(got.Tools) != len(tc.tools)+len(tc.functions) {
				t.Errorf("tool_choice %s with %d tools, want %s with %d", got.ToolChoice, len(got.Tools), tc.want, len(tc.tools)+len(tc.functions))
			}
		})
	}
}

// TestSampling: the request's options win over the configured ones; max_tokens is the tighter
// of the request's two bounds, else the configured one.
func TestSampling(t *testing.T) {
	seed := int64(42)
	for _, tc := range []struct {
		name      string
		maxTokens int
		gen       *toolmeshv1.GenerationOptions
		want      string
	}{
		{"configured", 0, nil, `"max_tokens":300,"temperature":0.2`},
		{"the api's bound", 64, nil, `"max_tokens":64,"temperature":0.2`},
		{"the caller's bound is tighter", 64, &toolmeshv1.GenerationOptions{MaxTokens: 10}, `"max_tokens":10,"temperature":0.2`},
		{"the api's bound is tighter", 64, &toolmeshv1.GenerationOptions{MaxTokens: 100}, `"max_tokens":64,"temperature":0.2`},
		{"every option", 0, &toolmeshv1.GenerationOptions{MaxTokens: 5, Temperature: new(0.9), TopP: new(0.5), Seed: &seed, Stop: []string{"END", "\n\n"}},
			`"max_tokens":5,"temperature":0.9,"top_p":0.5,"seed":42,"stop":["END","\n\n"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestClient(t, "http://127.0.0.1:1", Config{Temperature: new(0.2), MaxTokens: 300})
			body, _, err := c.BuildRequest(Request{Query: "q", MaxTokens: tc.maxTokens, Generation: tc.gen})
			if err != nil {
				t.Fatal(err)
			}
			compose, err := c.BuildComposeRequest(ComposeRequest{Query: "q", MaxTokens: tc.maxTokens, Generation: tc.gen})
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range [][]byte{body, compose} {
				if !bytes.Contains(b, []byte(tc.want)) {
					t.Errorf("request %s lacks %s", b, tc.want)
				}
			}
		})
	}
}

// TestHistoryCallIDs: a call of the caller's function keeps the caller's id; ours are numbered
// past every id the caller uses, and one step's calls share one assistant message.
func TestHistoryCallIDs(t *testing.T) {
	taken := map[string]bool{"call_1": true, "call_3": true, "mine": true}
	history := []*toolmeshv1.ToolCallRecord{
		{Tool: "weather.get_forecast", Step: -2},
		{Tool: "get_time", CallId: "mine", Step: -2},
		{Tool: "weather.get_forecast", Step: -1},
		{Tool: "weather.get_forecast", Step: 1},
		{Tool: "weather.get_forecast", Step: 1},
	}
	msgs, err := historyMessages(history, toolname.New(), taken)
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		var ids []string
		for _, tc := range m.ToolCalls {
			ids = append(ids, tc.ID)
		}
		got = append(got, ids)
	}
	want := [][]string{{"call_2", "mine"}, {"call_4"}, {"call_5", "call_6"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("call ids by step %v, want %v", got, want)
	}
}

// TestComposeConversation: the compose request carries the conversation as it is before its
// one instruction message.
func TestComposeConversation(t *testing.T) {
	r := conversationRequest(t)
	c, _ := newTestClient(t, "http://127.0.0.1:1", Config{})
	body, err := c.BuildComposeRequest(ComposeRequest{Query: r.Query, Messages: r.Messages, History: r.History, Generation: r.Generation})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Messages []struct {
			Role       string          `json:"role"`
			ToolCalls  json.RawMessage `json:"tool_calls"`
			ToolCallID string          `json:"tool_call_id"`
		} `json:"messages"`
		Tools any `json:"tools"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range got.Messages {
		roles = append(roles, m.Role)
	}
	if want := []string{"system", "system", "user", "assistant", "tool", "assistant", "user"}; !reflect.DeepEqual(roles, want) || got.Tools != nil {
		t.Errorf("roles %v (tools %v), want %v and no tools", roles, got.Tools, want)
	}
	if got.Messages[4].ToolCallID != "call_1" || !bytes.Contains(got.Messages[3].ToolCalls, []byte(`"id":"call_1"`)) {
		t.Errorf("the caller's call and its result lost their id: %s", body)
	}
	d := chattest.NewDouble(t, chattest.Reply{Pieces: []string{"Noon."}})
	c, _ = newTestClient(t, d.URL, Config{})
	if _, err := c.Compose(t.Context(), ComposeRequest{Query: r.Query, Messages: r.Messages, History: r.History}, func(string) error { return nil }); err != nil {
		t.Errorf("the double refused the compose request: %v", err)
	}
}
