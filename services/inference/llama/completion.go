package llama

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/services/inference/llmhttp"
)

// Stop types of a finished completion (stop_type).
const (
	StopEOS   = "eos"   // the model ended the text
	StopLimit = "limit" // n_predict tokens were generated, or the context is full
	StopWord  = "word"  // one of the stop strings came out (not included in Content)
	StopNone  = "none"  // still generating (only in partial events)
)

// CompletionRequest is a /completion request. Nil sampling settings fall back to
// Config.Sampling, then to the server's defaults.
type CompletionRequest struct {
	// Prompt is sent as a string; the server adds BOS in front when the model wants it.
	Prompt string
	// NPredict bounds the generated tokens: 0 means Config.NPredict, negative means until
	// EOS, a stop string or a full context.
	NPredict int
	// Stop strings end the generation; the one that matched is not part of Content.
	Stop []string
	// Grammar is a GBNF grammar the output must match (llama.cpp grammars/README.md).
	Grammar string
	// CachePrompt reuses the KV cache of the common prefix of the last prompt (the server's
	// default is true).
	CachePrompt *bool
	// IgnoreEOS keeps generating past the end-of-text token.
	IgnoreEOS bool
	Sampling
	// Extra holds other /completion fields (n_probs, logit_bias, samplers…), sent as given;
	// the fields above win over them.
	Extra map[string]any
}

// Completion is a finished completion.
type Completion struct {
	// Content is the generated text (valid UTF-8; bytes that never formed a character are
	// U+FFFD).
	Content string
	// StopType says why generation ended: StopEOS, StopLimit or StopWord.
	StopType     string
	StoppingWord string
	// Truncated: the prompt and the output did not fit the context, so output stopped early.
	Truncated       bool
	TokensPredicted int
	TokensEvaluated int
	TokensCached    int
	Model           string
	Timings         Timings
}

// Timings are the server's measurements of one completion.
type Timings struct {
	CacheN             int     `json:"cache_n"`
	PromptN            int     `json:"prompt_n"`
	PromptMS           float64 `json:"prompt_ms"`
	PromptPerSecond    float64 `json:"prompt_per_second"`
	PredictedN         int     `json:"predicted_n"`
	PredictedMS        float64 `json:"predicted_ms"`
	PredictedPerSecond float64 `json:"predicted_per_second"`
}

// Chunk is a piece of a streamed completion.
type Chunk struct {
	// Text is the new text, always whole UTF-8 characters: bytes of a character split across
	// events are held back until it is complete.
	Text string
	// Tokens are the token ids the event reported.
	Tokens []int
	// TokensPredicted counts the tokens generated so far.
	TokensPredicted int
}

// Complete runs a completion and returns it when it has finished.
func (c *Client) Complete(ctx context.Context, req CompletionRequest) (*Completion, error) {
	body, err := c.completionBody(req, false)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	raw, err := c.postJSON(ctx, "completion", "/completion", body)
	if err != nil {
		return nil, err
	}
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, badAnswer("completion", err, raw)
	}
	if len(ev.Error) > 0 && string(ev.Error) != "null" {
		if b, _, ok := parseErrorObject(raw); ok {
			return nil, c.redactError(streamError(b))
		}
	}
	content, err := unquoteRaw(ev.Content)
	if err != nil {
		return nil, badAnswer("completion", err, raw)
	}
	out := ev.completion(strings.ToValidUTF8(string(content), "\uFFFD"))
	c.logDone(ctx, out, start)
	return out, nil
}

// CompleteStream runs a streamed completion, calling fn with each new piece of text (never
// empty), and returns the finished completion after the last event. An error from fn stops
// the generation and is returned as is. Cancelling ctx closes the connection, which stops
// the server's generation.
func (c *Client) CompleteStream(ctx context.Context, req CompletionRequest, fn func(Chunk) error) (*Completion, error) {
	body, err := c.completionBody(req, true)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, c.cfg.Timeout, errTimeout{c.cfg.Timeout})
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := c.cfg.IdleTimeout
	timer := time.AfterFunc(idle, func() { cancel(errIdle{idle}) })
	defer timer.Stop()

	resp, err := c.send(ctx, "completion", http.MethodPost, "/completion", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
		if err != nil && len(raw) == 0 {
			return nil, c.transportError(ctx, "completion", err)
		}
		return nil, c.redactError(statusError("completion", resp.StatusCode, raw))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		// A server (or proxy) that does not stream answers with the finished completion.
		return c.unstreamed(ctx, resp.Body, fn, start)
	}

	sse := llmhttp.NewSSEReader(resp.Body, func() { timer.Reset(idle) })
	var text utf8Acc
	var content strings.Builder
	emit := func(b []byte, ev *event, final bool) error {
		s := text.push(b)
		if final {
			s += text.flush()
		}
		content.WriteString(s)
		if s == "" {
			return nil
		}
		return fn(Chunk{Text: s, Tokens: ev.Tokens, TokensPredicted: ev.TokensPredicted})
	}
	for {
		data, errField, err := sse.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, &Error{Op: "completion", Code: codes.Unavailable,
					Message: "stream ended before its last event (\"stop\": true)"}
			}
			if ctx.Err() == nil && errors.Is(err, llmhttp.ErrEventTooLarge) {
				return nil, &Error{Op: "completion", Code: codes.Internal, Message: err.Error()}
			}
			return nil, c.transportError(ctx, "completion", err)
		}
		if ctx.Err() != nil {
			// Cancelled (or timed out) while events were already buffered: deliver no more.
			return nil, c.transportError(ctx, "completion", ctx.Err())
		}
		if errField != nil {
			// Before llama.cpp PR #16109 (Sept 2025): `error: {"code","message","type"}`.
			b, _, ok := parseErrorObject(errField)
			if !ok {
				b = errorBody{Message: llmhttp.Snippet(errField)}
			}
			return nil, c.redactError(streamError(b))
		}
		if string(data) == "[DONE]" {
			return nil, &Error{Op: "completion", Code: codes.Internal,
				Message: "stream ended with [DONE] before its last event (\"stop\": true)"}
		}
		var ev event
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, badAnswer("completion", fmt.Errorf("event: %w", err), data)
		}
		if len(ev.Error) > 0 && string(ev.Error) != "null" {
			// Since PR #16109: `data: {"error":{"code","message","type"}}`.
			b, _, ok := parseErrorObject(data)
			if !ok {
				b = errorBody{Message: llmhttp.Snippet(ev.Error)}
			}
			return nil, c.redactError(streamError(b))
		}
		piece, err := unquoteRaw(ev.Content)
		if err != nil {
			return nil, badAnswer("completion", err, data)
		}
		if err := emit(piece, &ev, ev.Stop); err != nil {
			return nil, err
		}
		if ev.Stop {
			out := ev.completion(content.String())
			c.logDone(ctx, out, start)
			// Read the stream's end, so the connection goes back to the pool instead of
			// being closed with bytes unread (a new connection for every streamed answer).
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			return out, nil
		}
	}
}

// unstreamed reads a finished completion sent instead of a stream.
func (c *Client) unstreamed(ctx context.Context, body io.Reader, fn func(Chunk) error, start time.Time) (*Completion, error) {
	raw, err := io.ReadAll(io.LimitReader(body, maxResponseBytes))
	if err != nil {
		return nil, c.transportError(ctx, "completion", err)
	}
	var ev event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, badAnswer("completion", err, raw)
	}
	if len(ev.Error) > 0 && string(ev.Error) != "null" {
		b, _, _ := parseErrorObject(raw)
		return nil, c.redactError(streamError(b))
	}
	content, err := unquoteRaw(ev.Content)
	if err != nil {
		return nil, badAnswer("completion", err, raw)
	}
	out := ev.completion(strings.ToValidUTF8(string(content), "\uFFFD"))
	if out.Content != "" {
		if err := fn(Chunk{Text: out.Content, TokensPredicted: ev.TokensPredicted}); err != nil {
			return nil, err
		}
	}
	c.logDone(ctx, out, start)
	return out, nil
}

func (c *Client) logDone(ctx context.Context, out *Completion, start time.Time) {
	c.log.DebugContext(ctx, "llama-server completion", "stop_type", out.StopType,
		"tokens_evaluated", out.TokensEvaluated, "tokens_predicted", out.TokensPredicted,
		"tokens_cached", out.TokensCached, "truncated", out.Truncated,
		"prompt_ms", out.Timings.PromptMS, "predicted_ms", out.Timings.PredictedMS,
		"duration", time.Since(start))
}

func (c *Client) completionBody(req CompletionRequest, stream bool) ([]byte, error) {
	m := make(map[string]any, len(req.Extra)+12)
	for k, v := range req.Extra {
		m[k] = v
	}
	m["prompt"] = req.Prompt
	m["stream"] = stream
	n := req.NPredict
	switch {
	case n == 0:
		n = c.cfg.NPredict
	case n < 0:
		n = -1
	}
	m["n_predict"] = n
	if len(req.Stop) > 0 {
		m["stop"] = req.Stop
	}
	if req.Grammar != "" {
		m["grammar"] = req.Grammar
	}
	if req.CachePrompt != nil {
		m["cache_prompt"] = *req.CachePrompt
	}
	if req.IgnoreEOS {
		m["ignore_eos"] = true
	}
	d := c.cfg.Sampling
	setF := func(key string, v, def *float64) {
		if v == nil {
			v = def
		}
		if v != nil {
			m[key] = *v
		}
	}
	setF("temperature", req.Temperature, d.Temperature)
	setF("top_p", req.TopP, d.TopP)
	setF("min_p", req.MinP, d.MinP)
	setF("repeat_penalty", req.RepeatPenalty, d.RepeatPenalty)
	if v := cmpOrPtr(req.TopK, d.TopK); v != nil {
		m["top_k"] = *v
	}
	if v := cmpOrPtr(req.Seed, d.Seed); v != nil {
		m["seed"] = *v
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, &Error{Op: "completion", Code: codes.InvalidArgument, Message: "encoding the request: " + err.Error()}
	}
	return body, nil
}

func cmpOrPtr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// event is one /completion answer or stream event (server-task.cpp to_json_non_oaicompat).
type event struct {
	Content         json.RawMessage `json:"content"`
	Tokens          []int           `json:"tokens"`
	Stop            bool            `json:"stop"`
	StopType        string          `json:"stop_type"`
	StoppingWord    string          `json:"stopping_word"`
	Truncated       bool            `json:"truncated"`
	TokensPredicted int             `json:"tokens_predicted"`
	TokensEvaluated int             `json:"tokens_evaluated"`
	TokensCached    int             `json:"tokens_cached"`
	Model           string          `json:"model"`
	Timings         Timings         `json:"timings"`
	Error           json.RawMessage `json:"error"`
	// Old builds (2024) named these differently.
	StoppedEOS   bool `json:"stopped_eos"`
	StoppedLimit bool `json:"stopped_limit"`
	StoppedWord  bool `json:"stopped_word"`
}

func (ev *event) completion(content string) *Completion {
	st := ev.StopType
	switch {
	case st != "":
	case ev.StoppedWord:
		st = StopWord
	case ev.StoppedLimit:
		st = StopLimit
	case ev.StoppedEOS:
		st = StopEOS
	}
	return &Completion{
		Content: content, StopType: st, StoppingWord: ev.StoppingWord, Truncated: ev.Truncated,
		TokensPredicted: ev.TokensPredicted, TokensEvaluated: ev.TokensEvaluated,
		TokensCached: ev.TokensCached, Model: ev.Model, Timings: ev.Timings,
	}
}

// utf8Acc turns a stream of bytes into whole UTF-8 characters: a character whose bytes came in
// different events is held back until it is complete.
type utf8Acc struct{ pending []byte }

func (a *utf8Acc) push(b []byte) string {
	a.pending = append(a.pending, b...)
	cut := completePrefix(a.pending)
	s := strings.ToValidUTF8(string(a.pending[:cut]), "\uFFFD")
	a.pending = append(a.pending[:0], a.pending[cut:]...)
	return s
}

// flush returns what is held back (an unfinished character becomes U+FFFD).
func (a *utf8Acc) flush() string {
	s := strings.ToValidUTF8(string(a.pending), "\uFFFD")
	a.pending = a.pending[:0]
	return s
}

// completePrefix is the length of b without a trailing character that is incomplete (but
// could still become valid).
func completePrefix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-(utf8.UTFMax-1); i-- {
		if b[i]&0xC0 == 0x80 {
			continue // continuation byte: look further back for the start
		}
		if !utf8.FullRune(b[i:]) {
			return i
		}
		break
	}
	return len(b)
}

// unquoteRaw decodes a JSON string keeping bytes that are not valid UTF-8 as they are (so a
// character split across stream events can be put back together), unlike encoding/json which
// replaces them. null or absent is empty.
func unquoteRaw(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, fmt.Errorf("content is not a string: %s", llmhttp.Snippet(raw))
	}
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(s) {
			return nil, errors.New("content ends inside an escape")
		}
		switch s[i] {
		case '"', '\\', '/':
			out = append(out, s[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s[i+1:])
			if !ok {
				return nil, errors.New("content has a bad \\u escape")
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok2 := rune(0), false
				if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					r2, ok2 = hex4(s[i+3:])
				}
				if ok2 {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, fmt.Errorf("content has a bad escape \\%c", s[i])
		}
	}
	return out, nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
