package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/toolid/toolname"
	"github.com/toolmesh/toolmesh/services/inference/llmhttp"
)

// ComposeResult is how a composed answer ended.
type ComposeResult struct {
	// Answer is the whole text, as the deltas gave it.
	Answer string
	// FinishReason is "stop", or "length" when max_tokens cut the answer ("" when the server
	// did not say).
	FinishReason string
	// PromptTokens and CompletionTokens are the answer's usage (0 when the server sent none).
	PromptTokens, CompletionTokens int
}

// composeInstruction opens the one user message of a compose request.
const composeInstruction = "Answer the question below for the person who asked it, in plain language, " +
	"using the results of the tool calls that were made for it. Use only those results; if they do " +
	"not answer the question, say so. Do not call any tool and do not show the calls themselves."

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ComposeRequest is what Compose asks the model.
type ComposeRequest struct {
	// Query is the user's current question.
	Query string
	// Messages are the conversation's earlier turns, sent as they are before the question (as
	// Request's are).
	Messages []*toolmeshv1.Message
	// History holds the calls made for the question, with their results.
	History []*toolmeshv1.ToolCallRecord
	// MaxTokens bounds the answer (0: Config.MaxTokens); Generation's max_tokens, when set,
	// bounds it too.
	MaxTokens  int
	Generation *toolmeshv1.GenerationOptions
}

// BuildComposeRequest is the JSON body Compose posts: a streamed chat completion with no tools:
// the conversation's earlier turns as they are, then one user message holding the instruction,
// the question and each call of history with its arguments and result. One user message,
// rather than tool-call history, because a server whose chat template has no tool support may
// refuse tool messages or fail to render them, and some templates refuse a system message or
// two user turns in a row. (Earlier turns with calls of the caller's functions are sent as they
// are: the server took them in Generate.)
func (c *Client) BuildComposeRequest(r ComposeRequest) ([]byte, error) {
	msg, err := composeMessage(r.Query, r.History)
	if err != nil {
		return nil, err
	}
	msgs, err := conversationMessages(r.Messages, toolname.New())
	if err != nil {
		return nil, err
	}
	req := struct {
		chatRequest
		StreamOptions streamOptions `json:"stream_options"`
	}{
		chatRequest: c.sampled(r.MaxTokens, r.Generation),
		// Without it OpenAI sends no usage in a stream (llama-server b11669 neither).
		StreamOptions: streamOptions{IncludeUsage: true},
	}
	req.Stream = true
	req.Messages = append(msgs, message{Role: "user", Content: &msg})
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("chat: encoding the request: %w", err)
	}
	return body, nil
}

// composeMessage is the instruction, the question and the calls with their results.
func composeMessage(query string, history []*toolmeshv1.ToolCallRecord) (string, error) {
	var b strings.Builder
	b.WriteString(composeInstruction)
	b.WriteString("\n\nQuestion: ")
	b.WriteString(query)
	n := 0
	for i, r := range history {
		if r == nil {
			continue
		}
		if r.GetTool() == "" {
			return "", fmt.Errorf("chat: history[%d]: no tool", i)
		}
		if n == 0 {
			b.WriteString("\n\nTool calls and their results:")
		}
		n++
		args := []byte("{}")
		if a := r.GetArguments(); a != nil {
			var err error
			if args, err = json.Marshal(a.AsMap()); err != nil {
				return "", fmt.Errorf("chat: history[%d]: arguments: %w", i, err)
			}
		}
		fmt.Fprintf(&b, "\n%d. %s %s\n", n, r.GetTool(), args)
		if r.GetIsError() {
			b.WriteString("Error: ")
		} else {
			b.WriteString("Result: ")
		}
		b.WriteString(r.GetOutput())
	}
	if n == 0 {
		b.WriteString("\n\nNo tool was called.")
	}
	return b.String(), nil
}

// Compose streams the model's answer to the question from the calls in its history: fn gets
// each piece of content as it arrives (never empty). An error from fn stops the request and is
// returned as is. Cancelling ctx (the caller went away) closes the connection, which stops the
// server's generation.
func (c *Client) Compose(ctx context.Context, r ComposeRequest, fn func(delta string) error) (*ComposeResult, error) {
	body, err := c.BuildComposeRequest(r)
	if err != nil {
		return nil, &Error{Op: "chat", Code: codes.InvalidArgument, Message: err.Error()}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.cfg.Timeout, errTimeout{c.cfg.Timeout})
	defer cancel()
	start := time.Now()
	resp, err := c.send(ctx, body, "text/event-stream")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.errorAnswer(ctx, resp)
	}
	var res *ComposeResult
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		// A server (or proxy) that does not stream answers with the whole completion.
		res, err = c.unstreamed(ctx, resp.Body, fn)
	} else {
		res, err = c.readStream(ctx, resp.Body, fn)
	}
	if err != nil {
		return nil, err
	}
	c.log.DebugContext(ctx, "chat compose", "finish_reason", res.FinishReason, "prompt_tokens", res.PromptTokens,
		"completion_tokens", res.CompletionTokens, "duration", time.Since(start))
	return res, nil
}

// chunk is one chat.completion.chunk event, or an error event.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error  json.RawMessage `json:"error"`
	Object string          `json:"object"`
}

// readStream reads OpenAI's stream framing: `data: {chunk}` events (a role delta, content
// deltas, a delta with finish_reason, with include_usage a last chunk with empty choices and
// the usage), then `data: [DONE]`. Usage is taken from whichever chunk carries it (older
// llama-server builds put it on the finish_reason chunk).
func (c *Client) readStream(ctx context.Context, body io.Reader, fn func(string) error) (*ComposeResult, error) {
	sse := llmhttp.NewSSEReader(body, nil)
	res := &ComposeResult{}
	var answer strings.Builder
	for {
		data, errField, err := sse.Next()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, c.transportError(ctx, err)
		case errors.Is(err, io.EOF) && res.FinishReason != "":
			// Everything came but the [DONE] line: the answer is whole.
			res.Answer = answer.String()
			return res, nil
		case errors.Is(err, io.EOF):
			return nil, &Error{Op: "chat", Code: codes.Unavailable, Message: "the stream ended before its last chunk (no finish_reason, no [DONE])"}
		case errors.Is(err, llmhttp.ErrEventTooLarge):
			return nil, &Error{Op: "chat", Code: codes.Internal, Message: err.Error()}
		default:
			return nil, c.transportError(ctx, err)
		}
		if ctx.Err() != nil {
			// Cancelled (or timed out) while events were already buffered: deliver no more.
			return nil, c.transportError(ctx, ctx.Err())
		}
		if errField != nil {
			return nil, c.redactError(streamError(errField))
		}
		if string(data) == "[DONE]" {
			res.Answer = answer.String()
			return res, nil
		}
		var ch chunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return nil, badAnswer(fmt.Errorf("stream chunk: %v", err), data)
		}
		if (len(ch.Error) > 0 && string(ch.Error) != "null") || ch.Object == "error" {
			return nil, c.redactError(streamError(data))
		}
		if ch.Usage != nil {
			res.PromptTokens, res.CompletionTokens = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
		}
		if len(ch.Choices) == 0 {
			continue
		}
		if fr := ch.Choices[0].FinishReason; fr != nil {
			res.FinishReason = *fr
		}
		if p := ch.Choices[0].Delta.Content; p != nil && *p != "" {
			answer.WriteString(*p)
			if err := fn(*p); err != nil {
				return nil, err
			}
		}
	}
}

// unstreamed reads a whole chat.completion sent instead of a stream.
func (c *Client) unstreamed(ctx context.Context, body io.Reader, fn func(string) error) (*ComposeResult, error) {
	raw, err := io.ReadAll(io.LimitReader(body, maxResponseBytes+1))
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	if len(raw) > maxResponseBytes {
		return nil, &Error{Op: "chat", Code: codes.ResourceExhausted, Message: fmt.Sprintf("answer larger than %d bytes", maxResponseBytes)}
	}
	r, err := ParseResponse(raw, toolname.New())
	if err != nil {
		return nil, err
	}
	if r.Answer != "" {
		if err := fn(r.Answer); err != nil {
			return nil, err
		}
	}
	return &ComposeResult{Answer: r.Answer, FinishReason: r.FinishReason, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens}, nil
}

// redactError makes sure the error text does not carry the API key.
func (c *Client) redactError(e *Error) *Error {
	e.Message = c.redact(e.Message)
	return e
}
