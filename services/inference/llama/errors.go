package llama

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

// Error is a failed llama-server call. Code is the gRPC code the inference service answers
// with; Message quotes the server's error.message when it gave one. Error implements
// GRPCStatus, so status.Code(err) and status.FromError(err) read it through wrapping.
type Error struct {
	// Op is what was attempted: "health", "props", "tokenize", "completion".
	Op string
	// Code classifies the failure (Unavailable, ResourceExhausted, InvalidArgument,
	// DeadlineExceeded, Canceled, Unauthenticated, PermissionDenied, Unimplemented, Internal).
	Code codes.Code
	// HTTPStatus is the answer's status code; 0 when there was no answer, or for an error
	// sent inside a stream that had started with 200 (then Streamed is true).
	HTTPStatus int
	// Streamed marks an error event received mid-stream.
	Streamed bool
	// Type is the server's error.type, e.g. "invalid_request_error", "exceed_context_size_error".
	Type string
	// Message is the server's error.message, or what went wrong on our side.
	Message string
	// PromptTokens and ContextSize are the server's n_prompt_tokens and n_ctx of an
	// exceed_context_size_error (0 when not given).
	PromptTokens, ContextSize int

	sentinel error
	err      error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("llama-server ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	switch {
	case e.HTTPStatus != 0:
		fmt.Fprintf(&b, "%d %s", e.HTTPStatus, http.StatusText(e.HTTPStatus))
		if e.Type != "" {
			b.WriteString(" (" + e.Type + ")")
		}
		b.WriteString(": ")
		b.WriteString(strconv.Quote(e.Message))
	case e.Streamed:
		b.WriteString("error in stream")
		if e.Type != "" {
			b.WriteString(" (" + e.Type + ")")
		}
		b.WriteString(": ")
		b.WriteString(strconv.Quote(e.Message))
	default:
		b.WriteString(e.Message)
	}
	return b.String()
}

// Unwrap returns the cause and the matching sentinel (llmhttp.ErrNotReady, ErrContextExceeded,
// context.Canceled, context.DeadlineExceeded), if any.
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

// errorBody is the server's error object: {"code":400,"message":"...","type":"...",
// "n_prompt_tokens":N,"n_ctx":N}.
type errorBody struct {
	Code          int    `json:"code"`
	Message       string `json:"message"`
	Type          string `json:"type"`
	NPromptTokens int    `json:"n_prompt_tokens"`
	NCtx          int    `json:"n_ctx"`
}

// parseErrorObject reads the shapes llama-server has used for errors: {"error":{...}},
// a bare {"code","message","type"} (the old stream framing `error: {...}`), {"error":"text"}
// and the old /health {"status":"loading model"|"error"}. ok is false when raw is none of them.
func parseErrorObject(raw []byte) (body errorBody, loadingOld, ok bool) {
	var shape struct {
		Error   json.RawMessage `json:"error"`
		Code    json.RawMessage `json:"code"`
		Message *string         `json:"message"`
		Type    string          `json:"type"`
		Status  string          `json:"status"`
	}
	if json.Unmarshal(raw, &shape) != nil {
		return body, false, false
	}
	if len(shape.Error) > 0 && string(shape.Error) != "null" {
		if json.Unmarshal(shape.Error, &body) == nil && (body.Message != "" || body.Type != "") {
			return body, false, true
		}
		var s string
		if json.Unmarshal(shape.Error, &s) == nil && s != "" {
			return errorBody{Message: s}, false, true
		}
	}
	if shape.Message != nil {
		_ = json.Unmarshal(raw, &body)
		return body, false, true
	}
	switch strings.ToLower(shape.Status) {
	case "loading model":
		return errorBody{Code: http.StatusServiceUnavailable, Message: "loading model"}, true, true
	case "error":
		return errorBody{Code: http.StatusInternalServerError, Message: "error (model failed to load)"}, false, true
	}
	return body, false, false
}

// statusError builds the error for a non-200 answer with body raw.
func statusError(op string, httpStatus int, raw []byte) *Error {
	body, loadingOld, ok := parseErrorObject(raw)
	if !ok {
		body = errorBody{Message: llmhttp.Snippet(raw)}
	}
	e := &Error{
		Op: op, HTTPStatus: httpStatus, Type: body.Type, Message: body.Message,
		PromptTokens: body.NPromptTokens, ContextSize: body.NCtx,
	}
	e.Code, e.sentinel = classify(httpStatus, body, loadingOld)
	return e
}

// streamError builds the error for an error event inside a 200 stream.
func streamError(body errorBody) *Error {
	e := &Error{
		Op: "completion", Streamed: true, Type: body.Type, Message: body.Message,
		PromptTokens: body.NPromptTokens, ContextSize: body.NCtx,
	}
	if e.Message == "" {
		e.Message = "(no message)"
	}
	e.Code, e.sentinel = classify(body.Code, body, false)
	if e.Code == codes.Unknown {
		e.Code = codes.Internal
	}
	return e
}

// classify maps llama-server's error type and HTTP status to a gRPC code (server-common.cpp
// format_error_response: invalid_request_error 400, authentication_error 401,
// permission_error 403, not_found_error 404, server_error 500, not_supported_error 501,
// unavailable_error 503, exceed_context_size_error 400).
func classify(httpStatus int, body errorBody, loadingOld bool) (codes.Code, error) {
	msg := strings.ToLower(body.Message)
	switch {
	case body.Type == "exceed_context_size_error", llmhttp.ContextExceeded(msg):
		return codes.ResourceExhausted, llmhttp.ErrContextExceeded
	case loadingOld, httpStatus == http.StatusServiceUnavailable && strings.Contains(msg, "loading model"):
		return codes.Unavailable, llmhttp.ErrNotReady
	}
	switch body.Type {
	case "invalid_request_error":
		return codes.InvalidArgument, nil
	case "authentication_error":
		return codes.Unauthenticated, nil
	case "permission_error":
		return codes.PermissionDenied, nil
	case "not_found_error", "not_supported_error":
		return codes.Unimplemented, nil
	case "unavailable_error":
		return codes.Unavailable, nil
	case "server_error":
		return codes.Internal, nil
	}
	return llmhttp.HTTPStatusCode(httpStatus)
}
