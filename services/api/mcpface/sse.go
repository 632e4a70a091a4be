package mcpface

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/internal/auth"
)

// The legacy HTTP+SSE transport answers a POSTed request with 202 at once and writes its result
// on the session's stream later; mcp-go runs the request detached from its POST
// (context.WithoutCancel). Left so, a token's calls escaped its limit of requests in flight (48
// POSTs, each in flight for a millisecond, ran 16 at a time on one MCP server while another
// token's call waited 14 s behind them) and kept running after the client closed its stream.
// The face holds them to what a streamable HTTP call is held to, whose POST lasts as long as
// the call:
//
//   - a posted request keeps its token's place in flight (auth.Hold) until its result has been
//     written to the stream and flushed, not only until the 202;
//   - a session may have at most Config.SSEMaxCalls requests running or waiting for their
//     result to be written; more are refused with 429 and a JSON-RPC error naming the limit
//     (this also bounds a session when there are no tokens, so no limit per token);
//   - when the stream ends, every call of its session is cancelled (the executor then cancels
//     the upstream call) and its places are given back.
//
// Notifications and the client's responses (to the server's pings) get nothing back on the
// stream and run at once; they are not counted.

// codeTooManyCalls is the JSON-RPC error code of a request refused by the session's cap: MCP
// names no code for a limit, and JSON-RPC leaves -32000 to -32099 to the server.
const codeTooManyCalls = -32000

// sseStream is one open legacy SSE stream: the token that opened it, and the requests posted to
// its session that have not had their result written yet.
type sseStream struct {
	id    string          // the session id; set once, by newSSESession on the stream's goroutine
	owner string          // auth.Name of the token that opened it
	ctx   context.Context // ends when the stream does
	max   int

	mu     sync.Mutex
	calls  map[string][]*sseCall // by request id (mcp.RequestId.String()), oldest first
	n      int
	closed bool
}

// sseCall is one posted request waiting for its result to be written.
type sseCall struct {
	key     string
	release func() // gives back the token's place in flight
}

type sseStreamKey struct{}

// streamOf is the SSE stream of the session a request in ctx was posted to, or nil.
func streamOf(ctx context.Context) *sseStream {
	s, _ := ctx.Value(sseStreamKey{}).(*sseStream)
	return s
}

// add counts a request with key, holding release until its result is written. At the cap it
// gives release back and returns false. On a stream that has ended it gives release back and
// returns a nil call: mcp-go answers the POST itself (the session is gone).
func (s *sseStream) add(key string, release func()) (*sseCall, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.n >= s.max {
		release()
		return nil, s.closed
	}
	c := &sseCall{key: key, release: release}
	s.calls[key] = append(s.calls[key], c)
	s.n++
	return c, true
}

// written ends the oldest call with key: its result has been written to the stream. (A client
// that gives two requests one id gets the results in the order they finish; which place is
// given back first does not matter.)
func (s *sseStream) written(key string) {
	s.mu.Lock()
	cs := s.calls[key]
	if len(cs) == 0 {
		s.mu.Unlock()
		return
	}
	c := cs[0]
	if len(cs) == 1 {
		delete(s.calls, key)
	} else {
		s.calls[key] = cs[1:]
	}
	s.n--
	s.mu.Unlock()
	c.release()
}

// drop ends c if it is still waiting: mcp-go refused its POST, so no result will come.
func (s *sseStream) drop(c *sseCall) {
	s.mu.Lock()
	cs := s.calls[c.key]
	for i, x := range cs {
		if x == c {
			s.calls[c.key] = append(cs[:i:i], cs[i+1:]...)
			if len(s.calls[c.key]) == 0 {
				delete(s.calls, c.key)
			}
			s.n--
			s.mu.Unlock()
			c.release()
			return
		}
	}
	s.mu.Unlock()
}

// close ends every call still waiting: no result of this stream will be written any more.
func (s *sseStream) close() {
	s.mu.Lock()
	s.closed = true
	calls := s.calls
	s.calls, s.n = map[string][]*sseCall{}, 0
	s.mu.Unlock()
	for _, cs := range calls {
		for _, c := range cs {
			c.release()
		}
	}
}

// serveSSE serves a legacy SSE stream (GET /sse) through mcp-go, watching what it writes, and
// ends the session's calls when it ends.
func (f *Face) serveSSE(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	st := &sseStream{owner: auth.Name(ctx), ctx: ctx, max: f.cfg.SSEMaxCalls, calls: map[string][]*sseCall{}}
	defer func() {
		cancel() // the calls still running end (callHandler)
		if st.id != "" {
			f.streams.Delete(st.id)
		}
		st.close()
	}()
	f.sse.SSEHandler().ServeHTTP(&sseWriter{ResponseWriter: w, st: st}, r.WithContext(context.WithValue(r.Context(), sseStreamKey{}, st)))
}

// newSSESession names the new SSE session of the stream in ctx (serveSSE) and remembers it, with
// the token that opened it: the session's responses travel on that stream, so only that token
// may post messages to it.
func (f *Face) newSSESession(ctx context.Context, _ *http.Request) (string, error) {
	st := streamOf(ctx)
	if st == nil {
		return "", errors.New("an SSE stream not opened through the face")
	}
	st.id = rand.Text()
	f.streams.Store(st.id, st)
	return st.id, nil
}

// stream is the open SSE stream of session id, or nil.
func (f *Face) stream(id string) *sseStream {
	st, _ := f.streams.Load(id)
	s, _ := st.(*sseStream)
	return s
}

// postSSE takes a message posted to an SSE session (POST /sse/message?sessionId=ID): it checks
// that the caller's token opened the session, counts a request against the session's cap and
// holds its token's place in flight until its result is written, and hands the message to
// mcp-go, which answers 202 and runs it.
func (f *Face) postSSE(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("sessionId")
	st := f.stream(id)
	if id != "" && (st == nil || st.owner != auth.Name(r.Context())) {
		// Another token's session, or none: the same answer either way.
		writeError(w, http.StatusNotFound, codes.NotFound, "no SSE session "+id+" of this token: open one with GET "+SSEPath)
		return
	}
	if st == nil || r.Method != http.MethodPost || r.Body == nil {
		f.sse.MessageHandler().ServeHTTP(w, r) // mcp-go refuses it
		return
	}
	// The REST port has read the body already (checkBody, bounded by --api.max-body-bytes).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, codes.InvalidArgument, "body: "+err.Error())
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	key, isRequest, bad := requestKey(body)
	if bad != "" {
		writeRPCError(w, http.StatusBadRequest, nil, mcp.INVALID_REQUEST, bad)
		return
	}
	if !isRequest {
		f.sse.MessageHandler().ServeHTTP(w, r)
		return
	}
	c, ok := st.add(key, auth.Hold(r.Context()))
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeRPCError(w, http.StatusTooManyRequests, json.RawMessage(rawID(body)), codeTooManyCalls, fmt.Sprintf(
			"too many calls on this SSE session: at most %d at once, running or with a result not yet read from the stream (--%ssse-max-calls)",
			st.max, f.cfg.prefix))
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	f.sse.MessageHandler().ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), sseStreamKey{}, st)))
	if c != nil && sw.status != http.StatusAccepted {
		st.drop(c) // refused by mcp-go (the session ended meanwhile): no result will come
	}
}

// requestKey reads a posted message: a request (a method and an id) is counted under its id's
// key; a notification, a response or a body mcp-go cannot parse is not (nothing of it comes
// back on the stream; mcp-go answers the last with a parse error). bad says why an id that is
// neither a string nor a number is refused: mcp-go would run such a request and answer it, so
// it must be counted, but it has no key.
func requestKey(body []byte) (key string, isRequest bool, bad string) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(body, &m) != nil || m.Method == "" || len(m.ID) == 0 || string(m.ID) == "null" {
		return "", false, ""
	}
	if len(m.Result) > 0 && string(m.Result) != "null" {
		return "", false, "" // mcp-go takes it for a response and ignores it
	}
	var id mcp.RequestId
	if err := id.UnmarshalJSON(m.ID); err != nil {
		return "", false, "id: must be a string or a number"
	}
	return id.String(), true, ""
}

// rawID is the id of a posted request as it was sent, for a refusal to carry.
func rawID(body []byte) []byte {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &m) != nil || len(m.ID) == 0 {
		return []byte("null")
	}
	return m.ID
}

// writeRPCError answers a POST with status and a JSON-RPC error, as mcp-go answers the POSTs it
// refuses.
func writeRPCError(w http.ResponseWriter, status int, id any, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": mcp.JSONRPC_VERSION, "id": id, "error": map[string]any{"code": code, "message": msg}})
}

// statusWriter records the status mcp-go answered a POST with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sseWriter is an SSE stream's writer: mcp-go writes each event whole with one Write and then
// flushes; once a response's event is flushed, its call is over.
type sseWriter struct {
	http.ResponseWriter
	st      *sseStream
	pending []string // keys of the responses written since the last flush
}

func (w *sseWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if key, ok := responseKey(p); ok {
		w.pending = append(w.pending, key)
	}
	return n, err
}

func (w *sseWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
	for _, key := range w.pending {
		w.st.written(key)
	}
	w.pending = w.pending[:0]
}

func (w *sseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// eventPrefix starts every message event mcp-go writes (its pings have no space after
// "data:").
var eventPrefix = []byte("event: message\ndata:")

// responseKey reads an event mcp-go writes on the stream: for a response (an id and a result or
// an error, no method) it returns the key of its id. It reads the JSON's keys in turn and
// stops at the result, without decoding it: mcp-go writes the id first.
func responseKey(p []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(p, eventPrefix)
	if !ok {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	var id mcp.RequestId
	haveID, response := false, false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch t {
		case "method":
			return "", false // the server's own request or notification
		case "id":
			if dec.Decode(&id) != nil || id.IsNil() {
				return "", false
			}
			haveID = true
		case "result", "error":
			response = true
		}
		if haveID && response {
			return id.String(), true
		}
		if t != "id" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return "", false
			}
		}
	}
	return "", false
}
