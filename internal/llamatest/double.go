// Package llamatest helps test code that talks to llama.cpp's llama-server.
//
//   - Double is a test double of llama-server's HTTP API (an httptest server): scripted
//     outputs for scripted prompts, and faults on demand. It is not llama-server: use it for
//     what a real server with a random model cannot do, and run the same client against the
//     real one (StartServer) for everything else.
//   - WriteTinyModel writes a random-weight llama-architecture GGUF (about 0.5 MB) that the
//     real llama-server loads in milliseconds; StartServer runs the server named by
//     TOOLMESH_LLAMA_SERVER (scripts/llamaserver installs one) on it.
//
// What the double does the way llama-server b11669 (Debian forky 0.7.0) does, checked against it:
//   - GET /health: 200 {"status":"ok"}; public even with an API key.
//   - GET /props: default_generation_settings.n_ctx (per slot: CtxSize / Parallel),
//     total_slots, model_path, model_alias, build_info, bos_token, eos_token.
//   - GET /slots: one object per slot with id, n_ctx, is_processing.
//   - POST /tokenize: content, add_special, parse_special, with_pieces, tokenized as the real
//     server tokenizes for the tiny model (Tokenize).
//   - POST /completion: prompt (a string), n_predict, stop, grammar, stream and the sampling
//     fields (recorded, not used; temperature, top_p and seed echoed in generation_settings). A prompt longer than the slot's context is 400
//     exceed_context_size_error with n_prompt_tokens and n_ctx, also when streaming. Output
//     stops at the first stop string (stop_type "word") or after n_predict tokens ("limit",
//     cut at a piece boundary). Streaming sends `data: {...}\n\n` events with content,
//     tokens, stop:false, id_slot -1, tokens_predicted, tokens_evaluated, then the final
//     object with stop:true, stop_type, timings…; no `data: [DONE]`.
//   - Errors: {"error":{"code","message","type"}}; 401 "Invalid API Key"; 404 "File Not
//     Found"; a body that is not JSON is 400 invalid_request_error.
//
// Where it differs: a grammar is only checked for a `root ::=` rule and balanced quotes (the
// real server parses it and constrains the output; a bad one is 400 "Failed to initialize
// samplers: failed to parse grammar"); requests are served at once, never queued for a slot;
// a prompt without a scripted reply is answered 500 (the real model would make up noise).
package llamatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// Framing is how a mid-stream error is sent.
type Framing int

const (
	// FramingData is `data: {"error":{...}}`, llama-server since PR #16109 (Sept 2025).
	FramingData Framing = iota
	// FramingErrorField is the non-standard SSE field `error: {...}` used before it.
	FramingErrorField
)

// APIError is an error object as llama-server sends it.
type APIError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Type    string `json:"type"`
}

// Reply is a scripted answer to a /completion request.
type Reply struct {
	// Pieces are the generated text, one stream event each (joined when not streaming). A
	// piece that is not valid UTF-8 is sent as raw bytes inside the JSON string, as a server
	// that splits a character across events would (llama-server itself holds an unfinished
	// character back).
	Pieces []string
	// StopType is "eos" when empty (or "limit"/"word" when n_predict or a stop string ends
	// the output first).
	StopType string
	// Delay is waited before each event (and before a non-streamed answer).
	Delay time.Duration
	// HangAfter >= 0 with Hang: after that many events, stop sending until the client goes
	// away (a stalled server).
	Hang      bool
	HangAfter int
	// Fail, when set, ends the stream with this error after FailAfter events, framed as
	// Framing. Without streaming it is the HTTP answer (status Fail.Code).
	Fail      *APIError
	FailAfter int
	Framing   Framing
	// Status, when not 0, answers the request with this HTTP status and Body (or Fail's
	// object) instead of a completion.
	Status int
	Body   string
}

// Request is a /completion request the double received.
type Request struct {
	Prompt      string
	Stream      bool
	NPredict    int
	Stop        []string
	Grammar     string
	CachePrompt *bool
	Temperature *float64
	TopP        *float64
	Seed        *int64
	// Body is the whole decoded body.
	Body map[string]any
}

// DoubleOptions configures a Double.
type DoubleOptions struct {
	// APIKey, when set, is required as "Authorization: Bearer KEY" on every route but /health.
	APIKey string
	// CtxSize is -c (default 4096); Parallel is -np (default 1). A slot has CtxSize/Parallel.
	CtxSize  int
	Parallel int
}

// Double is a running llama-server double. Its methods are safe for concurrent use.
type Double struct {
	// URL is its base URL, http://127.0.0.1:PORT.
	URL string

	srv  *httptest.Server
	opts DoubleOptions
	stop chan struct{}

	mu         sync.Mutex
	scripts    map[string]Reply
	funcs      []func(Request) (Reply, bool)
	fallback   *Reply
	loading    int
	loadingOld bool
	hangs      int
	garbage    int
	requests   []Request
	canceled   int
	processing int
	closeOnce  sync.Once
}

// NewDouble starts a double; it is closed when the test ends.
func NewDouble(t testing.TB, opts DoubleOptions) *Double {
	t.Helper()
	d := StartDouble(opts)
	t.Cleanup(d.Close)
	return d
}

// StartDouble starts a double outside a test; Close stops it.
func StartDouble(opts DoubleOptions) *Double {
	if opts.CtxSize <= 0 {
		opts.CtxSize = 4096
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 1
	}
	d := &Double{opts: opts, stop: make(chan struct{}), scripts: map[string]Reply{}}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	d.URL = d.srv.URL
	return d
}

// Close stops the double, ending requests that hang.
func (d *Double) Close() {
	d.closeOnce.Do(func() {
		close(d.stop)
		d.srv.CloseClientConnections()
		d.srv.Close()
	})
}

// Script makes the double answer prompt with r.
func (d *Double) Script(prompt string, r Reply) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.scripts[prompt] = r
}

// ScriptFunc adds a reply chooser consulted (in order added) for prompts without an exact
// script.
func (d *Double) ScriptFunc(f func(Request) (Reply, bool)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.funcs = append(d.funcs, f)
}

// SetDefault is the reply to prompts nothing else matches (otherwise a 500).
func (d *Double) SetDefault(r Reply) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fallback = &r
}

// Loading makes the next n requests, of any route, answer 503 as while the model loads:
// {"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}, or with old,
// the 2024 shape {"status":"loading model"}.
func (d *Double) Loading(n int, old bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.loading, d.loadingOld = n, old
}

// Hang makes the next n requests, of any route, send nothing until the client goes away or
// the double closes.
func (d *Double) Hang(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hangs = n
}

// Garbage makes the next n requests, of any route, answer 200 with a body that is not what
// the route sends (HTML for JSON routes, a broken event in a stream).
func (d *Double) Garbage(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.garbage = n
}

// Requests are the /completion requests received so far.
func (d *Double) Requests() []Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.requests)
}

// Canceled counts completions the client went away from before their end.
func (d *Double) Canceled() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.canceled
}

// Processing counts completions being generated now.
func (d *Double) Processing() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.processing
}

// take decrements *n when positive and reports whether it was.
func take(n *int) bool {
	if *n > 0 {
		*n--
		return true
	}
	return false
}

func (d *Double) serve(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	loading, old, hang, garbage := take(&d.loading), d.loadingOld, take(&d.hangs), take(&d.garbage)
	d.mu.Unlock()
	w.Header().Set("Server", "llama.cpp")
	switch {
	case loading:
		if old && r.URL.Path == "/health" {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "loading model"})
			return
		}
		writeError(w, APIError{Code: 503, Message: "Loading model", Type: "unavailable_error"})
		return
	case hang:
		d.hang(r)
		return
	}
	if r.URL.Path != "/health" && r.URL.Path != "/v1/health" && d.opts.APIKey != "" &&
		r.Header.Get("Authorization") != "Bearer "+d.opts.APIKey {
		// The real server orders this object's fields message, type, code.
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}`))
		return
	}
	if garbage && r.URL.Path != "/completion" {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><body>502 Bad Gateway? no: 200 garbage</body></html>"))
		return
	}
	switch {
	case r.URL.Path == "/health" || r.URL.Path == "/v1/health":
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	case r.URL.Path == "/props" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, d.props())
	case r.URL.Path == "/slots" && r.Method == http.MethodGet:
		d.mu.Lock()
		busy := d.processing
		d.mu.Unlock()
		slots := []map[string]any{}
		for i := range d.opts.Parallel {
			slots = append(slots, map[string]any{"id": i, "n_ctx": d.nCtx(), "speculative": false, "is_processing": i < busy})
		}
		writeJSON(w, http.StatusOK, slots)
	case r.URL.Path == "/tokenize" && r.Method == http.MethodPost:
		d.tokenize(w, r)
	case r.URL.Path == "/completion" && r.Method == http.MethodPost:
		d.completion(w, r, garbage)
	default:
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"message":"File Not Found","type":"not_found_error","code":404}}`))
	}
}

func (d *Double) nCtx() int { return d.opts.CtxSize / d.opts.Parallel }

func (d *Double) props() map[string]any {
	return map[string]any{
		"default_generation_settings": map[string]any{
			"params": map[string]any{"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95},
			"n_ctx":  d.nCtx(),
		},
		"total_slots": d.opts.Parallel,
		"model_alias": "tiny.gguf",
		"model_path":  "tiny.gguf",
		"modalities":  map[string]any{"vision": false, "video": false, "audio": false},
		"bos_token":   "<s>",
		"eos_token":   "</s>",
		"build_info":  "b11669-llamatest",
		"is_sleeping": false,
	}
}

func (d *Double) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-d.stop:
	}
}

// decodeBody reads a JSON object body, answering 400 as llama-server does when it is not one.
func decodeBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	var body map[string]any
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil || body == nil {
		writeError(w, APIError{Code: 400, Type: "invalid_request_error",
			Message: "[json.exception.parse_error.101] parse error at line 1, column 1: syntax error while parsing value"})
		return nil, false
	}
	return body, true
}

func (d *Double) tokenize(w http.ResponseWriter, r *http.Request) {
	body, ok := decodeBody(w, r)
	if !ok {
		return
	}
	content, ok := body["content"].(string)
	if !ok {
		writeError(w, APIError{Code: 400, Type: "invalid_request_error",
			Message: "[json.exception.type_error.302] type must be string, but is " + jsonTypeName(body["content"])})
		return
	}
	ids := Tokenize(content, boolField(body, "add_special", false), boolField(body, "parse_special", true))
	if ids == nil {
		ids = []int{} // an empty text has no tokens: [], never null
	}
	if boolField(body, "with_pieces", false) {
		out := make([]map[string]any, len(ids))
		for i, id := range ids {
			out[i] = map[string]any{"id": id, "piece": pieceJSON(id)}
		}
		writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": ids})
}

func (d *Double) completion(w http.ResponseWriter, r *http.Request, garbage bool) {
	body, ok := decodeBody(w, r)
	if !ok {
		return
	}
	req, apiErr := parseRequest(body)
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}
	d.mu.Lock()
	d.requests = append(d.requests, req)
	d.mu.Unlock()

	if req.Grammar != "" && !grammarLooksValid(req.Grammar) {
		writeError(w, APIError{Code: 400, Type: "invalid_request_error",
			Message: "Failed to initialize samplers: failed to parse grammar"})
		return
	}
	nPrompt := len(Tokenize(req.Prompt, true, true))
	if nPrompt > d.nCtx() {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"code":400,"message":"request (%d tokens) exceeds the available context size (%d tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":%d,"n_ctx":%d}}`,
			nPrompt, d.nCtx(), nPrompt, d.nCtx())
		return
	}
	reply, ok := d.reply(req)
	if !ok {
		writeError(w, APIError{Code: 500, Type: "server_error",
			Message: fmt.Sprintf("llamatest: no reply scripted for prompt %q", shorten(req.Prompt))})
		return
	}
	if reply.Status != 0 {
		if reply.Body != "" {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(reply.Status)
			_, _ = w.Write([]byte(reply.Body))
			return
		}
		e := APIError{Code: reply.Status, Message: http.StatusText(reply.Status), Type: "server_error"}
		if reply.Fail != nil {
			e = *reply.Fail
		}
		writeJSONStatus(w, reply.Status, map[string]any{"error": e})
		return
	}

	d.mu.Lock()
	d.processing++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.processing--
		d.mu.Unlock()
	}()

	pieces, stopType, stoppingWord := shape(reply, req)
	if !req.Stream {
		if !d.wait(r, reply.Delay) {
			return
		}
		if reply.Fail != nil {
			writeError(w, *reply.Fail)
			return
		}
		if reply.Hang {
			d.hang(r)
			d.countCanceled(r)
			return
		}
		final := d.final(req, strings.Join(pieces, ""), pieces, stopType, stoppingWord, nPrompt)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write(final)
		return
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	flush()
	if garbage {
		_, _ = w.Write([]byte("data: {\"index\":0,\"content\":\"x\",\"tok\n\n"))
		flush()
		return
	}
	predicted := 0
	for i, p := range pieces {
		if reply.Fail != nil && i == reply.FailAfter {
			d.sendError(w, *reply.Fail, reply.Framing)
			flush()
			return
		}
		if reply.Hang && i == reply.HangAfter {
			d.hang(r)
			d.countCanceled(r)
			return
		}
		if !d.wait(r, reply.Delay) {
			d.countCanceled(r)
			return
		}
		ids := appendText(nil, p)
		predicted += max(1, len(ids))
		var ev bytes.Buffer
		ev.WriteString(`data: {"index":0,"content":`)
		writeRawString(&ev, p)
		fmt.Fprintf(&ev, `,"tokens":%s,"stop":false,"id_slot":-1,"tokens_predicted":%d,"tokens_evaluated":%d}`+"\n\n",
			mustJSON(ids), predicted, nPrompt)
		if _, err := w.Write(ev.Bytes()); err != nil {
			d.countCanceled(r)
			return
		}
		flush()
	}
	if reply.Fail != nil && reply.FailAfter >= len(pieces) {
		d.sendError(w, *reply.Fail, reply.Framing)
		flush()
		return
	}
	if reply.Hang && reply.HangAfter >= len(pieces) {
		d.hang(r)
		d.countCanceled(r)
		return
	}
	if !d.wait(r, reply.Delay) {
		d.countCanceled(r)
		return
	}
	final := d.final(req, "", pieces, stopType, stoppingWord, nPrompt)
	_, _ = w.Write([]byte("data: "))
	_, _ = w.Write(final)
	_, _ = w.Write([]byte("\n\n"))
	flush()
}

func (d *Double) countCanceled(r *http.Request) {
	if r.Context().Err() != nil {
		d.mu.Lock()
		d.canceled++
		d.mu.Unlock()
	}
}

// wait sleeps for delay; false when the client went away or the double closed.
func (d *Double) wait(r *http.Request, delay time.Duration) bool {
	if delay <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-d.stop:
		return false
	}
}

func (d *Double) sendError(w http.ResponseWriter, e APIError, f Framing) {
	obj := mustJSON(e)
	if f == FramingErrorField {
		_, _ = w.Write([]byte("error: " + string(obj) + "\n\n"))
		return
	}
	_, _ = w.Write([]byte(`data: {"error":` + string(obj) + "}\n\n"))
}

func (d *Double) reply(req Request) (Reply, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.scripts[req.Prompt]; ok {
		return r, true
	}
	for _, f := range d.funcs {
		if r, ok := f(req); ok {
			return r, true
		}
	}
	if d.fallback != nil {
		return *d.fallback, true
	}
	return Reply{}, false
}

// shape applies the request's stop strings and n_predict to the scripted pieces.
func shape(reply Reply, req Request) (pieces []string, stopType, stoppingWord string) {
	stopType = reply.StopType
	if stopType == "" {
		stopType = "eos"
	}
	full := strings.Join(reply.Pieces, "")
	cut := len(full)
	for _, s := range req.Stop {
		if i := strings.Index(full, s); s != "" && i >= 0 && i < cut {
			cut, stoppingWord = i, s
		}
	}
	n, done := 0, 0
	for _, p := range reply.Pieces {
		if done >= cut {
			break
		}
		if req.NPredict >= 0 && n >= req.NPredict {
			return pieces, "limit", ""
		}
		if done+len(p) > cut {
			p = p[:cut-done]
		}
		pieces = append(pieces, p)
		done += len(p)
		n += max(1, len(appendText(nil, p)))
	}
	if stoppingWord != "" {
		return pieces, "word", stoppingWord
	}
	return pieces, stopType, ""
}

// final is the last object of a completion (to_json_non_oaicompat).
func (d *Double) final(req Request, content string, pieces []string, stopType, stoppingWord string, nPrompt int) []byte {
	predicted := 0
	for _, p := range pieces {
		predicted += max(1, len(appendText(nil, p)))
	}
	if stopType == "eos" {
		predicted++ // the EOS token is generated too
	}
	settings := map[string]any{
		"n_predict": req.NPredict, "stream": req.Stream, "grammar": req.Grammar,
		"stop": req.Stop, "temperature": 0.8, "top_p": 0.95, "seed": uint32(0xFFFFFFFF), // the server's defaults
	}
	if req.Temperature != nil {
		settings["temperature"] = *req.Temperature
	}
	if req.TopP != nil {
		settings["top_p"] = *req.TopP
	}
	if req.Seed != nil {
		settings["seed"] = *req.Seed
	}
	rest := map[string]any{
		"index": 0, "tokens": []int{}, "id_slot": 0, "stop": true, "model": "tiny.gguf",
		"tokens_predicted": predicted, "tokens_evaluated": nPrompt,
		"generation_settings": settings, "prompt": "<s> " + req.Prompt,
		"has_new_line": strings.Contains(strings.Join(pieces, ""), "\n"), "truncated": false,
		"stop_type": stopType, "stopping_word": stoppingWord, "tokens_cached": nPrompt + predicted - 1,
		"timings": map[string]any{
			"cache_n": 0, "prompt_n": nPrompt, "prompt_ms": 0.5, "prompt_per_token_ms": 0.5 / float64(max(nPrompt, 1)),
			"prompt_per_second": float64(nPrompt) / 0.0005, "predicted_n": predicted, "predicted_ms": 1.0,
			"predicted_per_token_ms": 1.0 / float64(max(predicted, 1)), "predicted_per_second": float64(predicted) * 1000,
		},
	}
	// content goes first, written byte for byte (it may hold a split character).
	var b bytes.Buffer
	b.WriteString(`{"content":`)
	writeRawString(&b, content)
	for _, k := range slices.Sorted(maps.Keys(rest)) {
		b.WriteString(",")
		b.Write(mustJSON(k))
		b.WriteString(":")
		b.Write(mustJSON(rest[k]))
	}
	b.WriteString("}")
	return b.Bytes()
}

func parseRequest(body map[string]any) (Request, *APIError) {
	req := Request{Body: body, NPredict: -1}
	switch p := body["prompt"].(type) {
	case string:
		req.Prompt = p
	case nil:
		return req, &APIError{Code: 400, Type: "invalid_request_error", Message: `"prompt" must be provided`}
	default:
		return req, &APIError{Code: 400, Type: "invalid_request_error", Message: "llamatest: only string prompts are supported"}
	}
	req.Stream = boolField(body, "stream", false)
	for _, k := range []string{"n_predict", "max_tokens"} {
		if n, ok := body[k].(json.Number); ok {
			v, err := n.Int64()
			if err != nil {
				return req, &APIError{Code: 400, Type: "invalid_request_error", Message: "[json.exception.type_error.302] type must be number"}
			}
			req.NPredict = int(v)
			break
		}
	}
	if req.NPredict < 0 {
		req.NPredict = -1
	}
	if g, ok := body["grammar"].(string); ok {
		req.Grammar = g
	}
	if s, ok := body["stop"].([]any); ok {
		for _, x := range s {
			if str, ok := x.(string); ok {
				req.Stop = append(req.Stop, str)
			}
		}
	}
	if b, ok := body["cache_prompt"].(bool); ok {
		req.CachePrompt = &b
	}
	if n, ok := body["temperature"].(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			req.Temperature = &f
		}
	}
	if n, ok := body["top_p"].(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			req.TopP = &f
		}
	}
	if n, ok := body["seed"].(json.Number); ok {
		if v, err := n.Int64(); err == nil {
			req.Seed = &v
		}
	}
	return req, nil
}

// grammarLooksValid is the double's stand-in for llama.cpp's GBNF parser: a root rule and
// balanced double quotes outside character classes.
func grammarLooksValid(g string) bool {
	hasRoot := false
	for _, line := range strings.Split(g, "\n") {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), "::="); ok && strings.TrimSpace(name) == "root" {
			hasRoot = true
		}
	}
	if !hasRoot {
		return false
	}
	inStr, inClass := false, false
	for i := 0; i < len(g); i++ {
		switch c := g[i]; {
		case c == '\\':
			i++
		case inStr:
			inStr = c != '"'
		case inClass:
			inClass = c != ']'
		case c == '"':
			inStr = true
		case c == '[':
			inClass = true
		case c == '#':
			for i < len(g) && g[i] != '\n' {
				i++
			}
		}
	}
	return !inStr && !inClass
}

func boolField(body map[string]any, key string, def bool) bool {
	if b, ok := body[key].(bool); ok {
		return b
	}
	return def
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "string"
}

func writeError(w http.ResponseWriter, e APIError) {
	writeJSONStatus(w, e.Code, map[string]any{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) { writeJSONStatus(w, status, v) }

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(v))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// writeRawString writes s as a JSON string, escaping as JSON requires but passing bytes that
// are not valid UTF-8 through unchanged (encoding/json would replace them).
func writeRawString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			switch c {
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			default:
				fmt.Fprintf(b, `\u%04x`, c)
			}
		case c < utf8.RuneSelf:
			b.WriteByte(c)
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b.WriteByte(c) // raw, as a splitting server sends it
			} else {
				b.WriteString(s[i : i+n])
			}
			i += n
			continue
		}
		i++
	}
	b.WriteByte('"')
}

func shorten(s string) string {
	if r := []rune(s); len(r) > 80 {
		return string(r[:80]) + "…"
	}
	return s
}
