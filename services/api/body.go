package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
)

// checkBody gives JSON body errors a message that names the field, which protojson's
// syntax errors do not: "arguments: must be a JSON object" rather than "unexpected token [".
// It also rejects bodies over max bytes before they are read into memory.
func checkBody(max int64, next http.Handler) http.Handler {
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
			writeError(w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
		if msg := bodyProblem(data, strings.HasSuffix(r.URL.Path, ":call")); msg != "" {
			writeError(w, http.StatusBadRequest, msg)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		next.ServeHTTP(w, r)
	})
}

// bodyProblem describes what is wrong with a JSON request body, or returns "".
func bodyProblem(data []byte, isCall bool) string {
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
	if httpStatus == http.StatusRequestEntityTooLarge {
		code = codes.ResourceExhausted
	}
	writeJSON(w, httpStatus, map[string]any{"code": code, "message": msg, "details": []any{}})
}
