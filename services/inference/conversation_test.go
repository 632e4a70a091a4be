package inference

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/services/inference/chat/chattest"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
	"github.com/toolmesh/toolmesh/services/inference/gorilla/gbnf"
)

// conversation reads testdata/conversation.json: a system instruction and four turns (a call
// of the caller's function "remember" with its result, two long ones, a short one).
func conversation(t *testing.T) []*toolmeshv1.Message {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "conversation.json"))
	if err != nil {
		t.Fatal(err)
	}
	var req toolmeshv1.GenerateRequest
	if err := protojson.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	return req.GetMessages()
}

// function is one of the caller's functions with string arguments.
func function(t *testing.T, name string, args ...string) *toolmeshv1.Function {
	t.Helper()
	props := map[string]any{}
	var required []any
	for _, a := range args {
		props[a] = map[string]any{"type": "string"}
		required = append(required, a)
	}
	params, err := structpb.NewStruct(map[string]any{"type": "object", "properties": props, "required": required})
	if err != nil {
		t.Fatal(err)
	}
	return &toolmeshv1.Function{Name: name, Description: "The caller's " + name + ".", Parameters: params}
}

// TestGenerateFitsConversation: a conversation that no longer fits is shortened in order —
// the oldest turns summarized, then dropped, and only then the lowest-ranked tools; the caller's
// function never. Each case sizes the double's context so that exactly the k-th way of
// shortening fits, computes that prompt itself, and wants it sent.
func TestGenerateFitsConversation(t *testing.T) {
	msgs := conversation(t)
	conv := gorilla.NewConversation(msgs)
	tools := calcTools(t)
	fns := []*toolmeshv1.Function{function(t, "remember", "fact")}
	const query, maxTokens = "And 7 minus 1?", 32
	convLast := conv.Variants() - 1
	// prompt is the k-th shortening: conversation variant k, then k-convLast tools dropped.
	prompt := func(k int) string {
		offered := append(functionTools(fns), toolsOf(tools)[:len(tools)-max(0, k-convLast)]...)
		cat, err := gorilla.Build(offered)
		if err != nil {
			t.Fatal(err)
		}
		return cat.ConversationPrompt(conv.Variant(k), query, nil)
	}
	tokens := func(k int) int { return len(llamatest.Tokenize(prompt(k), false, true)) }
	for _, tc := range []struct {
		name    string
		k       int
		fit     *toolmeshv1.HistoryFit
		dropped []string
	}{
		{"everything fits", 0, &toolmeshv1.HistoryFit{Turns: 4}, nil},
		{"two oldest turns summarized", 2, &toolmeshv1.HistoryFit{Turns: 4, Summarized: 2}, nil},
		{"three summarized", 3, &toolmeshv1.HistoryFit{Turns: 4, Summarized: 3}, nil},
		{"two dropped, the rest summarized", 6, &toolmeshv1.HistoryFit{Turns: 4, Summarized: 2, Dropped: 2}, nil},
		{"every turn dropped", 8, &toolmeshv1.HistoryFit{Turns: 4, Dropped: 4}, nil},
		{"then tools dropped", 10, &toolmeshv1.HistoryFit{Turns: 4, Dropped: 4}, []string{"calculator.divide", "calculator.multiply"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.k > 0 && tokens(tc.k) >= tokens(tc.k-1) {
				t.Fatalf("shortening %d is no shorter than %d: the case cannot tell them apart", tc.k, tc.k-1)
			}
			d := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: tokens(tc.k) + 1 + maxTokens})
			d.SetDefault(llamatest.Reply{Pieces: []string{"6."}})
			s := newTestService(t, d.URL)
			resp, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: query, Tools: tools, Messages: msgs,
				Functions: fns, MaxTokens: maxTokens})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(resp.GetHistory(), tc.fit) || !slices.Equal(resp.GetDroppedToolIds(), tc.dropped) {
				t.Errorf("history %v, dropped tools %v; want %v and %v", resp.GetHistory(), resp.GetDroppedToolIds(), tc.fit, tc.dropped)
			}
			reqs := d.Requests()
			if got := reqs[len(reqs)-1].Prompt; got != prompt(tc.k) {
				t.Errorf("prompt sent:\n%q\nwant shortening %d:\n%q", got, tc.k, prompt(tc.k))
			}
		})
	}
	t.Run("nothing fits", func(t *testing.T) {
		last := convLast + len(tools)
		d := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: tokens(last) + maxTokens})
		s := newTestService(t, d.URL)
		_, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: query, Tools: tools, Messages: msgs, Functions: fns, MaxTokens: maxTokens})
		if status.Code(err) != codes.ResourceExhausted || errreason.Of(err) != errreason.ContextTooLong {
			t.Errorf("err = %v (reason %q), want RESOURCE_EXHAUSTED %s", err, errreason.Of(err), errreason.ContextTooLong)
		}
		if len(d.Requests()) != 0 {
			t.Errorf("a prompt that cannot fit was sent")
		}
	})
}

// TestFirstFit: the first k that fits, in few tries.
func TestFirstFit(t *testing.T) {
	for _, tc := range []struct {
		last, first int // first: the least k that fits; > last when none does
	}{{0, 0}, {0, 1}, {8, 0}, {8, 1}, {8, 5}, {8, 8}, {8, 9}, {100, 37}, {100, 101}} {
		tries := 0
		k, ok, err := firstFit(tc.last, func(k int) (bool, error) {
			tries++
			if k < 0 || k > tc.last {
				t.Errorf("last %d: tried %d, out of range", tc.last, k)
			}
			return k >= tc.first, nil
		})
		if err != nil || ok != (tc.first <= tc.last) || ok && k != tc.first {
			t.Errorf("last %d, first %d: got %d, %v, %v", tc.last, tc.first, k, ok, err)
		}
		if most := 1 + bits.Len(uint(tc.last)); tries > most {
			t.Errorf("last %d, first %d: %d tries, want at most %d", tc.last, tc.first, tries, most)
		}
	}
}

// TestGenerateCallerFunction: the caller's function is offered before the mesh's tools, and a
// call of it comes back under its name, with no id (the api gives it one).
func TestGenerateCallerFunction(t *testing.T) {
	for _, tc := range []struct {
		name   string // the function's
		output string // what the model writes
	}{
		{"remember", "<<function>>remember(fact='the user likes sums')"},
		{"remember-fact", "<<function>>remember_fact(fact='the user likes sums')"}, // not a Python name: shown mapped
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
			d.SetDefault(llamatest.Reply{Pieces: []string{tc.output}})
			s := newTestService(t, d.URL)
			resp, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: "Remember that I like sums.", Tools: calcTools(t),
				Functions: []*toolmeshv1.Function{function(t, tc.name, "fact")}})
			if err != nil {
				t.Fatal(err)
			}
			calls := resp.GetCalls()
			if len(calls) != 1 || calls[0].GetToolId() != tc.name || calls[0].GetId() != "" ||
				calls[0].GetArguments().AsMap()["fact"] != "the user likes sums" || resp.GetFinishReason() != "tool_calls" {
				t.Errorf("calls %v, finish %q; want %s(fact=...) without an id, tool_calls", calls, resp.GetFinishReason(), tc.name)
			}
			reqs := d.Requests()
			last := reqs[len(reqs)-1]
			fn, add := strings.Index(last.Prompt, `"description": "The caller's `+tc.name), strings.Index(last.Prompt, `"name": "calculator.add"`)
			if fn < 0 || add < 0 || fn > add {
				t.Errorf("the function is not offered before the tools: %q", last.Prompt)
			}
			g, err := gbnf.Parse(last.Grammar)
			if err != nil {
				t.Fatal(err)
			}
			if ok, _, _ := g.Match(tc.output); !ok {
				t.Errorf("the grammar does not admit the call %q", tc.output)
			}
		})
	}
}

// TestGenerateRequireCall: with require_call the grammar has no answer branch; without it, it
// has. The tool_choice "none" shape (nothing offered) answers in plain text, turns and all.
func TestGenerateRequireCall(t *testing.T) {
	const call = "<<function>>calculator.add(a=2, b=3)"
	for _, tc := range []struct {
		name        string
		tools       []*toolmeshv1.ScoredTool
		require     bool
		answerOK    bool // the grammar admits a plain answer
		callOK      bool // and the call
		messages    []*toolmeshv1.Message
		promptHas   string
		wantCode    codes.Code
		wantMessage string
	}{
		{name: "auto", tools: calcTools(t), answerOK: true, callOK: true},
		{name: "required", tools: calcTools(t), require: true, callOK: true},
		{name: "none: nothing offered", messages: conversation(t), answerOK: true, promptHas: "<<assistant>>'10 times 4 is 40.'\n<<question>> What is 2 plus 3?\n"},
		{name: "required with nothing offered", require: true, wantCode: codes.InvalidArgument, wantMessage: "require_call:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
			d.SetDefault(llamatest.Reply{Pieces: []string{"Five."}})
			s := newTestService(t, d.URL)
			resp, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: "What is 2 plus 3?", Tools: tc.tools,
				RequireCall: tc.require, Messages: tc.messages})
			if tc.wantCode != codes.OK {
				if status.Code(err) != tc.wantCode || !strings.HasPrefix(status.Convert(err).Message(), tc.wantMessage) {
					t.Errorf("err = %v, want %v %q", err, tc.wantCode, tc.wantMessage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			reqs := d.Requests()
			last := reqs[len(reqs)-1]
			g, err := gbnf.Parse(last.Grammar)
			if err != nil {
				t.Fatal(err)
			}
			answerOK, _, _ := g.Match("Five.")
			callOK, _, _ := g.Match(call)
			if answerOK != tc.answerOK || callOK != tc.callOK {
				t.Errorf("grammar admits an answer %v, the call %v; want %v, %v", answerOK, callOK, tc.answerOK, tc.callOK)
			}
			if !strings.Contains(last.Prompt, tc.promptHas) {
				t.Errorf("prompt %q lacks %q", last.Prompt, tc.promptHas)
			}
			if tc.answerOK && (resp.GetAnswer() != "Five." || resp.GetFinishReason() != "stop") {
				t.Errorf("answer %q finish %q, want Five. and stop", resp.GetAnswer(), resp.GetFinishReason())
			}
		})
	}
}

// TestGenerateBoundsAnswer: a plain answer is cut before the first stop string, then to
// max_tokens tokens ("length"); calls are never cut, and neither bound reaches the server,
// whose grammar-bound output keeps its own budget.
func TestGenerateBoundsAnswer(t *testing.T) {
	const text = "One two three, four five six."
	for _, tc := range []struct {
		name   string
		output string
		gen    *toolmeshv1.GenerationOptions
		answer string
		finish string
		calls  int
	}{
		{"no bound", text, nil, text, "stop", 0},
		{"max_tokens cuts", text, &toolmeshv1.GenerationOptions{MaxTokens: 5}, "One t", "length", 0},
		{"max_tokens as long as the answer", text, &toolmeshv1.GenerationOptions{MaxTokens: int32(len(text))}, text, "stop", 0},
		{"a character of several tokens is not split", "Ça va", &toolmeshv1.GenerationOptions{MaxTokens: 1}, "", "length", 0},
		{"stop cuts", text, &toolmeshv1.GenerationOptions{Stop: []string{"five", ", "}}, "One two three", "stop", 0},
		{"stop, then max_tokens", text, &toolmeshv1.GenerationOptions{Stop: []string{"six"}, MaxTokens: 7}, "One two", "length", 0},
		{"a call is not cut", "<<function>>calculator.add(a=2, b=3)", &toolmeshv1.GenerationOptions{Stop: []string{"b="}, MaxTokens: 2}, "", "tool_calls", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
			d.SetDefault(llamatest.Reply{Pieces: []string{tc.output}})
			s := newTestService(t, d.URL)
			resp, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: "Count.", Tools: calcTools(t), Generation: tc.gen})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetAnswer() != tc.answer || resp.GetFinishReason() != tc.finish || len(resp.GetCalls()) != tc.calls || resp.GetRawOutput() != tc.output {
				t.Errorf("answer %q, finish %q, %d calls, raw %q; want %q, %q, %d, the output whole", resp.GetAnswer(), resp.GetFinishReason(),
					len(resp.GetCalls()), resp.GetRawOutput(), tc.answer, tc.finish, tc.calls)
			}
			reqs := d.Requests()
			if last := reqs[len(reqs)-1]; len(last.Stop) > 0 || last.NPredict != 64 {
				t.Errorf("sent stop %q and n_predict %d; want no stop and the service's own budget 64", last.Stop, last.NPredict)
			}
		})
	}
}

// TestSamplingReachesServer: temperature, top_p and seed go to /completion in both RPCs;
// ComposeAnswer also sends the stop strings and max_tokens as n_predict, and says "length" when
// the server stopped there.
func TestSamplingReachesServer(t *testing.T) {
	seed := int64(42)
	gen := &toolmeshv1.GenerationOptions{Temperature: new(0.7), TopP: new(0.9), Seed: &seed, Stop: []string{"END"}, MaxTokens: 3}
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	d.SetDefault(llamatest.Reply{Pieces: []string{"a", "b", "c", "d", "e"}})
	s := newTestService(t, d.URL)
	if _, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: "q", Tools: calcTools(t), Generation: gen, Messages: conversation(t)}); err != nil {
		t.Fatal(err)
	}
	_, last, err := composeAll(t.Context(), composeClient(t, s), &toolmeshv1.ComposeAnswerRequest{Query: "q", Generation: gen, Messages: conversation(t)})
	if err != nil {
		t.Fatal(err)
	}
	reqs := d.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d completions, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.Temperature == nil || *r.Temperature != 0.7 || r.TopP == nil || *r.TopP != 0.9 || r.Seed == nil || *r.Seed != 42 {
			t.Errorf("request %d: temperature %v top_p %v seed %v, want 0.7, 0.9, 42", i, r.Temperature, r.TopP, r.Seed)
		}
	}
	if c := reqs[1]; !slices.Equal(c.Stop, []string{"END"}) || c.NPredict != 3 || !c.Stream {
		t.Errorf("compose sent stop %q n_predict %d; want [END] and 3", c.Stop, c.NPredict)
	}
	if !last.GetDone() || last.GetFinishReason() != "length" || !proto.Equal(last.GetHistory(), &toolmeshv1.HistoryFit{Turns: 4}) {
		t.Errorf("last message %v, want done, length, 4 turns", last)
	}
}

// TestComposeAnswerFitsConversation: the composed answer's prompt drops what does not fit as
// Generate's does, and says so on the last message; an answer that ends is "stop".
func TestComposeAnswerFitsConversation(t *testing.T) {
	msgs := conversation(t)
	conv := gorilla.NewConversation(msgs)
	cat, err := gorilla.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	const query, maxTokens = "And 7 minus 1?", 16
	want := cat.ConversationPrompt(conv.Variant(6), query, nil)
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: len(llamatest.Tokenize(want, false, true)) + 1 + maxTokens})
	d.Script(want, llamatest.Reply{Pieces: []string{"6."}})
	c := composeClient(t, newTestService(t, d.URL))
	deltas, last, err := composeAll(t.Context(), c, &toolmeshv1.ComposeAnswerRequest{Query: query, Messages: msgs, MaxTokens: maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(deltas, "") != "6." || last.GetFinishReason() != "stop" ||
		!proto.Equal(last.GetHistory(), &toolmeshv1.HistoryFit{Turns: 4, Summarized: 2, Dropped: 2}) {
		t.Errorf("deltas %q, last %v; want 6., stop, 2 summarized and 2 dropped of 4", deltas, last)
	}
}

// TestBadConversation: malformed turns, functions and options are INVALID_ARGUMENT naming the
// field, before anything is asked of the model.
func TestBadConversation(t *testing.T) {
	msg := func(role, content string) *toolmeshv1.Message {
		return &toolmeshv1.Message{Role: role, Content: content}
	}
	tooMany := make([]*toolmeshv1.Message, 257)
	for i := range tooMany {
		tooMany[i] = msg("user", "hi")
	}
	for _, tc := range []struct {
		name     string
		messages []*toolmeshv1.Message
		fns      []*toolmeshv1.Function
		gen      *toolmeshv1.GenerationOptions
		field    string
	}{
		{name: "unknown role", messages: []*toolmeshv1.Message{msg("user", "hi"), msg("robot", "beep")}, field: "messages[1].role"},
		{name: "no role", messages: []*toolmeshv1.Message{msg("", "hi")}, field: "messages[0].role"},
		{name: "too many messages", messages: tooMany, field: "messages"},
		{name: "content too long", messages: []*toolmeshv1.Message{msg("user", strings.Repeat("a", 64<<10+1))}, field: "messages[0].content"},
		{name: "content not UTF-8", messages: []*toolmeshv1.Message{msg("system", "ok"), msg("user", "\xff")}, field: "messages[1].content"},
		{name: "a user message with calls", messages: []*toolmeshv1.Message{{Role: "user", ToolCalls: []*toolmeshv1.FunctionCall{{ToolId: "f"}}}}, field: "messages[0].tool_calls"},
		{name: "a call of no name", messages: []*toolmeshv1.Message{{Role: "assistant", ToolCalls: []*toolmeshv1.FunctionCall{{Id: "c1", ToolId: "a b"}}}}, field: "messages[0].tool_calls[0].tool_id"},
		{name: "a call without its id", messages: []*toolmeshv1.Message{{Role: "assistant", ToolCalls: []*toolmeshv1.FunctionCall{{ToolId: "f"}}}}, field: "messages[0].tool_calls[0].id"},
		{name: "function with a dot", fns: []*toolmeshv1.Function{{Name: "calculator.add"}}, field: "functions[0].name"},
		{name: "function twice", fns: []*toolmeshv1.Function{{Name: "f"}, {Name: "f"}}, field: "functions[1].name"},
		{name: "temperature", gen: &toolmeshv1.GenerationOptions{Temperature: new(2.5)}, field: "generation.temperature"},
		{name: "top_p", gen: &toolmeshv1.GenerationOptions{TopP: new(-0.1)}, field: "generation.top_p"},
		{name: "negative max_tokens", gen: &toolmeshv1.GenerationOptions{MaxTokens: -1}, field: "generation.max_tokens"},
		{name: "five stops", gen: &toolmeshv1.GenerationOptions{Stop: []string{"a", "b", "c", "d", "e"}}, field: "generation.stop"},
		{name: "an empty stop", gen: &toolmeshv1.GenerationOptions{Stop: []string{"a", ""}}, field: "generation.stop[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
			s := newTestService(t, d.URL)
			_, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: "q", Messages: tc.messages, Functions: tc.fns, Generation: tc.gen})
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+": ") {
				t.Errorf("Generate: err = %v, want INVALID_ARGUMENT naming %s", err, tc.field)
			}
			// Over gRPC (ComposeAnswer streams) a string that is not UTF-8 cannot even be sent.
			if tc.fns == nil && tc.name != "content not UTF-8" {
				_, _, err := composeAll(t.Context(), composeClient(t, s), &toolmeshv1.ComposeAnswerRequest{Query: "q", Messages: tc.messages, Generation: tc.gen})
				if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+": ") {
					t.Errorf("ComposeAnswer: err = %v, want INVALID_ARGUMENT naming %s", err, tc.field)
				}
			}
			if n := len(d.Requests()); n != 0 {
				t.Errorf("%d completions asked for a bad request", n)
			}
		})
	}
}

// TestOpenAIBackendConversation: with the OpenAI-compatible backend the conversation and the
// caller's function go to the server as they are, a call required of one function names it,
// the call comes back with the server's id, and the finish reason says tool_calls whatever the
// server said (OpenAI says "stop" for a named tool_choice); a composed answer's "length" is
// passed on.
func TestOpenAIBackendConversation(t *testing.T) {
	d := chattest.NewDouble(t,
		chattest.Reply{ContentNull: true, FinishReason: "stop", ToolCalls: []chattest.ToolCall{{ID: "up_1", Name: "remember", Arguments: `{"fact":"sums"}`}}},
		chattest.Reply{Pieces: []string{"Five"}, FinishReason: "length"})
	s := newChatService(t, d.URL)
	msgs := conversation(t)
	resp, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: "Remember this.", Messages: msgs,
		Functions: []*toolmeshv1.Function{function(t, "remember", "fact")}, RequireCall: true})
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.GetCalls()
	if len(calls) != 1 || calls[0].GetToolId() != "remember" || calls[0].GetId() != "up_1" || resp.GetFinishReason() != "tool_calls" ||
		!proto.Equal(resp.GetHistory(), &toolmeshv1.HistoryFit{Turns: 4}) {
		t.Errorf("calls %v finish %q history %v; want remember with id up_1, tool_calls, 4 turns", calls, resp.GetFinishReason(), resp.GetHistory())
	}
	var sent struct {
		Messages   []struct{ Role string } `json:"messages"`
		ToolChoice json.RawMessage         `json:"tool_choice"`
	}
	if err := json.Unmarshal(d.Requests()[0], &sent); err != nil {
		t.Fatal(err)
	}
	if len(sent.Messages) != len(msgs)+1 || string(sent.ToolChoice) != `{"type":"function","function":{"name":"remember"}}` {
		t.Errorf("sent %d messages and tool_choice %s; want the %d of the conversation and the question, remember by name",
			len(sent.Messages), sent.ToolChoice, len(msgs))
	}
	_, last, err := composeAll(t.Context(), composeClient(t, s), &toolmeshv1.ComposeAnswerRequest{Query: "q", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if last.GetFinishReason() != "length" || !proto.Equal(last.GetHistory(), &toolmeshv1.HistoryFit{Turns: 4}) {
		t.Errorf("last message %v, want the server's length and 4 turns", last)
	}
}

// TestConversationOnRealServer runs a conversation with sampling options and a stop string on a
// real llama-server with the tiny random-weight model: its words are noise, but the server must
// take the options, stop where told, and the service must bound the answer as promised.
func TestConversationOnRealServer(t *testing.T) {
	srv := llamatest.StartServer(t, llamatest.ServerOptions{})
	s := newTestService(t, srv.URL)
	seed := int64(7)
	gen := &toolmeshv1.GenerationOptions{Temperature: new(0.9), TopP: new(0.95), Seed: &seed, Stop: []string{"f", "J"}, MaxTokens: 4}
	// tokens counts an answer's tokens as the service does: without the space the tiny model's
	// tokenizer puts in front of a text.
	tokens := func(s string) int { return max(0, len(llamatest.Tokenize(s, false, true))-1) }
	want := &toolmeshv1.HistoryFit{Turns: 4}
	for i := range 3 {
		resp, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: fmt.Sprintf("And %d minus 1?", i+7), Messages: conversation(t), Generation: gen})
		if err != nil {
			t.Fatal(err)
		}
		whole, _ := cutAtStop(strings.TrimSpace(resp.GetRawOutput()), gen.GetStop())
		longer := tokens(whole) > int(gen.GetMaxTokens())
		if !strings.HasPrefix(whole, resp.GetAnswer()) || tokens(resp.GetAnswer()) > int(gen.GetMaxTokens()) ||
			strings.ContainsAny(resp.GetAnswer(), "fJ") || (resp.GetFinishReason() == "length") != longer ||
			!proto.Equal(resp.GetHistory(), want) {
			t.Errorf("generate %d: answer %q (%d tokens), finish %q, history %v from output %q", i, resp.GetAnswer(),
				tokens(resp.GetAnswer()), resp.GetFinishReason(), resp.GetHistory(), resp.GetRawOutput())
		}
	}
	c := composeClient(t, s)
	composeGen := proto.Clone(gen).(*toolmeshv1.GenerationOptions)
	composeGen.MaxTokens = 12
	for i := range 3 {
		deltas, last, err := composeAll(t.Context(), c, &toolmeshv1.ComposeAnswerRequest{Query: fmt.Sprintf("And %d minus 1?", i+7),
			Messages: conversation(t), Generation: composeGen})
		if err != nil {
			t.Fatal(err)
		}
		answer, n := strings.Join(deltas, ""), last.GetUsage().GetCompletionTokens()
		// A stop string that is the 12th token ends the answer as "stop" in 12 tokens.
		finish := last.GetFinishReason()
		if strings.ContainsAny(answer, "fJ") || n > 12 || finish == "length" && n != 12 || n < 12 && finish != "stop" || !proto.Equal(last.GetHistory(), want) {
			t.Errorf("compose %d: %q in %d tokens, last %v", i, answer, n, last)
		}
	}
}
