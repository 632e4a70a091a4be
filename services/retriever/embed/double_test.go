package embed

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// embeddingsDouble is a test double of an OpenAI-compatible embeddings server, reproducing
// the wire behaviour of llama-server (tools/server, `--embedding`) and the OpenAI API:
// llama-server's 503 "Loading model" while the model loads, its error JSON
// {"error":{"code","message","type"}} (the 400 exceed_context_size_error with n_prompt_tokens
// and n_ctx; the 500 server_error "input (N tokens) is too large to process. increase the
// physical batch size (current batch size: B)", which is what llama-server build 11669 answers
// on /v1/embeddings for an over-long input, checked by hand against the real server), OpenAI's
// 401 invalid_request_error shape, 429 with Retry-After, and "data" items carrying an "index".
// Vectors are deterministic (seeded by a hash of the text) and not normalized, so callers can
// check both the order and the normalization.
type embeddingsDouble struct {
	doubleOptions

	mu       sync.Mutex
	requests int
	batches  [][]string
	models   []string
	formats  []string
	paths    []string

	served int // 200 answers so far
	stop   chan struct{}
	srv    *httptest.Server
}

// doubleOptions selects the behaviours of an embeddingsDouble.
type doubleOptions struct {
	dim int
	// apiKey, when set, is required as "Authorization: Bearer KEY" (401 otherwise). The 401
	// message echoes the key the client sent, as a careless proxy might.
	apiKey string
	// loading answers the first N requests with llama-server's 503 "Loading model".
	loading int
	// rateLimited answers the first N requests with 429 and Retry-After: retryAfter.
	rateLimited int
	retryAfter  string
	// badGateway answers the first N requests with 502 (a proxy in front of the server).
	badGateway int
	// shuffle returns "data" in a random order (each item keeps its "index").
	shuffle bool
	// base64 answers with base64 little-endian float32 strings.
	base64 bool
	// hang blocks until the client gives up.
	hang bool
	// maxTokens rejects a text with more words than this with llama-server's 400
	// exceed_context_size_error (0: no limit); maxBatchTokens does the same with its 500
	// "too large to process" server_error.
	maxTokens      int
	maxBatchTokens int
	// dropLast returns one embedding fewer than the inputs.
	dropLast bool
	// badDimAt gives the input at that index of each batch a vector one longer (nil: none).
	badDimAt *int
	// regrowAfter doubles the dimension after that many successful answers, as when the
	// server is restarted with another model (0: never).
	regrowAfter int
	// nullAt writes null into the vector at that index of each batch (nil: none), as
	// llama.cpp's JSON library does for NaN.
	nullAt *int
	// perToken answers with one vector per token ([[...],[...]]), as with --pooling none.
	perToken bool
	// noIndex omits "index" from the items.
	noIndex bool
}

func newDouble(t *testing.T, o doubleOptions) *embeddingsDouble {
	t.Helper()
	d := &embeddingsDouble{doubleOptions: o, stop: make(chan struct{})}
	if d.dim == 0 {
		d.dim = 8
	}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.srv.Close)
	t.Cleanup(func() { close(d.stop) }) // runs first: releases hanging handlers
	return d
}

func at(i int) *int { return &i }

// doubleVector is the double's (un-normalized) vector for text.
func doubleVector(text string, dim int) []float32 {
	h := fnv.New64a()
	h.Write([]byte(text))
	r := rand.New(rand.NewPCG(h.Sum64(), 0x70011e54))
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(r.NormFloat64() * 3)
	}
	return v
}

func (d *embeddingsDouble) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests
}

// sent returns the batches, models and encoding formats the double received.
func (d *embeddingsDouble) sent() (batches [][]string, models, formats []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.batches), slices.Clone(d.models), slices.Clone(d.formats)
}

func (d *embeddingsDouble) batchSizes() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []int
	for _, b := range d.batches {
		out = append(out, len(b))
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// llamaError is llama-server's format_error_response shape.
func llamaError(code int, typ, msg string, extra map[string]any) map[string]any {
	e := map[string]any{"code": code, "message": msg, "type": typ}
	for k, v := range extra {
		e[k] = v
	}
	return map[string]any{"error": e}
}

func (d *embeddingsDouble) serve(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.requests++
	n := d.requests
	d.paths = append(d.paths, r.URL.Path)
	d.mu.Unlock()

	if r.URL.Path != "/v1/embeddings" {
		writeJSON(w, http.StatusNotFound, llamaError(404, "not_found_error", "File Not Found", nil))
		return
	}
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, llamaError(405, "invalid_request_error", "Method Not Allowed", nil))
		return
	}
	if d.hang {
		// Read the body first: the server notices the client going away only once it has.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-d.stop:
		}
		return
	}
	// llama-server checks its state before the key: every route answers 503 while loading.
	if n <= d.loading {
		writeJSON(w, http.StatusServiceUnavailable, llamaError(503, "unavailable_error", "Loading model", nil))
		return
	}
	if d.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+d.apiKey {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("Incorrect API key provided: %s. You can find your API key in your account settings.", got),
			"type":    "invalid_request_error", "param": nil, "code": "invalid_api_key",
		}})
		return
	}
	if n <= d.loading+d.rateLimited {
		w.Header().Set("Retry-After", d.retryAfter)
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{
			"message": "Rate limit reached for requests", "type": "requests", "param": nil, "code": "rate_limit_exceeded",
		}})
		return
	}
	if n <= d.loading+d.rateLimited+d.badGateway {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html><body><h1>502 Bad Gateway</h1></body></html>"))
		return
	}

	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, llamaError(400, "invalid_request_error", "Failed to parse JSON: "+err.Error(), nil))
		return
	}
	var inputs []string
	if err := json.Unmarshal(req.Input, &inputs); err != nil {
		var one string
		if err := json.Unmarshal(req.Input, &one); err != nil {
			writeJSON(w, http.StatusBadRequest, llamaError(400, "invalid_request_error", "\"input\" must be a string or an array of strings", nil))
			return
		}
		inputs = []string{one}
	}
	if len(inputs) == 0 {
		writeJSON(w, http.StatusBadRequest, llamaError(400, "invalid_request_error", "\"input\" must not be empty", nil))
		return
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		writeJSON(w, http.StatusBadRequest, llamaError(400, "invalid_request_error", "The format to return the embeddings in. Can be either float or base64", nil))
		return
	}
	d.mu.Lock()
	d.batches = append(d.batches, inputs)
	d.models = append(d.models, req.Model)
	d.formats = append(d.formats, req.EncodingFormat)
	d.served++
	baseDim := d.dim
	if d.regrowAfter > 0 && d.served > d.regrowAfter {
		baseDim *= 2
	}
	d.mu.Unlock()

	tokens := 0
	for _, in := range inputs {
		nt := len(strings.Fields(in)) + 2 // words plus BOS/EOS, as a stand-in tokenizer
		if d.maxTokens > 0 && nt > d.maxTokens {
			writeJSON(w, http.StatusBadRequest, llamaError(400, "exceed_context_size_error",
				fmt.Sprintf("request (%d tokens) exceeds the available context size (%d tokens)", nt, d.maxTokens),
				map[string]any{"n_prompt_tokens": nt, "n_ctx": d.maxTokens}))
			return
		}
		if d.maxBatchTokens > 0 && nt > d.maxBatchTokens {
			writeJSON(w, http.StatusInternalServerError, llamaError(500, "server_error",
				fmt.Sprintf("input (%d tokens) is too large to process. increase the physical batch size (current batch size: %d)", nt, d.maxBatchTokens), nil))
			return
		}
		tokens += nt
	}

	type item struct {
		Object    string `json:"object"`
		Index     *int   `json:"index,omitempty"`
		Embedding any    `json:"embedding"`
	}
	items := make([]item, 0, len(inputs))
	for i, in := range inputs {
		dim := baseDim
		if d.badDimAt != nil && i == *d.badDimAt {
			dim++
		}
		v := doubleVector(in, dim)
		var emb any = v
		switch {
		case d.perToken:
			emb = [][]float32{v, v}
		case d.nullAt != nil && i == *d.nullAt:
			parts := make([]string, len(v))
			for j, x := range v {
				parts[j] = fmt.Sprint(x)
			}
			parts[len(parts)/2] = "null"
			emb = json.RawMessage("[" + strings.Join(parts, ",") + "]")
		case d.base64 || req.EncodingFormat == "base64":
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		it := item{Object: "embedding", Embedding: emb}
		if !d.noIndex {
			it.Index = &i
		}
		items = append(items, it)
	}
	if d.dropLast {
		items = items[:len(items)-1]
	}
	if d.shuffle {
		r := rand.New(rand.NewPCG(uint64(n), 42))
		for { // make sure the order really changes
			r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
			if len(items) < 2 || *items[0].Index != 0 {
				break
			}
		}
	}
	model := req.Model
	if model == "" {
		model = "all-MiniLM-L6-v2-Q8_0.gguf"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"model":  model,
		"object": "list",
		"usage":  map[string]any{"prompt_tokens": tokens, "total_tokens": tokens},
		"data":   items,
	})
}
