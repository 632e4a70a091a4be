package llmhttp

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/errreason"
)

// Sentinels that both backends' errors match with errors.Is.
var (
	// ErrNotReady: the server is up but still loading its model (503 "Loading model", or
	// llama-server's old {"status":"loading model"}). Code Unavailable; retry later.
	ErrNotReady = errors.New("llama-server is loading the model")
	// ErrContextExceeded: the prompt (plus what is asked for) does not fit the context.
	// Code ResourceExhausted.
	ErrContextExceeded = errors.New("prompt exceeds the context size")
	// ErrUnreadable: the server answered something that is not an answer of its protocol.
	// Code Unavailable.
	ErrUnreadable = errors.New("unreadable answer")
)

// contextExceeded are what servers say, in an error's message, when a prompt does not fit:
// llama-server ("exceeds the available context size", and older builds' two others), OpenAI
// and vLLM ("maximum context length"), Anthropic-style proxies ("prompt is too long").
var contextExceeded = []string{
	"exceeds the available context size",
	"context size has been exceeded",
	"input is too large",
	"maximum context length",
	"prompt is too long",
}

// ContextExceeded reports whether an error message (any case) says the prompt is over the
// context, for servers that say so only in words.
func ContextExceeded(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range contextExceeded {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// StatusOf is the status of a model backend's error: an UNAVAILABLE says why in its reason, so
// the api tells a loading model, an unreadable answer and a model server that is down from an
// inference service it cannot reach; a prompt over the context is RESOURCE_EXHAUSTED with
// errreason.ContextTooLong, so the api tells it from a rate limit.
func StatusOf(code codes.Code, msg string, err error) *status.Status {
	if code == codes.ResourceExhausted && errors.Is(err, ErrContextExceeded) {
		return errreason.Status(code, errreason.ContextTooLong, msg)
	}
	if code != codes.Unavailable {
		return status.New(code, msg)
	}
	reason := errreason.BackendUnavailable
	switch {
	case errors.Is(err, ErrNotReady):
		reason = errreason.NotReady
	case errors.Is(err, ErrUnreadable):
		reason = errreason.BackendUnreadable
	}
	return errreason.Status(code, reason, msg)
}

// Code is the gRPC code of err: the code of any error in its chain that carries a gRPC status
// (either backend's *Error), Canceled or DeadlineExceeded for context errors, OK for nil and
// Unknown otherwise.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var e interface{ GRPCStatus() *status.Status }
	switch {
	case errors.As(err, &e):
		return e.GRPCStatus().Code()
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Unknown
}

// HTTPStatusCode is the gRPC code for an HTTP status whose body said nothing more specific;
// 413 also matches ErrContextExceeded.
func HTTPStatusCode(httpStatus int) (codes.Code, error) {
	switch {
	case httpStatus == http.StatusUnauthorized:
		return codes.Unauthenticated, nil
	case httpStatus == http.StatusForbidden:
		return codes.PermissionDenied, nil
	case httpStatus == http.StatusNotFound, httpStatus == http.StatusNotImplemented,
		httpStatus == http.StatusMethodNotAllowed:
		return codes.Unimplemented, nil
	case httpStatus == http.StatusRequestTimeout, httpStatus == http.StatusGatewayTimeout:
		return codes.DeadlineExceeded, nil
	case httpStatus == http.StatusTooManyRequests:
		return codes.ResourceExhausted, nil
	case httpStatus == http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted, ErrContextExceeded
	case httpStatus == http.StatusBadGateway, httpStatus == http.StatusServiceUnavailable:
		return codes.Unavailable, nil
	case httpStatus >= 400 && httpStatus < 500:
		return codes.InvalidArgument, nil
	case httpStatus >= 500:
		return codes.Internal, nil
	}
	return codes.Unknown, nil
}

// Snippet is the start of a body as one printable line, for error messages.
func Snippet(raw []byte) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(raw), "\uFFFD")), " ")
	if s == "" {
		return "(empty body)"
	}
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}
