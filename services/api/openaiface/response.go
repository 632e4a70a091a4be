package openaiface

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// The objects of OpenAI's wire format that the face writes, in the field order OpenAI uses.
type (
	completion struct {
		ID      string     `json:"id"`
		Object  string     `json:"object"`
		Created int64      `json:"created"`
		Model   string     `json:"model"`
		Choices []choice   `json:"choices"`
		Usage   *usage     `json:"usage"`
		Tool    *extension `json:"toolmesh,omitempty"`
	}
	choice struct {
		Index        int       `json:"index"`
		Message      message   `json:"message"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason string    `json:"finish_reason"`
	}
	message struct {
		Role        string     `json:"role"`
		Content     *string    `json:"content"`
		Refusal     *string    `json:"refusal"`
		ToolCalls   []toolCall `json:"tool_calls,omitempty"`
		Annotations []struct{} `json:"annotations"`
	}
	toolCall struct {
		Index    *int         `json:"index,omitempty"` // in a delta only
		ID       string       `json:"id,omitempty"`
		Type     string       `json:"type,omitempty"`
		Function functionCall `json:"function"`
	}
	functionCall struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
	usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}

	chunk struct {
		ID      string        `json:"id"`
		Object  string        `json:"object"`
		Created int64         `json:"created"`
		Model   string        `json:"model"`
		Choices []chunkChoice `json:"choices"`
		// Usage is null on every chunk but the last when the client asked for it, and
		// absent otherwise, as OpenAI sends it.
		Usage json.RawMessage `json:"usage,omitempty"`
		Tool  *extension      `json:"toolmesh,omitempty"`
	}
	chunkChoice struct {
		Index        int       `json:"index"`
		Delta        delta     `json:"delta"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason *string   `json:"finish_reason"`
	}
	delta struct {
		Role      string     `json:"role,omitempty"`
		Content   *string    `json:"content,omitempty"`
		ToolCalls []toolCall `json:"tool_calls,omitempty"`
	}

	modelObject struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	modelList struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}
)

// extension is toolmesh's own account of a completion, in a "toolmesh" field OpenAI clients
// ignore: what the mesh called, and the trace to look at. In a stream, Event says which step of
// the loop a chunk reports.
type extension struct {
	Event      string            `json:"event,omitempty"`
	TraceID    string            `json:"trace_id,omitempty"`
	StopReason string            `json:"stop_reason,omitempty"`
	Error      string            `json:"error,omitempty"`
	Iterations int32             `json:"iterations,omitempty"`
	DurationMs float64           `json:"duration_ms,omitempty"`
	ToolCalls  []json.RawMessage `json:"tool_calls,omitempty"`
	Steps      []json.RawMessage `json:"steps,omitempty"`
	// ToolCall is the call a stream's tool_call_started or tool_call_finished event is about;
	// Step the step of a step event.
	ToolCall json.RawMessage `json:"tool_call,omitempty"`
	Step     json.RawMessage `json:"step,omitempty"`
}

var protoJSON = protojson.MarshalOptions{UseProtoNames: true}

// record is a native message as its REST JSON reads (snake_case names, as on /v1/query).
func record(m proto.Message) json.RawMessage {
	b, err := protoJSON.Marshal(m)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// summary is the extension of a finished query.
func summary(resp *toolmeshv1.QueryResponse) *extension {
	ext := &extension{TraceID: resp.GetTraceId(), StopReason: stopReason(resp.GetStopReason()), Error: resp.GetError(),
		Iterations: resp.GetIterations(), DurationMs: resp.GetDurationMs()}
	for _, c := range resp.GetToolCalls() {
		ext.ToolCalls = append(ext.ToolCalls, record(c))
	}
	for _, s := range resp.GetSteps() {
		ext.Steps = append(ext.Steps, record(stepSummary(s)))
	}
	return ext
}

// stepSummary is a step without the model's raw output (the calls and answer say what it meant)
// and with the tools it offered by id.
func stepSummary(s *toolmeshv1.Step) *toolmeshv1.Step {
	out := &toolmeshv1.Step{Number: s.GetNumber(), Usage: s.GetUsage(), DroppedToolIds: s.GetDroppedToolIds(),
		RetrievalStartMs: s.GetRetrievalStartMs(), RetrievalMs: s.GetRetrievalMs(), ModelStartMs: s.GetModelStartMs(),
		ModelMs: s.GetModelMs(), History: s.GetHistory()}
	for _, t := range s.GetRetrieved() {
		out.Retrieved = append(out.Retrieved, &toolmeshv1.ScoredTool{Tool: &toolmeshv1.Tool{Id: t.GetTool().GetId()}, Score: t.GetScore()})
	}
	return out
}

// stopReason is a stop reason as the REST API spells it, without its prefix: "answered".
func stopReason(r toolmeshv1.StopReason) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "STOP_REASON_"))
}

// completionOf is the chat.completion object of a finished query.
func completionOf(id string, created int64, model string, resp *toolmeshv1.QueryResponse) completion {
	msg := message{Role: "assistant", Annotations: []struct{}{}}
	if a := resp.GetAnswer(); a != "" || len(resp.GetFunctionCalls()) == 0 {
		msg.Content = &a
	}
	for _, c := range resp.GetFunctionCalls() {
		msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: c.GetId(), Type: "function",
			Function: functionCall{Name: c.GetToolId(), Arguments: argumentsJSON(c)}})
	}
	return completion{ID: id, Object: "chat.completion", Created: created, Model: modelOf(model, resp),
		Choices: []choice{{Message: msg, FinishReason: finishOf(resp)}}, Usage: usageOf(resp), Tool: summary(resp)}
}

func modelOf(requested string, resp *toolmeshv1.QueryResponse) string {
	if m := resp.GetModel(); m != "" {
		return m
	}
	return requested
}

func finishOf(resp *toolmeshv1.QueryResponse) string {
	switch fr := resp.GetFinishReason(); fr {
	case "length", "tool_calls":
		return fr
	}
	if len(resp.GetFunctionCalls()) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func usageOf(resp *toolmeshv1.QueryResponse) *usage {
	u := resp.GetUsage()
	return &usage{PromptTokens: int(u.GetPromptTokens()), CompletionTokens: int(u.GetCompletionTokens()),
		TotalTokens: int(u.GetPromptTokens() + u.GetCompletionTokens())}
}

// argumentsJSON is a call's arguments as OpenAI sends them: a JSON object in a string.
func argumentsJSON(c *toolmeshv1.FunctionCall) string {
	if c.GetArguments() == nil {
		return "{}"
	}
	b, err := json.Marshal(c.GetArguments().AsMap())
	if err != nil {
		return "{}"
	}
	return string(b)
}

// newID names a completion as OpenAI's do: "chatcmpl-" and random characters.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "chatcmpl-" + hex.EncodeToString(b[:])
}
