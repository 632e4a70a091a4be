package chat

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/services/inference/llmhttp"
)

// Error is a failed chat completion. Code is the gRPC code the inference service answers
// with; Message quotes the server's error.message when it gave one. Error implements
// GRPCStatus, so status.Code(err) reads it through wrapping. It matches llmhttp.ErrNotReady
// (503 while loading) and llmhttp.ErrContextExceeded (prompt over the context) with errors.Is,
// as the llama backend's errors do, and context.Canceled / context.DeadlineExceeded.
type Error struct {
	// Op is "chat" for the request, "parse" for an answer we cannot use.
	Op string
	// Code classifies the failure.
	Code codes.Code
	// HTTPStatus is the answer's status code (0 when there was no answer, or for an error
	// event inside a stream that had started with 200: then Streamed is true).
	HTTPStatus int
	// Streamed marks an error event received mid-stream.
	Streamed bool
	// Type is the server's error.type ("invalid_request_error", "exceed_context_size_error"...).
	Type string
	// ErrCode is the server's error.code when it is a string (OpenAI: "context_length_exceeded",
	// "invalid_api_key", "model_not_found"...).
	ErrCode string
	// Message is the server's error.message, or what went wrong on our side.
	Message string
	// Hint, when set, says what to do about it.
	Hint string

	sentinel error
	err      error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("chat completions ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	switch {
	case e.HTTPStatus != 0 || e.Streamed:
		if e.Streamed {
			b.WriteString("error in stream")
		} else {
			fmt.Fprintf(&b, "%d %s", e.HTTPStatus, http.StatusText(e.HTTPStatus))
		}
		if t := strings.Trim(e.Type+" "+e.ErrCode, " "); t != "" {
			b.WriteString(" (" + t + ")")
		}
		b.WriteString(": ")
		b.WriteString(strconv.Quote(e.Message))
	default:
		b.WriteString(e.Message)
	}
	if e.Hint != "" {
		b.WriteString(" (" + e.Hint + ")")
	}
	return b.String()
}

// Unwrap returns the matching sentinel and the cause, if any.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.sentinel != nil {
		errs = append(errs, e.sentinel)
	}
	if e.err != nil {
		errs = append(errs, e.err)
	}
	return errs
}

// GRPCStatus is the status the inference service returns for this error.
func (e *Error) GRPCStatus() *status.Status { return llmhttp.StatusOf(e.Code, e.Error(), e) }

// Code is the gRPC code of err (see llmhttp.Code, which reads any error carrying a status).
func Code(err error) codes.Code { return llmhttp.Code(err) }

// errorBody is an error as the servers send it: OpenAI and Ollama
// {"error":{"message","type","param","code":"string"|null}}, llama.cpp
// {"error":{"code":400,"message","type"}}, old vLLM {"object":"error","message","type","code":400},
// Ollama's native {"error":"text"}.
type errorBody struct {
	Message string
	Type    string
	Code    string // a string code; a numeric one is dropped (it repeats the HTTP status)
}

func parseErrorBody(raw []byte) (errorBody, bool) {
	type obj struct {
		Message *string         `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	var shape struct {
		Error json.RawMessage `json:"error"`
		obj
	}
	if json.Unmarshal(raw, &shape) != nil {
		return errorBody{}, false
	}
	read := func(o obj) errorBody {
		b := errorBody{Type: o.Type}
		if o.Message != nil {
			b.Message = *o.Message
		}
		var s string
		if json.Unmarshal(o.Code, &s) == nil {
			b.Code = s
		}
		return b
	}
	if len(shape.Error) > 0 && string(shape.Error) != "null" {
		var o obj
		if json.Unmarshal(shape.Error, &o) == nil && (o.Message != nil || o.Type != "") {
			return read(o), true
		}
		var s string
		if json.Unmarshal(shape.Error, &s) == nil && s != "" {
			return errorBody{Message: s}, true
		}
	}
	if shape.Message != nil {
		return read(shape.obj), true
	}
	return errorBody{}, false
}

// statusError is the error for a non-200 answer with body raw.
func statusError(httpStatus int, raw []byte) *Error {
	body, ok := parseErrorBody(raw)
	if !ok {
		body = errorBody{Message: llmhttp.Snippet(raw)}
	}
	if body.Message == "" {
		body.Message = "(no message)"
	}
	e := &Error{Op: "chat", HTTPStatus: httpStatus, Type: body.Type, ErrCode: body.Code, Message: body.Message}
	e.Code, e.sentinel = classify(httpStatus, body)
	if strings.Contains(strings.ToLower(body.Message), "requires --jinja") {
		e.Hint = "this backend needs llama-server started with --jinja and a tool-calling chat template"
	}
	return e
}

// streamError is the error for an error event inside a 200 stream: llama.cpp's
// `data: {"error":{"code","message","type"}}` (before PR #16109 the non-standard field
// `error: {...}`), OpenAI's `data: {"error":{"message","type","code"}}`, vLLM's
// `data: {"object":"error","message",...}`. raw is the event's data or error field.
func streamError(raw []byte) *Error {
	body, ok := parseErrorBody(raw)
	if !ok {
		body = errorBody{Message: llmhttp.Snippet(raw)}
	}
	if body.Message == "" {
		body.Message = "(no message)"
	}
	e := &Error{Op: "chat", Streamed: true, Type: body.Type, ErrCode: body.Code, Message: body.Message}
	e.Code, e.sentinel = classify(0, body)
	if e.Code == codes.Unknown || e.Code == codes.OK {
		e.Code = codes.Internal // the server gave up mid-answer and said no more
	}
	return e
}

// classify maps an error answer to a gRPC code, the way package llama does for llama-server,
// with OpenAI's, vLLM's and Ollama's error types and codes added.
func classify(httpStatus int, body errorBody) (codes.Code, error) {
	msg := strings.ToLower(body.Message)
	switch {
	case body.Type == "exceed_context_size_error", body.Code == "context_length_exceeded",
		llmhttp.ContextExceeded(msg):
		return codes.ResourceExhausted, llmhttp.ErrContextExceeded
	case httpStatus == http.StatusServiceUnavailable && strings.Contains(msg, "loading model"):
		return codes.Unavailable, llmhttp.ErrNotReady
	case strings.Contains(msg, "requires --jinja"):
		// llama-server b11669 started with --no-jinja answers "tools" with
		// 500 server_error "tools param requires --jinja flag": our request, not its fault.
		return codes.InvalidArgument, nil
	}
	switch body.Type {
	case "authentication_error":
		return codes.Unauthenticated, nil
	case "permission_error":
		return codes.PermissionDenied, nil
	case "rate_limit_error", "insufficient_quota":
		return codes.ResourceExhausted, nil
	case "unavailable_error":
		return codes.Unavailable, nil
	case "not_supported_error":
		return codes.Unimplemented, nil
	}
	switch body.Code {
	case "invalid_api_key":
		return codes.Unauthenticated, nil
	case "rate_limit_exceeded", "insufficient_quota":
		return codes.ResourceExhausted, nil
	case "model_not_found":
		return codes.NotFound, nil
	}
	if httpStatus == http.StatusNotFound {
		return codes.NotFound, nil // a wrong URL, or a model the server does not have
	}
	return llmhttp.HTTPStatusCode(httpStatus)
}
