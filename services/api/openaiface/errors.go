package openaiface

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/errreason"
)

// apiError is OpenAI's error object. The SDKs raise their error classes by the HTTP status
// (400 BadRequestError, 401 AuthenticationError, 403 PermissionDeniedError, 404 NotFoundError,
// 429 RateLimitError, 5xx InternalServerError) and show message, type, param and code.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// errorResponse is the body of an error answer, with toolmesh's extension (the trace to look at).
type errorResponse struct {
	Error    apiError   `json:"error"`
	Toolmesh *extension `json:"toolmesh,omitempty"`
}

func newAPIError(httpStatus int, msg, param, code string) apiError {
	e := apiError{Message: msg, Type: errorType(httpStatus)}
	if param != "" {
		e.Param = &param
	}
	if code == "" {
		code = defaultCode(httpStatus)
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

// errorType is OpenAI's type for an HTTP status.
func errorType(httpStatus int) string {
	switch {
	case httpStatus == http.StatusTooManyRequests:
		return "requests"
	case httpStatus == http.StatusGatewayTimeout || httpStatus == http.StatusRequestTimeout:
		return "timeout"
	case httpStatus >= 500:
		return "server_error"
	case httpStatus == http.StatusUnauthorized:
		return "invalid_request_error"
	}
	return "invalid_request_error"
}

func defaultCode(httpStatus int) string {
	switch httpStatus {
	case http.StatusUnauthorized:
		return "invalid_api_key"
	case http.StatusForbidden:
		return "permission_denied"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	}
	return ""
}

// writeError answers with OpenAI's error object.
func writeError(w http.ResponseWriter, httpStatus int, e apiError, ext *extension) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(errorResponse{Error: e, Toolmesh: ext})
}

// fromStatus maps the agent's gRPC status to OpenAI's status and error; header is the call's
// header metadata (a refused call's retry-after).
func fromStatus(w http.ResponseWriter, err error, header metadata.MD) (int, apiError) {
	st := status.Convert(err)
	msg := st.Message()
	var param, code string
	httpStatus := http.StatusInternalServerError
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		httpStatus = http.StatusBadRequest
		param, msg = fieldOf(st)
	case codes.Unauthenticated:
		httpStatus = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", "Bearer")
	case codes.PermissionDenied:
		httpStatus = http.StatusForbidden
	case codes.NotFound:
		// The loop answers 404 for a model it does not serve; a tool the model named that
		// does not exist is a result it is shown, never a 404.
		httpStatus, code = http.StatusNotFound, "model_not_found"
		param = "model"
	case codes.ResourceExhausted:
		switch errreason.Of(err) {
		case errreason.ContextTooLong:
			httpStatus, code, param = http.StatusBadRequest, "context_length_exceeded", "messages"
		case errreason.ToolResultTooLarge:
			httpStatus = http.StatusBadGateway
		default:
			// A rate limit says when to come back; any other bound this request needs more
			// of than it may have (no call fits max_tokens, say) would be the same on a retry,
			// and a 429 would make the SDKs retry it.
			httpStatus = http.StatusBadRequest
			if ra := header.Get("retry-after"); len(ra) > 0 {
				if _, err := strconv.Atoi(ra[0]); err == nil {
					httpStatus = http.StatusTooManyRequests
					w.Header().Set("Retry-After", ra[0])
				}
			}
		}
	case codes.Unavailable:
		httpStatus = http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		httpStatus = http.StatusGatewayTimeout
	case codes.Canceled:
		httpStatus = 499 // the client went away; nobody reads this
	case codes.Unimplemented:
		httpStatus = http.StatusNotImplemented
	case codes.Aborted, codes.AlreadyExists:
		httpStatus = http.StatusConflict
	}
	return httpStatus, newAPIError(httpStatus, msg, param, code)
}

// fieldOf is the OpenAI parameter a native INVALID_ARGUMENT names, and its message with the
// native field name replaced by it.
func fieldOf(st *status.Status) (string, string) {
	msg := st.Message()
	f, ok := errreason.FieldOf(st.Err())
	if !ok {
		return "", msg
	}
	p := paramOf(f)
	if rest, ok := strings.CutPrefix(msg, f+":"); ok {
		msg = p + ":" + rest
	}
	return p, msg
}

var (
	indexedCall = regexp.MustCompile(`^(messages\[\d+\]\.tool_calls\[\d+\])\.(tool_id|arguments)$`)
	function    = regexp.MustCompile(`^functions\[(\d+)\]\.(.+)$`)
	stopIndex   = regexp.MustCompile(`^generation\.stop\[(\d+)\]$`)
)

// paramOf names a native field as the OpenAI request names it.
func paramOf(field string) string {
	if m := indexedCall.FindStringSubmatch(field); m != nil {
		return m[1] + ".function." + strings.Replace(m[2], "tool_id", "name", 1)
	}
	if m := function.FindStringSubmatch(field); m != nil {
		return "tools[" + m[1] + "].function." + m[2]
	}
	if m := stopIndex.FindStringSubmatch(field); m != nil {
		return "stop[" + m[1] + "]"
	}
	switch field {
	case "query":
		return "messages"
	case "functions":
		return "tools"
	case "tool_choice.function", "tool_choice.mode", "require_call":
		return "tool_choice"
	case "k", "max_iterations", "timeout_seconds":
		return "toolmesh." + field
	}
	if rest, ok := strings.CutPrefix(field, "generation."); ok {
		return rest
	}
	if strings.HasPrefix(field, "servers[") {
		return "toolmesh." + field
	}
	return field
}

// Owns says whether path is one of the face's: their error answers take OpenAI's shape, whoever
// writes them (the token check, the body limits, the web guard).
func Owns(path string) bool {
	return path == chatPath || path == modelsPath || strings.HasPrefix(path, modelsPath+"/")
}

// ErrorBody turns an error body of toolmesh's shape ({"code","message","details","trace_id"})
// written with httpStatus into OpenAI's; a body of another shape is returned as it is.
func ErrorBody(httpStatus int, raw []byte) []byte {
	var in struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
		TraceID string `json:"trace_id"`
	}
	if err := json.Unmarshal(raw, &in); err != nil || in.Code == nil {
		return raw
	}
	out := errorResponse{Error: newAPIError(httpStatus, in.Message, "", "")}
	if in.TraceID != "" {
		out.Toolmesh = &extension{TraceID: in.TraceID}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return raw
	}
	return append(b, '\n')
}
