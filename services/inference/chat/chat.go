// Package chat is the inference service's second backend: a client of the OpenAI-compatible
// POST /v1/chat/completions with "tools" (llama-server started with a tool-calling chat
// template and --jinja, vLLM, Ollama, or any OpenAI-compatible server). Where package llama
// drives Gorilla OpenFunctions v2 through its own prompt and a grammar, this backend leaves
// the prompt format to the server's chat template and reads the calls from the answer's
// tool_calls. The conversation's earlier turns are sent as they are, the caller's own functions
// are tools beside the mesh's, and the caller's sampling options are the request's. Compose
// streams the final answer from the calls' results (a streamed chat completion without tools,
// stream_options.include_usage set).
//
// Tool ids (SERVER.TOOL) are not valid OpenAI function names; toolname.Names maps them to names
// that are (SERVER__TOOL) and back exactly. Failures come back as *Error, whose Code is the gRPC
// code the service answers with. Package chattest holds a double of the endpoint.
//
// Checked against llama-server b11669 (Debian forky 0.7.0) with a model whose GGUF has no chat
// template: it accepts "tools" and tool/assistant history messages without complaint, but its
// fallback template leaves the tools out of the prompt, so such a model never calls a tool
// (the answer is plain content). A real tool-calling model needs a template that renders tools.
package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/redact"
	"github.com/toolmesh/toolmesh/internal/toolid/toolname"
	"github.com/toolmesh/toolmesh/services/inference/llmhttp"
)

// Defaults applied by New to zero fields of Config.
const (
	DefaultTimeout   = 2 * time.Minute
	DefaultMaxTokens = 512
)

const (
	maxResponseBytes = 16 << 20
	maxErrorBytes    = 64 << 10
)

// Config configures a Client.
type Config struct {
	// URL is the server's base URL: http://HOST:PORT (the client posts to /v1/chat/completions)
	// or a base that already ends in /v1 (OpenAI style, e.g. http://HOST:11434/v1 for Ollama).
	URL string
	// Model is sent as "model" (vLLM and Ollama pick the model by it; llama-server ignores it).
	Model string
	// APIKey, when set, is sent as "Authorization: Bearer KEY". It is never logged and never
	// appears in errors.
	APIKey string
	// Timeout bounds one request (default DefaultTimeout).
	Timeout time.Duration
	// MaxTokens is max_tokens when Generate is given 0 (default DefaultMaxTokens).
	MaxTokens int
	// Temperature, when set, is sent as "temperature"; nil leaves it to the server.
	Temperature *float64
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	u, err := llmhttp.ParseBaseURL("chat", c.URL)
	if err != nil {
		return err
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("chat: URL: %q has a query or fragment (put the key in TOOLMESH_LLM_API_KEY)", redact.URL(u.String()))
	}
	if strings.TrimSpace(c.Model) == "" {
		return errors.New("chat: Model: required (vLLM and Ollama choose the model by it)")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("chat: Timeout: %v is negative", c.Timeout)
	}
	if c.MaxTokens < 0 {
		return fmt.Errorf("chat: MaxTokens: %d is negative", c.MaxTokens)
	}
	if c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2 || *c.Temperature != *c.Temperature) {
		return fmt.Errorf("chat: Temperature: %v is not in [0, 2]", *c.Temperature)
	}
	if strings.ContainsAny(c.APIKey, "\r\n") {
		return errors.New("chat: APIKey: contains a line break")
	}
	return nil
}

// Client calls one OpenAI-compatible server. It is safe for concurrent use.
type Client struct {
	cfg      Config
	endpoint string
	hc       *http.Client
	ownHC    bool
	log      *slog.Logger
}

// New returns a client of the server at cfg.URL. A nil httpClient means a private one (Close
// releases its idle connections); a nil logger discards logs.
func New(cfg Config, httpClient *http.Client, logger *slog.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	u, _ := url.Parse(cfg.URL)
	u.Path = strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/v1") {
		u.Path += "/v1"
	}
	u.Path += "/chat/completions"
	own := httpClient == nil
	if own {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 16
		httpClient = &http.Client{Transport: tr}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{
		cfg: cfg, endpoint: u.String(), hc: httpClient, ownHC: own,
		log: logger.With("component", "chat", "endpoint", u.Redacted(), "model", cfg.Model),
	}, nil
}

// Config is the client's configuration with the defaults applied.
func (c *Client) Config() Config { return c.cfg }

// Endpoint is the URL the client posts to.
func (c *Client) Endpoint() string { return c.endpoint }

// Close releases idle connections of the client's own HTTP client.
func (c *Client) Close() error {
	if c.ownHC {
		c.hc.CloseIdleConnections()
	}
	return nil
}

// Call is one tool call of the model.
type Call struct {
	// ToolID is the tool's id (SERVER.TOOL), mapped back from the function name.
	ToolID string
	// Arguments are the call's arguments (an empty map when it has none).
	Arguments map[string]any
	// CallID is the server's id of the call (tool_calls[].id), to quote in the tool message.
	CallID string
}

// Result is what the model answered.
type Result struct {
	// Calls are the tool calls, in the order of tool_calls.
	Calls []Call
	// Answer is the message's content (often empty when there are calls).
	Answer string
	// RawOutput is the assistant message as the server sent it (JSON).
	RawOutput string
	// FinishReason is "stop", "length", "tool_calls"...
	FinishReason string
	// PromptTokens and CompletionTokens are the answer's usage (0 when not given).
	PromptTokens, CompletionTokens int
}

// Request is what Generate asks the model.
type Request struct {
	// Query is the user's current question.
	Query string
	// Messages are the conversation's earlier turns (OpenAI's messages, oldest first), sent as
	// they are before the question; "developer" is sent as "system", which most servers' chat
	// templates know and many do not know "developer".
	Messages []*toolmeshv1.Message
	// Tools are the mesh's tools, best first; Functions the caller's own, offered beside them
	// under their own names.
	Tools     []*toolmeshv1.Tool
	Functions []*toolmeshv1.Function
	// History holds this turn's calls so far, the caller's functions' included, sent after the
	// question.
	History []*toolmeshv1.ToolCallRecord
	// RequireCall makes the model call something: tool_choice "required", or the one tool or
	// function offered, by name.
	RequireCall bool
	// MaxTokens bounds the answer (0: Config.MaxTokens); Generation's max_tokens, when set,
	// bounds it too.
	MaxTokens  int
	Generation *toolmeshv1.GenerationOptions
}

// Request body types (exported shape is the OpenAI one).
type (
	chatRequest struct {
		Model       string    `json:"model"`
		Messages    []message `json:"messages"`
		Tools       []toolDef `json:"tools,omitempty"`
		ToolChoice  any       `json:"tool_choice,omitempty"` // "auto", "required" or a namedChoice
		MaxTokens   int       `json:"max_tokens,omitempty"`
		Temperature *float64  `json:"temperature,omitempty"`
		TopP        *float64  `json:"top_p,omitempty"`
		Seed        *int64    `json:"seed,omitempty"`
		Stop        []string  `json:"stop,omitempty"`
		Stream      bool      `json:"stream"`
	}
	namedChoice struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	message struct {
		Role       string     `json:"role"`
		Content    *string    `json:"content"`
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}
	toolCall struct {
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function functionCall `json:"function"`
	}
	functionCall struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	toolDef struct {
		Type     string      `json:"type"`
		Function functionDef `json:"function"`
	}
	functionDef struct {
		Name        string         `json:"name"`
		Description string         `json:"description,omitempty"`
		Parameters  map[string]any `json:"parameters"`
	}
)

// BuildRequest is the JSON body Generate posts, and the names it used for the tools.
func (c *Client) BuildRequest(r Request) ([]byte, *toolname.Names, error) {
	// The caller's functions are named first, so they keep their names: a mesh tool whose name
	// would clash with one gets a hashed one (the api refuses such a clash before it gets here).
	names := toolname.New()
	req := c.sampled(r.MaxTokens, r.Generation)
	for i, f := range r.Functions {
		if !toolname.Valid(f.GetName()) {
			return nil, nil, fmt.Errorf("chat: functions[%d]: %q is not a function name", i, f.GetName())
		}
		if names.Name(f.GetName()) != "" {
			return nil, nil, fmt.Errorf("chat: functions[%d]: %q is offered twice", i, f.GetName())
		}
		params := map[string]any{"type": "object", "properties": map[string]any{}}
		if p := f.GetParameters(); p != nil && len(p.GetFields()) > 0 {
			params = p.AsMap()
		}
		req.Tools = append(req.Tools, toolDef{Type: "function",
			Function: functionDef{Name: names.Add(f.GetName()), Description: f.GetDescription(), Parameters: params}})
	}
	msgs, err := conversationMessages(r.Messages, names)
	if err != nil {
		return nil, nil, err
	}
	for i, t := range r.Tools {
		if t.GetId() == "" {
			return nil, nil, fmt.Errorf("chat: tools[%d]: no id", i)
		}
		if names.Name(t.GetId()) != "" {
			return nil, nil, fmt.Errorf("chat: tools[%d]: %q is offered twice", i, t.GetId())
		}
		params := map[string]any{"type": "object", "properties": map[string]any{}}
		if s := t.GetInputSchema(); s != nil && len(s.GetFields()) > 0 {
			params = s.AsMap()
		}
		desc := t.GetDescription()
		if desc == "" {
			desc = t.GetTitle()
		}
		req.Tools = append(req.Tools, toolDef{Type: "function",
			Function: functionDef{Name: names.Add(t.GetId()), Description: desc, Parameters: params}})
	}
	switch {
	case len(req.Tools) == 0:
	case r.RequireCall && len(req.Tools) == 1:
		choice := namedChoice{Type: "function"}
		choice.Function.Name = req.Tools[0].Function.Name
		req.ToolChoice = choice
	case r.RequireCall:
		req.ToolChoice = "required"
	default:
		req.ToolChoice = "auto"
	}
	req.Messages = append(msgs, message{Role: "user", Content: &r.Query})
	hist, err := historyMessages(r.History, names, callIDs(r.Messages, r.History))
	if err != nil {
		return nil, nil, err
	}
	req.Messages = append(req.Messages, hist...)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, fmt.Errorf("chat: encoding the request: %w", err)
	}
	return body, names, nil
}

// sampled is a request with the sampling options set: the caller's where given, else the
// configured ones. maxTokens and gen's max_tokens both bound the answer.
func (c *Client) sampled(maxTokens int, gen *toolmeshv1.GenerationOptions) chatRequest {
	switch g := int(gen.GetMaxTokens()); {
	case g > 0 && (maxTokens <= 0 || g < maxTokens):
		maxTokens = g
	case maxTokens <= 0:
		maxTokens = c.cfg.MaxTokens
	}
	req := chatRequest{Model: c.cfg.Model, MaxTokens: maxTokens, Temperature: c.cfg.Temperature}
	if gen != nil {
		req.TopP, req.Seed, req.Stop = gen.TopP, gen.Seed, gen.Stop
		if gen.Temperature != nil {
			req.Temperature = gen.Temperature
		}
	}
	return req
}

// conversationMessages turns the conversation's earlier turns into chat messages as they are,
// "developer" sent as "system"; the functions an assistant called are named through names.
func conversationMessages(msgs []*toolmeshv1.Message, names *toolname.Names) ([]message, error) {
	out := make([]message, 0, len(msgs))
	for i, m := range msgs {
		content := m.GetContent()
		msg := message{Role: m.GetRole(), Content: &content, ToolCallID: m.GetToolCallId()}
		switch m.GetRole() {
		case "developer":
			msg.Role = "system"
		case "system", "user", "tool":
		case "assistant":
			for j, fc := range m.GetToolCalls() {
				args := []byte("{}")
				if a := fc.GetArguments(); a != nil {
					var err error
					if args, err = json.Marshal(a.AsMap()); err != nil {
						return nil, fmt.Errorf("chat: messages[%d].tool_calls[%d]: arguments: %w", i, j, err)
					}
				}
				msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: fc.GetId(), Type: "function",
					Function: functionCall{Name: names.Add(fc.GetToolId()), Arguments: string(args)}})
			}
			if content == "" && len(msg.ToolCalls) > 0 {
				msg.Content = nil // OpenAI's own shape of a message that only calls
			}
		default:
			return nil, fmt.Errorf("chat: messages[%d]: unknown role %q", i, m.GetRole())
		}
		out = append(out, msg)
	}
	return out, nil
}

// callIDs are the call ids the caller gave: the ids its conversation's calls and this turn's
// calls of its functions go by.
func callIDs(msgs []*toolmeshv1.Message, history []*toolmeshv1.ToolCallRecord) map[string]bool {
	ids := map[string]bool{}
	for _, m := range msgs {
		for _, fc := range m.GetToolCalls() {
			ids[fc.GetId()] = true
		}
		ids[m.GetToolCallId()] = true
	}
	for _, r := range history {
		ids[r.GetCallId()] = true
	}
	return ids
}

// historyMessages turns executed calls into chat messages: for each step, one assistant
// message with the step's calls as tool_calls, then one "tool" message per call with its output
// and the matching tool_call_id. A call of the caller's function goes by the id the caller gave
// it (call_id); the others get call_1, call_2... in record order, skipping every id in taken.
// Records with the same non-zero Step that follow each other are one step (parallel calls;
// negative steps are earlier requests of the same turn); an error output is prefixed "Error: ".
// Tools that are no longer offered are named through names all the same.
func historyMessages(history []*toolmeshv1.ToolCallRecord, names *toolname.Names, taken map[string]bool) ([]message, error) {
	var out []message
	var calls []toolCall
	var results []message
	flush := func() {
		if len(calls) > 0 {
			out = append(out, message{Role: "assistant", ToolCalls: calls})
			out = append(out, results...)
		}
		calls, results = nil, nil
	}
	n := 0
	prevStep := int32(0)
	for i, r := range history {
		if r == nil {
			continue
		}
		if r.GetTool() == "" {
			return nil, fmt.Errorf("chat: history[%d]: no tool", i)
		}
		if r.GetStep() == 0 || r.GetStep() != prevStep {
			flush()
		}
		prevStep = r.GetStep()
		args := []byte("{}")
		if a := r.GetArguments(); a != nil {
			var err error
			if args, err = json.Marshal(a.AsMap()); err != nil {
				return nil, fmt.Errorf("chat: history[%d]: arguments: %w", i, err)
			}
		}
		id := r.GetCallId()
		for id == "" {
			n++
			if c := fmt.Sprintf("call_%d", n); !taken[c] {
				id = c
			}
		}
		calls = append(calls, toolCall{ID: id, Type: "function",
			Function: functionCall{Name: names.Add(r.GetTool()), Arguments: string(args)}})
		content := r.GetOutput()
		if r.GetIsError() {
			content = "Error: " + content
		}
		results = append(results, message{Role: "tool", Content: &content, ToolCallID: id})
	}
	flush()
	return out, nil
}

// Generate asks the model for tool calls or an answer to the request's question.
func (c *Client) Generate(ctx context.Context, r Request) (*Result, error) {
	body, names, err := c.BuildRequest(r)
	if err != nil {
		return nil, &Error{Op: "chat", Code: codes.InvalidArgument, Message: err.Error()}
	}
	raw, err := c.post(ctx, body)
	if err != nil {
		return nil, err
	}
	res, err := ParseResponse(raw, names)
	if err != nil {
		return nil, err
	}
	c.log.DebugContext(ctx, "chat completion", "calls", len(res.Calls), "finish_reason", res.FinishReason,
		"prompt_tokens", res.PromptTokens, "completion_tokens", res.CompletionTokens)
	return res, nil
}

// ParseResponse reads a chat.completion answer: choices[0].message's tool_calls (function
// names mapped back through names, arguments a JSON object in a string) and content, and usage.
func ParseResponse(raw []byte, names *toolname.Names) (*Result, error) {
	var resp struct {
		Choices []struct {
			Message      json.RawMessage `json:"message"`
			FinishReason string          `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, badAnswer(fmt.Errorf("not a chat completion: %v", err), raw)
	}
	if len(resp.Choices) == 0 || len(resp.Choices[0].Message) == 0 || string(resp.Choices[0].Message) == "null" {
		return nil, badAnswer(errors.New("no choices[0].message"), raw)
	}
	var msg struct {
		Content   *string `json:"content"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(resp.Choices[0].Message, &msg); err != nil {
		return nil, badAnswer(fmt.Errorf("choices[0].message: %v", err), raw)
	}
	ch := resp.Choices[0]
	res := &Result{RawOutput: string(ch.Message), FinishReason: ch.FinishReason,
		PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens}
	if msg.Content != nil {
		res.Answer = *msg.Content
	}
	for i, tc := range msg.ToolCalls {
		name := tc.Function.Name
		what := fmt.Sprintf("tool call %d (%q)", i, name)
		if tc.ID != "" {
			what = fmt.Sprintf("tool call %d (%q, id %q)", i, name, tc.ID)
		}
		id, ok := names.ID(name)
		if !ok {
			return nil, modelError(ch.FinishReason, fmt.Sprintf("%s: the model called a function that was not offered", what), raw)
		}
		args, err := parseArguments(tc.Function.Arguments)
		if err != nil {
			return nil, modelError(ch.FinishReason, fmt.Sprintf("%s: arguments: %v", what, err), raw)
		}
		res.Calls = append(res.Calls, Call{ToolID: id, Arguments: args, CallID: tc.ID})
	}
	return res, nil
}

// parseArguments reads function.arguments: a string holding a JSON object (OpenAI), or the
// object itself (some servers); "" and null mean no arguments.
func parseArguments(raw json.RawMessage) (map[string]any, error) {
	text := []byte(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		text = []byte(s)
	}
	if t := bytes.TrimSpace(text); len(t) == 0 || string(t) == "null" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid JSON (%v): %s", err, llmhttp.Snippet(text))
	}
	if dec.More() {
		return nil, fmt.Errorf("not valid JSON (text after the object): %s", llmhttp.Snippet(text))
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not a JSON object: %s", llmhttp.Snippet(text))
	}
	return numbersToFloat(m).(map[string]any), nil
}

// numbersToFloat turns json.Number into float64 (as structpb and encoding/json do), keeping
// integers that float64 cannot hold exactly as int64.
func numbersToFloat(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbersToFloat(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbersToFloat(e)
		}
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return f
		}
		return x.String()
	}
	return v
}

// modelError is an answer whose calls we cannot use: cut off (finish_reason "length") it is
// ResourceExhausted (more max_tokens would help), otherwise Internal.
func modelError(finish, msg string, raw []byte) *Error {
	if finish == "length" {
		return &Error{Op: "parse", Code: codes.ResourceExhausted,
			Message: msg + " (the answer was cut off at max_tokens: finish_reason \"length\")"}
	}
	return &Error{Op: "parse", Code: codes.Internal, Message: msg}
}

// badAnswer is Unavailable for the reason llama's is: an unreadable answer is a bad gateway.
func badAnswer(err error, raw []byte) *Error {
	return &Error{Op: "parse", Code: codes.Unavailable, Message: fmt.Sprintf("unreadable answer (%v): %s", err, llmhttp.Snippet(raw)), err: err, sentinel: llmhttp.ErrUnreadable}
}

// errTimeout is the cause of a context that ran out of Timeout.
type errTimeout struct{ d time.Duration }

func (e errTimeout) Error() string { return fmt.Sprintf("timed out after %v", e.d) }
func (e errTimeout) Unwrap() error { return context.DeadlineExceeded }

// send posts body, asking for accept; the caller closes the answer's body. A non-nil error is
// an *Error.
func (c *Client) send(ctx context.Context, body []byte, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Op: "chat", Code: codes.Internal, Message: "building the request: " + c.redact(err.Error())}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := llmhttp.Do(c.hc, req)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	return resp, nil
}

// errorAnswer is the error for a non-200 answer, quoting its body.
func (c *Client) errorAnswer(ctx context.Context, resp *http.Response) *Error {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	if err != nil && len(raw) == 0 {
		return c.transportError(ctx, err)
	}
	e := statusError(resp.StatusCode, raw)
	e.Message = c.redact(e.Message)
	return e
}

// post sends body and returns the 200 answer.
func (c *Client) post(ctx context.Context, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, c.cfg.Timeout, errTimeout{c.cfg.Timeout})
	defer cancel()
	start := time.Now()
	resp, err := c.send(ctx, body, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.log.DebugContext(ctx, "chat completions call", "status", resp.StatusCode, "duration", time.Since(start))
		return nil, c.errorAnswer(ctx, resp)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	c.log.DebugContext(ctx, "chat completions call", "status", resp.StatusCode, "duration", time.Since(start))
	if len(raw) > maxResponseBytes {
		return nil, &Error{Op: "chat", Code: codes.ResourceExhausted, Message: fmt.Sprintf("answer larger than %d bytes", maxResponseBytes)}
	}
	return raw, nil
}

func (c *Client) transportError(ctx context.Context, err error) *Error {
	if ctx.Err() != nil {
		var te errTimeout
		if errors.As(context.Cause(ctx), &te) {
			return &Error{Op: "chat", Code: codes.DeadlineExceeded, Message: te.Error(), sentinel: context.DeadlineExceeded}
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return &Error{Op: "chat", Code: codes.DeadlineExceeded, Message: "deadline exceeded", sentinel: context.DeadlineExceeded}
		}
		return &Error{Op: "chat", Code: codes.Canceled, Message: "canceled", sentinel: context.Canceled}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // drop the method and URL
	}
	msg := c.redact(err.Error())
	return &Error{Op: "chat", Code: codes.Unavailable, Message: "unreachable: " + msg, err: errors.New(msg)}
}

// redact makes sure no error text carries the API key (a server or proxy may echo it).
func (c *Client) redact(s string) string {
	if c.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, c.cfg.APIKey, "[redacted]")
}
