// Package chattest holds Double, a test double of the OpenAI-compatible POST
// /v1/chat/completions endpoint (an httptest server). It is not llama-server, vLLM or Ollama:
// it answers scripted replies and faults on demand, and checks requests the way those servers
// do (malformed JSON, function names outside ^[a-zA-Z0-9_-]{1,64}$, a tool message whose
// tool_call_id matches no earlier assistant tool call, stream_options without stream, a bad
// API key), with their error shapes.
//
// A request with "stream": true is answered in OpenAI's stream framing, as
// platform.openai.com documents it and llama-server's OpenAI-compatible endpoint follows it:
// text/event-stream of `data: {chat.completion.chunk}` events — a first delta with the role
// and empty content, one delta per content piece (tool calls as tool_calls deltas), a chunk
// with an empty delta and the finish_reason, then, when stream_options.include_usage is set,
// a chunk with empty choices and the usage (every earlier chunk then carries "usage": null),
// and last `data: [DONE]`. (llama-server b11669 was seen to fold the role into the first
// content delta and to send "content": null with the role; clients must not rely on either.)
package chattest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"
)

// ToolCall is a scripted call: Arguments is sent verbatim as function.arguments (a JSON
// string), so it can be made invalid on purpose.
type ToolCall struct {
	ID, Name, Arguments string
}

// Reply is one scripted answer.
type Reply struct {
	// Content is message.content (nil when ContentNull).
	Content     string
	ContentNull bool
	ToolCalls   []ToolCall
	// FinishReason defaults to "tool_calls" with calls and "stop" without.
	FinishReason                   string
	PromptTokens, CompletionTokens int

	// Status, when not 0 or 200, answers with that status and Body (raw, e.g. an error
	// object in OpenAI's or llama.cpp's shape).
	Status int
	Body   string
	// Raw, when set, is the 200 body sent instead of a built chat.completion.
	Raw string
	// RawStream, when set, is a 200 text/event-stream body sent as is (other servers' framing).
	RawStream string
	// Delay holds the answer back (the request's context ends the wait).
	Delay time.Duration

	// Streaming (requests with "stream": true).
	// Pieces are the content deltas; nil means Content as one piece.
	Pieces []string
	// PieceDelay is waited before each piece (the request's context ends the wait).
	PieceDelay time.Duration
	// StreamError, when set, is sent as an error event after the pieces, in place of the
	// finish_reason chunk and what follows: `data: StreamError` (llama.cpp since PR #16109,
	// OpenAI), or `error: StreamError` with OldErrorFraming (llama.cpp before it).
	StreamError     string
	OldErrorFraming bool
	// Cut ends the stream after the pieces with no finish_reason chunk and no [DONE], as a
	// dropped connection does.
	Cut bool
}

// Double is the endpoint double. Replies are served in order; after the last, the last one
// repeats. With no replies it answers {"content":"ok"}.
type Double struct {
	URL string
	// APIKey, when set, is required as a Bearer token (401 llama.cpp shape otherwise).
	APIKey string

	srv      *httptest.Server
	mu       sync.Mutex
	replies  []Reply
	requests []json.RawMessage
	canceled int
}

// NewDouble starts the double; it stops when the test ends.
func NewDouble(t testing.TB, replies ...Reply) *Double {
	d := &Double{replies: replies}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", d.serve)
	d.srv = httptest.NewServer(mux)
	d.URL = d.srv.URL
	t.Cleanup(d.srv.Close)
	return d
}

// Script replaces the scripted replies.
func (d *Double) Script(replies ...Reply) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.replies = replies
}

// Requests are the bodies received so far.
func (d *Double) Requests() []json.RawMessage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]json.RawMessage(nil), d.requests...)
}

// Canceled counts streams the client went away from before their end.
func (d *Double) Canceled() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.canceled
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// APIErrorBody is an error in OpenAI's shape: {"error":{"message","type","param":null,"code"}}.
func APIErrorBody(message, typ string, code any) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}})
	return string(b)
}

func writeError(w http.ResponseWriter, status int, message, typ string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// llama.cpp's shape: numeric code.
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": message, "type": typ}})
	_, _ = w.Write(b)
}

func (d *Double) serve(w http.ResponseWriter, r *http.Request) {
	if d.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+d.APIKey {
		writeError(w, http.StatusUnauthorized, "Invalid API Key", "authentication_error")
		return
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role      string `json:"role"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		ToolChoice    json.RawMessage `json:"tool_choice"`
		Stream        bool            `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	var raw json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		writeError(w, http.StatusBadRequest, "parse error: "+err.Error(), "invalid_request_error")
		return
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error")
		return
	}
	d.mu.Lock()
	d.requests = append(d.requests, raw)
	var reply Reply
	if len(d.replies) > 0 {
		reply = d.replies[0]
		if len(d.replies) > 1 {
			d.replies = d.replies[1:]
		}
	} else {
		reply = Reply{Content: "ok"}
	}
	d.mu.Unlock()

	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "'messages' must be a non-empty array", "invalid_request_error")
		return
	}
	for i, t := range req.Tools {
		if t.Type != "function" || !validName.MatchString(t.Function.Name) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", i), "invalid_request_error")
			return
		}
	}
	if req.StreamOptions != nil && !req.Stream {
		writeError(w, http.StatusBadRequest, "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "invalid_request_error")
		return
	}
	if len(req.ToolChoice) > 0 && len(req.Tools) == 0 {
		writeError(w, http.StatusBadRequest, "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.", "invalid_request_error")
		return
	}
	pending := map[string]bool{}
	for i, m := range req.Messages {
		switch m.Role {
		case "assistant":
			for _, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Type != "function" || !validName.MatchString(tc.Function.Name) || !json.Valid([]byte(tc.Function.Arguments)) {
					writeError(w, http.StatusBadRequest, fmt.Sprintf("messages[%d]: bad tool call", i), "invalid_request_error")
					return
				}
				pending[tc.ID] = true
			}
		case "tool":
			if !pending[m.ToolCallID] {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("messages[%d]: tool_call_id %q does not answer an earlier tool call", i, m.ToolCallID), "invalid_request_error")
				return
			}
			delete(pending, m.ToolCallID)
		case "user", "system", "developer":
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("messages[%d]: unknown role %q", i, m.Role), "invalid_request_error")
			return
		}
	}
	if len(pending) > 0 {
		writeError(w, http.StatusBadRequest, "an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'", "invalid_request_error")
		return
	}

	if reply.Delay > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(reply.Delay):
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if reply.Status != 0 && reply.Status != http.StatusOK {
		w.WriteHeader(reply.Status)
		_, _ = w.Write([]byte(reply.Body))
		return
	}
	if reply.Raw != "" {
		_, _ = w.Write([]byte(reply.Raw))
		return
	}
	if reply.RawStream != "" {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(reply.RawStream))
		return
	}
	if req.Stream {
		d.stream(w, r, req.Model, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, reply)
		return
	}
	msg := map[string]any{"role": "assistant", "content": reply.Content}
	if reply.ContentNull {
		msg["content"] = nil
	}
	finish := reply.FinishReason
	if len(reply.ToolCalls) > 0 {
		var calls []map[string]any
		for i, tc := range reply.ToolCalls {
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("call_double_%d", i)
			}
			calls = append(calls, map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
		}
		msg["tool_calls"] = calls
		if finish == "" {
			finish = "tool_calls"
		}
	}
	if finish == "" {
		finish = "stop"
	}
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-double", "object": "chat.completion", "created": 0, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage": map[string]any{"prompt_tokens": reply.PromptTokens, "completion_tokens": reply.CompletionTokens,
			"total_tokens": reply.PromptTokens + reply.CompletionTokens},
	})
	_, _ = w.Write(b)
}

// stream answers reply in OpenAI's stream framing (see the package documentation).
func (d *Double) stream(w http.ResponseWriter, r *http.Request, model string, includeUsage bool, reply Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	// send writes one event; false when the client has gone.
	send := func(field string, v any) bool {
		b, ok := v.([]byte)
		if !ok {
			b, _ = json.Marshal(v)
		}
		if _, err := fmt.Fprintf(w, "%s: %s\n\n", field, b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return r.Context().Err() == nil
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		m := map[string]any{"id": "chatcmpl-double", "object": "chat.completion.chunk", "created": 0, "model": model,
			"system_fingerprint": "double",
			"choices":            []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
		if includeUsage {
			m["usage"] = nil
		}
		return m
	}
	gone := func() {
		d.mu.Lock()
		d.canceled++
		d.mu.Unlock()
	}
	if !send("data", chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		gone()
		return
	}
	pieces := reply.Pieces
	if pieces == nil && reply.Content != "" {
		pieces = []string{reply.Content}
	}
	for _, p := range pieces {
		if reply.PieceDelay > 0 {
			select {
			case <-r.Context().Done():
				gone()
				return
			case <-time.After(reply.PieceDelay):
			}
		}
		if !send("data", chunk(map[string]any{"content": p}, nil)) {
			gone()
			return
		}
	}
	for i, tc := range reply.ToolCalls {
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_double_%d", i)
		}
		// OpenAI sends the id and name first, then the arguments in pieces.
		first := map[string]any{"index": i, "id": id, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": ""}}
		rest := map[string]any{"index": i, "function": map[string]any{"arguments": tc.Arguments}}
		if !send("data", chunk(map[string]any{"tool_calls": []any{first}}, nil)) ||
			!send("data", chunk(map[string]any{"tool_calls": []any{rest}}, nil)) {
			gone()
			return
		}
	}
	switch {
	case reply.StreamError != "":
		field := "data"
		if reply.OldErrorFraming {
			field = "error"
		}
		send(field, []byte(reply.StreamError))
		return
	case reply.Cut:
		return
	}
	finish := reply.FinishReason
	if finish == "" {
		finish = "stop"
		if len(reply.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	if !send("data", chunk(map[string]any{}, finish)) {
		gone()
		return
	}
	if includeUsage {
		m := chunk(nil, nil)
		m["choices"] = []any{}
		m["usage"] = map[string]any{"prompt_tokens": reply.PromptTokens, "completion_tokens": reply.CompletionTokens,
			"total_tokens": reply.PromptTokens + reply.CompletionTokens}
		if !send("data", m) {
			gone()
			return
		}
	}
	send("data", []byte("[DONE]"))
}
