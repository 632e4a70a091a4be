package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/api/mcpface"
	"github.com/toolmesh/toolmesh/services/api/openaiface"
)

// bodyDeadline bounds how long a client may take to send a request body: a client that
// trickles one byte a second must not hold a connection and its goroutine. The read deadline
// is set before anything else runs, so it also bounds what net/http reads to drain the body of
// a request that was refused unread, and is lifted once the body has been read to its end, so
// that a long answer (a query's stream) is not cut.
func bodyDeadline(timeout time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if timeout > 0 && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline once the body has been read to its end.
type deadlineBody struct {
	io.ReadCloser
	lift func()
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.lift()
	}
	return n, err
}

// checkBody gives JSON body errors a message that names the field, which protojson's
// syntax errors do not: "arguments: must be a JSON object" rather than "unexpected token [".
// It also rejects bodies over max bytes before they are read into memory, and bodies not sent
// within timeout (bodyDeadline) with 408.
func checkBody(max int64, timeout time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A gateway parameter that is not UTF-8 would fail deep in the gateway as a 500.
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			for k, vs := range r.URL.Query() {
				for _, v := range vs {
					if !utf8.ValidString(k) || !utf8.ValidString(v) {
						writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: is not valid UTF-8", strings.ToValidUTF8(k, "\uFFFD")))
						return
					}
				}
			}
		}
		if r.Body == nil || r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > max {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: %d bytes is more than the %d allowed", r.ContentLength, max))
			return
		}
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: more than the %d bytes allowed", max))
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				writeError(w, http.StatusRequestTimeout, fmt.Sprintf("body: not received within %s (api.body-timeout)", timeout))
				return
			}
			writeError(w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
		// An MCP endpoint parses its JSON-RPC body itself and answers a bad one as JSON-RPC
		// says (a parse error); reading it here too cost a JSON pass per MCP request. The
		// OpenAI face parses its own too, naming parameters as OpenAI does.
		if !mcpface.Endpoint(r.URL.Path) && !openaiface.Owns(r.URL.Path) {
			if msg := bodyProblem(data, r.URL.Path); msg != "" {
				writeError(w, http.StatusBadRequest, msg)
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		next.ServeHTTP(w, r)
	})
}

// bodyProblem describes what is wrong with the JSON request body of path, or returns "".
func bodyProblem(data []byte, path string) string {
	isCall := strings.HasSuffix(path, ":call")
	if len(bytes.TrimSpace(data)) == 0 {
		return ""
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return fmt.Sprintf("body: invalid JSON at byte %d: %v", syn.Offset, syn)
		}
		return "body: must be a JSON object"
	}
	if v, ok := fields["servers"]; ok && !isCall {
		// protojson would say "unexpected token" without naming the field.
		var names []string
		if t := bytes.TrimSpace(v); string(t) != "null" && json.Unmarshal(t, &names) != nil {
			return "servers: must be a list of server names, e.g. [\"calculator\"]"
		}
	}
	if path == "/v1/query" || path == "/v1/query:stream" {
		// protojson's own message ("proto: (line 1:2): unknown field") is for a program, and its
		// wording is not promised: name the field and the ones a query takes.
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			if !queryBodyFields[k] {
				return fmt.Sprintf("body: unknown field %q; a query body takes %s", k, queryFieldList)
			}
		}
	}
	if !isCall {
		return ""
	}
	for k, v := range fields {
		if k != "arguments" {
			return fmt.Sprintf("body: unknown field %q (a call body is {\"arguments\": {...}})", k)
		}
		if t := bytes.TrimSpace(v); len(t) > 0 && t[0] != '{' && string(t) != "null" {
			return "arguments: must be a JSON object of the tool's arguments"
		}
	}
	return ""
}

func writeError(w http.ResponseWriter, httpStatus int, msg string) {
	code := codes.InvalidArgument
	switch httpStatus {
	case http.StatusRequestEntityTooLarge:
		code = codes.ResourceExhausted
	case http.StatusRequestTimeout:
		code = codes.DeadlineExceeded
	}
	writeJSON(w, httpStatus, map[string]any{"code": code, "message": msg, "details": []any{}})
}

// queryBodyFields are the names a query body may use (the proto name and its JSON name, as
// protojson accepts both), and queryFieldList the proto names, for messages.
var queryBodyFields, queryFieldList = func() (map[string]bool, string) {
	fields := (&toolmeshv1.QueryRequest{}).ProtoReflect().Descriptor().Fields()
	names := map[string]bool{}
	var list []string
	for i := range fields.Len() {
		f := fields.Get(i)
		names[string(f.Name())], names[f.JSONName()] = true, true
		list = append(list, string(f.Name()))
	}
	return names, strings.Join(list, ", ")
}()
