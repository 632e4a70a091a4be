package openaiface

import (
	"encoding/json"
	"net/http"
	"strings"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// sse writes a completion's chunks as server-sent events, as OpenAI streams them: a first
// chunk with the assistant's role, content deltas, tool-call deltas, a last chunk with the
// finish reason, the usage chunk when asked for, and "data: [DONE]". What the mesh does between
// (retrieval, model turns, tool calls) goes in chunks with no choices and a "toolmesh" field,
// which OpenAI clients pass over.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	id      string
	created int64
	model   string
	usage   bool
	started bool
	// answered is the answer text sent so far.
	answered strings.Builder
	failed   bool
}

// nullUsage is the usage of every chunk but the last, when the client asked for usage.
var nullUsage = json.RawMessage("null")

func (s *sse) start() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx would hold the events back
	s.w.WriteHeader(http.StatusOK)
	s.started = true
	empty := ""
	s.send(s.chunk(chunkChoice{Delta: delta{Role: "assistant", Content: &empty}}))
}

func (s *sse) chunk(choices ...chunkChoice) chunk {
	c := chunk{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model, Choices: choices}
	if c.Choices == nil {
		c.Choices = []chunkChoice{}
	}
	if s.usage {
		c.Usage = nullUsage
	}
	return c
}

func (s *sse) extension(ext *extension) {
	c := s.chunk()
	c.Tool = ext
	s.send(c)
}

// event writes what one event of the agent's stream says; for the last it finishes the
// stream and returns the query's result.
func (s *sse) event(ev *toolmeshv1.QueryStreamResponse) *toolmeshv1.QueryResponse {
	switch e := ev.GetEvent().(type) {
	case *toolmeshv1.QueryStreamResponse_Retrieved:
		s.extension(&extension{Event: "retrieved", Step: record(stepSummary(e.Retrieved))})
	case *toolmeshv1.QueryStreamResponse_ModelOutput:
		s.extension(&extension{Event: "model_output", Step: record(stepSummary(e.ModelOutput))})
	case *toolmeshv1.QueryStreamResponse_ToolCallStarted:
		s.extension(&extension{Event: "tool_call_started", ToolCall: record(e.ToolCallStarted)})
	case *toolmeshv1.QueryStreamResponse_ToolCallFinished:
		s.extension(&extension{Event: "tool_call_finished", ToolCall: record(e.ToolCallFinished)})
	case *toolmeshv1.QueryStreamResponse_AnswerDelta:
		s.text(e.AnswerDelta)
	case *toolmeshv1.QueryStreamResponse_Done:
		s.finish(e.Done)
		return e.Done
	}
	return nil
}

func (s *sse) text(t string) {
	if t == "" {
		return
	}
	s.answered.WriteString(t)
	s.send(s.chunk(chunkChoice{Delta: delta{Content: &t}}))
}

// finish writes the end of the stream for the query's result.
func (s *sse) finish(resp *toolmeshv1.QueryResponse) {
	if s.model == "" || resp.GetModel() != "" {
		s.model = modelOf(s.model, resp)
	}
	// Text the loop settled on without streaming it (an answer given with function calls, or
	// one put together after a failure) is sent now.
	if a := resp.GetAnswer(); strings.HasPrefix(a, s.answered.String()) {
		s.text(a[s.answered.Len():])
	}
	if _, e, failed := failedWithout(resp); failed {
		s.error(e, summary(resp))
		return
	}
	// Each call as OpenAI streams one: its id and name first, then its arguments.
	for i, c := range resp.GetFunctionCalls() {
		s.send(s.chunk(chunkChoice{Delta: delta{ToolCalls: []toolCall{{Index: &i, ID: c.GetId(), Type: "function",
			Function: functionCall{Name: c.GetToolId()}}}}}))
		s.send(s.chunk(chunkChoice{Delta: delta{ToolCalls: []toolCall{{Index: &i, Function: functionCall{Arguments: argumentsJSON(c)}}}}}))
	}
	fr := finishOf(resp)
	s.send(s.chunk(chunkChoice{Delta: delta{}, FinishReason: &fr}))
	ext := summary(resp)
	ext.Event = "done"
	s.extension(ext)
	if s.usage {
		c := s.chunk()
		c.Usage, _ = json.Marshal(usageOf(resp))
		s.send(c)
	}
	s.line("data: [DONE]\n\n")
}

// error ends a started stream with OpenAI's error event.
func (s *sse) error(e apiError, ext *extension) {
	s.failed = true
	b, _ := json.Marshal(errorResponse{Error: e, Toolmesh: ext})
	s.line("data: " + string(b) + "\n\n")
}

func (s *sse) comment(text string) { s.line(": " + text + "\n\n") }

func (s *sse) send(c chunk) {
	b, err := json.Marshal(c)
	if err != nil {
		return
	}
	s.line("data: " + string(b) + "\n\n")
}

// line writes and flushes; a client that went away is noticed through the request's context.
func (s *sse) line(l string) {
	if _, err := s.w.Write([]byte(l)); err != nil {
		return
	}
	_ = s.rc.Flush()
}
