package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/services/api/openaiface"
)

// maxErrorBody bounds what errorBodies holds back to rewrite; error bodies are small.
const maxErrorBody = 64 << 10

// errorBodies gives every error answer of the REST port one shape, whoever wrote it (the
// gateway, the body, Host/Origin and token checks, routing): {"code","message","details",
// "trace_id"}, in that order, trace_id whenever the request is traced.
func errorBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := &errorWriter{ResponseWriter: w, r: r}
		next.ServeHTTP(ew, r)
		ew.finish()
	})
}

// errorWriter holds back a JSON answer of status 400 or more to rewrite it; others pass.
type errorWriter struct {
	http.ResponseWriter
	r    *http.Request
	code int
	buf  *bytes.Buffer
}

func (e *errorWriter) WriteHeader(code int) {
	if e.code != 0 {
		return
	}
	e.code = code
	if code >= 400 && strings.HasPrefix(e.Header().Get("Content-Type"), "application/json") {
		e.buf = &bytes.Buffer{}
		return
	}
	e.ResponseWriter.WriteHeader(code)
}

func (e *errorWriter) Write(p []byte) (int, error) {
	if e.code == 0 {
		e.WriteHeader(http.StatusOK)
	}
	if e.buf == nil {
		return e.ResponseWriter.Write(p)
	}
	if e.buf.Len()+len(p) > maxErrorBody {
		// Not an error body of ours: let it through unchanged.
		e.ResponseWriter.WriteHeader(e.code)
		_, _ = e.ResponseWriter.Write(e.buf.Bytes())
		e.buf = nil
		return e.ResponseWriter.Write(p)
	}
	return e.buf.Write(p)
}

// Flush passes streamed answers on as they come.
func (e *errorWriter) Flush() {
	if e.buf != nil {
		return
	}
	if f, ok := e.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (e *errorWriter) Unwrap() http.ResponseWriter { return e.ResponseWriter }

func (e *errorWriter) finish() {
	if e.buf == nil {
		return
	}
	body := errorBody(e.buf.Bytes(), e.r)
	if openaiface.Owns(e.r.URL.Path) {
		// An OpenAI client reads OpenAI's error object, whoever refused the request.
		body = openaiface.ErrorBody(e.code, body)
	}
	e.Header().Del("Content-Length")
	e.ResponseWriter.WriteHeader(e.code)
	_, _ = e.ResponseWriter.Write(body)
}

// errorBody rewrites an error body into the one shape; a body that is not one is returned as is.
func errorBody(raw []byte, r *http.Request) []byte {
	var in struct {
		Code    *int              `json:"code"`
		Message string            `json:"message"`
		Details []json.RawMessage `json:"details"`
		TraceID string            `json:"trace_id"`
	}
	if err := json.Unmarshal(raw, &in); err != nil || in.Code == nil {
		return raw
	}
	out := struct {
		Code    int               `json:"code"`
		Message string            `json:"message"`
		Details []json.RawMessage `json:"details"`
		TraceID string            `json:"trace_id,omitempty"`
	}{Code: *in.Code, Message: in.Message, Details: in.Details, TraceID: in.TraceID}
	if out.Details == nil {
		out.Details = []json.RawMessage{}
	}
	if sc := trace.SpanContextFromContext(r.Context()); out.TraceID == "" && sc.HasTraceID() {
		out.TraceID = sc.TraceID().String()
	}
	b, err := json.Marshal(out)
	if err != nil {
		return raw
	}
	return append(b, '\n')
}
