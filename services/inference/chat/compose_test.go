package chat

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/services/inference/chat/chattest"
	"github.com/toolmesh/toolmesh/services/inference/llmhttp"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

func TestComposeRequest(t *testing.T) {
	c, _ := newTestClient(t, "http://127.0.0.1:1", Config{Model: "m", Temperature: new(0.0), MaxTokens: 300})
	body, err := c.BuildComposeRequest(ComposeRequest{Query: "What is the weather in Paris?", History: history(t)})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		Tools         any `json:"tools"`
		ToolChoice    any `json:"tool_choice"`
		MaxTokens     int `json:"max_tokens"`
		Stream        bool
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Model != "m" || got.MaxTokens != 300 || !got.Stream || !got.StreamOptions.IncludeUsage ||
		got.Tools != nil || got.ToolChoice != nil || len(got.Messages) != 1 || got.Messages[0].Role != "user" {
		t.Fatalf("request = %s", body)
	}
	want := composeInstruction + "\n\nQuestion: What is the weather in Paris?\n\nTool calls and their results:" +
		"\n1. weather.get_forecast {\"city\":\"Paris\",\"days\":2}\nResult: {\"temp\":21}" +
		"\n2. weather.get_forecast {\"city\":\"Oslo\"}\nResult: {\"temp\":3}" +
		"\n3. files.read-file {}\nError: no such file" +
		"\n4. gone.tool {}\nResult: x"
	if got.Messages[0].Content != want {
		t.Errorf("message:\n got %q\nwant %q", got.Messages[0].Content, want)
	}

	body, err = c.BuildComposeRequest(ComposeRequest{Query: "hi", MaxTokens: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `No tool was called.`) || !strings.Contains(string(body), `"max_tokens":7`) {
		t.Errorf("no-history request = %s", body)
	}
}

// sse builds a raw stream body from data lines.
func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(e)
		b.WriteString("\n\n")
	}
	return b.String()
}

func TestCompose(t *testing.T) {
	const llamaCtx = `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`
	for _, tc := range []struct {
		name  string
		reply chattest.Reply
		// want on success
		deltas []string
		finish string
		usage  [2]int
		// want on failure (deltas are still checked: what came before the error)
		code     codes.Code
		sentinel error
		has      string
	}{
		{name: "pieces and usage", reply: chattest.Reply{Pieces: []string{"2 plus 3 ", "is ", "5."}, PromptTokens: 50, CompletionTokens: 6},
			deltas: []string{"2 plus 3 ", "is ", "5."}, finish: "stop", usage: [2]int{50, 6}},
		{name: "cut at max_tokens", reply: chattest.Reply{Pieces: []string{"It is"}, FinishReason: "length", PromptTokens: 9, CompletionTokens: 2},
			deltas: []string{"It is"}, finish: "length", usage: [2]int{9, 2}},
		{name: "multi-byte text", reply: chattest.Reply{Pieces: []string{"Größe ", "😀"}},
			deltas: []string{"Größe ", "😀"}, finish: "stop"},
		{name: "empty answer", reply: chattest.Reply{Pieces: []string{}}, finish: "stop"},
		{name: "error event mid-stream", reply: chattest.Reply{Pieces: []string{"partial"}, StreamError: `{"error":{"code":500,"message":"boom","type":"server_error"}}`},
			deltas: []string{"partial"}, code: codes.Internal, has: `error in stream (server_error): "boom"`},
		{name: "old llama.cpp error field", reply: chattest.Reply{Pieces: []string{"a"}, StreamError: `{"code":500,"message":"slot died","type":"server_error"}`, OldErrorFraming: true},
			deltas: []string{"a"}, code: codes.Internal, has: "slot died"},
		{name: "context error in stream", reply: chattest.Reply{StreamError: llamaCtx},
			code: codes.ResourceExhausted, sentinel: llmhttp.ErrContextExceeded, has: "exceeds the available context size"},
		{name: "OpenAI error event", reply: chattest.Reply{StreamError: chattest.APIErrorBody("Rate limit reached", "requests", "rate_limit_exceeded")},
			code: codes.ResourceExhausted, has: "Rate limit reached"},
		{name: "vLLM error event", reply: chattest.Reply{StreamError: `{"object":"error","message":"engine dead","type":"InternalServerError","code":500}`},
			code: codes.Internal, has: "engine dead"},
		{name: "connection dropped", reply: chattest.Reply{Pieces: []string{"half"}, Cut: true},
			deltas: []string{"half"}, code: codes.Unavailable, has: "ended before its last chunk"},
		{name: "503 loading", reply: chattest.Reply{Status: 503, Body: `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`},
			code: codes.Unavailable, sentinel: llmhttp.ErrNotReady, has: "Loading model"},
		{name: "400 context", reply: chattest.Reply{Status: 400, Body: llamaCtx},
			code: codes.ResourceExhausted, sentinel: llmhttp.ErrContextExceeded, has: "400 Bad Request"},
		{name: "401", reply: chattest.Reply{Status: 401, Body: chattest.APIErrorBody("Incorrect API key provided.", "invalid_request_error", "invalid_api_key")},
			code: codes.Unauthenticated, has: "Incorrect API key"},
		{name: "500 bare", reply: chattest.Reply{Status: 500, Body: "oops"}, code: codes.Internal, has: "oops"},
		{name: "not streamed", reply: chattest.Reply{Raw: `{"choices":[{"message":{"role":"assistant","content":"Five."},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`},
			deltas: []string{"Five."}, finish: "stop", usage: [2]int{3, 2}},
		{name: "llama.cpp b11669 framing", reply: chattest.Reply{RawStream: sse(
			`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"object":"chat.completion.chunk"}`,
			`: ping`,
			`data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"\ufffd>"}}],"object":"chat.completion.chunk"}`,
			`data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"object":"chat.completion.chunk"}`,
			`data: {"choices":[],"object":"chat.completion.chunk","usage":{"completion_tokens":4,"prompt_tokens":54,"total_tokens":58},"timings":{}}`,
			`data: [DONE]`)},
			deltas: []string{"\ufffd>"}, finish: "length", usage: [2]int{54, 4}},
		{name: "usage on the finish chunk, no [DONE]", reply: chattest.Reply{RawStream: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\r\n\r\n" +
			"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\r\n\r\n"},
			deltas: []string{"ok"}, finish: "stop", usage: [2]int{5, 1}},
		{name: "garbage chunk", reply: chattest.Reply{RawStream: sse(`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}`, `data: <html>`)},
			deltas: []string{"a"}, code: codes.Unavailable, has: "<html>"},
		{name: "[DONE] before anything", reply: chattest.Reply{RawStream: sse(`data: [DONE]`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := chattest.NewDouble(t, tc.reply)
			c, _ := newTestClient(t, d.URL, Config{Timeout: 5 * time.Second})
			var deltas []string
			res, err := c.Compose(t.Context(), ComposeRequest{Query: "q", History: history(t)}, func(s string) error {
				deltas = append(deltas, s)
				return nil
			})
			if !reflect.DeepEqual(deltas, tc.deltas) {
				t.Errorf("deltas %q, want %q", deltas, tc.deltas)
			}
			if tc.code == codes.OK {
				if err != nil {
					t.Fatal(err)
				}
				got := [2]int{res.PromptTokens, res.CompletionTokens}
				if res.Answer != strings.Join(tc.deltas, "") || res.FinishReason != tc.finish || got != tc.usage {
					t.Errorf("result %+v, want finish %q usage %v", res, tc.finish, tc.usage)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not *Error", err, err)
			}
			if Code(err) != tc.code {
				t.Errorf("code %v, want %v: %v", Code(err), tc.code, err)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Errorf("%v does not match %v", err, tc.sentinel)
			}
			if !strings.Contains(err.Error(), tc.has) {
				t.Errorf("error %q lacks %q", err, tc.has)
			}
		})
	}
}

func TestComposeEnds(t *testing.T) {
	// The timeout falls half-way between the first piece and the second: half a second of slack
	// either side on a busy machine.
	slow := chattest.Reply{Pieces: []string{"one ", "two ", "three"}, PieceDelay: time.Second}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		// stop is called with each delta; it may cancel the context or fail.
		stop   func(cancel context.CancelFunc, n int) error
		code   codes.Code
		errIs  error
		has    string
		deltas int
	}{
		{name: "timeout", timeout: 1500 * time.Millisecond, code: codes.DeadlineExceeded, errIs: context.DeadlineExceeded, has: "timed out after 1.5s", deltas: 1},
		{name: "caller cancels", stop: func(cancel context.CancelFunc, n int) error {
			if n == 1 {
				cancel()
			}
			return nil
		}, code: codes.Canceled, errIs: context.Canceled, has: "canceled", deltas: 1},
		{name: "receiver fails", stop: func(_ context.CancelFunc, n int) error {
			return errors.New("client stream broken")
		}, code: codes.Unknown, has: "client stream broken", deltas: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := chattest.NewDouble(t, slow)
			c, _ := newTestClient(t, d.URL, Config{Timeout: tc.timeout})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			n := 0
			_, err := c.Compose(ctx, ComposeRequest{Query: "q"}, func(string) error {
				n++
				if tc.stop != nil {
					return tc.stop(cancel, n)
				}
				return nil
			})
			if Code(err) != tc.code || !strings.Contains(err.Error(), tc.has) || (tc.errIs != nil && !errors.Is(err, tc.errIs)) {
				t.Errorf("got %v (%v), want %v with %q", err, Code(err), tc.code, tc.has)
			}
			if n != tc.deltas {
				t.Errorf("%d deltas before the end, want %d", n, tc.deltas)
			}
			// The request was abandoned, not read to its end: the server saw the client go.
			eventually.True(t, 5*time.Second, "the double sees the client go", func() bool { return d.Canceled() == 1 })
		})
	}
}

func TestComposeKeyRedacted(t *testing.T) {
	const key = "sk-secret-123456"
	d := chattest.NewDouble(t, chattest.Reply{StreamError: chattest.APIErrorBody("bad header Bearer "+key, "invalid_request_error", nil)})
	d.APIKey = key
	c, logs := newTestClient(t, d.URL, Config{APIKey: key})
	_, err := c.Compose(t.Context(), ComposeRequest{Query: "q"}, func(string) error { return nil })
	if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("echoed key: %v", err)
	}
	if strings.Contains(logs.String(), key) {
		t.Errorf("key logged: %s", logs)
	}
}

// TestDoubleStreamFraming pins the double's stream to OpenAI's framing, event by event.
func TestDoubleStreamFraming(t *testing.T) {
	d := chattest.NewDouble(t, chattest.Reply{Pieces: []string{"a", "b"}, PromptTokens: 4, CompletionTokens: 2})
	for _, tc := range []struct {
		body string
		want []string // each event's data, with "id"/"created"/... dropped
	}{
		{`{"model":"m","messages":[{"role":"user","content":"q"}],"stream":true,"stream_options":{"include_usage":true}}`, []string{
			`{"choices":[{"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"usage":null}`,
			`{"choices":[{"delta":{"content":"a"},"finish_reason":null,"index":0,"logprobs":null}],"usage":null}`,
			`{"choices":[{"delta":{"content":"b"},"finish_reason":null,"index":0,"logprobs":null}],"usage":null}`,
			`{"choices":[{"delta":{},"finish_reason":"stop","index":0,"logprobs":null}],"usage":null}`,
			`{"choices":[],"usage":{"completion_tokens":2,"prompt_tokens":4,"total_tokens":6}}`,
			`[DONE]`,
		}},
		{`{"model":"m","messages":[{"role":"user","content":"q"}],"stream":true}`, []string{
			`{"choices":[{"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}]}`,
			`{"choices":[{"delta":{"content":"a"},"finish_reason":null,"index":0,"logprobs":null}]}`,
			`{"choices":[{"delta":{"content":"b"},"finish_reason":null,"index":0,"logprobs":null}]}`,
			`{"choices":[{"delta":{},"finish_reason":"stop","index":0,"logprobs":null}]}`,
			`[DONE]`,
		}},
	} {
		resp, err := http.Post(d.URL+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q", ct)
		}
		r := llmhttp.NewSSEReader(resp.Body, nil)
		var got []string
		for {
			data, _, err := r.Next()
			if err != nil {
				break
			}
			var m map[string]any
			if json.Unmarshal(data, &m) != nil {
				got = append(got, string(data))
				continue
			}
			if m["object"] != "chat.completion.chunk" || m["id"] == nil || m["model"] != "m" {
				t.Errorf("chunk %s lacks object/id/model", data)
			}
			for _, k := range []string{"id", "object", "created", "model", "system_fingerprint"} {
				delete(m, k)
			}
			b, _ := json.Marshal(m)
			got = append(got, string(b))
		}
		resp.Body.Close()
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.body, got, tc.want)
		}
	}
	// stream_options without stream is refused, as OpenAI does.
	resp, err := http.Post(d.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"q"}],"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("stream_options without stream: status %d", resp.StatusCode)
	}
}
