package embed

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults applied by NewHTTP to zero fields of HTTPConfig.
const (
	DefaultBatchSize  = 32
	DefaultTimeout    = 30 * time.Second
	DefaultMaxRetries = 3
)

const (
	// maxResponseBytes bounds one response body (32 texts × 4096 dims as JSON is about 3 MB).
	maxResponseBytes = 64 << 20
	// maxErrorBodyBytes bounds how much of an error body is read and quoted.
	maxErrorBodyBytes = 64 << 10
	// probeText is what Probe embeds.
	probeText = "toolmesh embeddings probe"
)

// HTTPConfig configures an embedder for an OpenAI-compatible /v1/embeddings endpoint
// (llama-server --embedding, Ollama, vLLM, HuggingFace TEI).
type HTTPConfig struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:8081. A URL whose path already ends
	// in /v1 (as OpenAI-style base URLs often do, e.g. Ollama's http://host:11434/v1) or in
	// /v1/embeddings is used as given; otherwise /v1/embeddings is appended.
	URL string
	// Model is sent as "model" and returned by Model (it names index collections).
	// llama-server ignores it; Ollama, vLLM and TEI use it.
	Model string
	// APIKey, when set, is sent as "Authorization: Bearer KEY". It is never logged and never
	// appears in errors (server messages that echo it are redacted).
	APIKey string
	// BatchSize is the number of texts per request (default 32).
	BatchSize int
	// Timeout bounds one HTTP request, each retry included separately (default 30s).
	Timeout time.Duration
	// MaxRetries is how many times one batch is retried after a retryable failure (default 3).
	MaxRetries int
	// Dim is the expected vector dimension; 0 means learn it from the first response.
	Dim int
}

// Validate reports the first bad field by name. Zero BatchSize, Timeout and MaxRetries are
// valid: NewHTTP replaces them with the defaults.
func (c HTTPConfig) Validate() error {
	if c.URL == "" {
		return errors.New("embed: URL: required")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		// url.Parse errors quote the whole URL, which may carry user:password; do not wrap it.
		return errors.New("embed: URL: not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("embed: URL: scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("embed: URL: %q has no host", u.Redacted())
	}
	if strings.TrimSpace(c.Model) == "" {
		return errors.New("embed: Model: required (it names the index, so vectors of different models never mix)")
	}
	if strings.ContainsAny(c.APIKey, "\r\n") {
		return errors.New("embed: APIKey: contains a line break")
	}
	if c.BatchSize < 0 {
		return fmt.Errorf("embed: BatchSize: %d is negative", c.BatchSize)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("embed: Timeout: %s is negative", c.Timeout)
	}
	if c.MaxRetries < 0 {
		return fmt.Errorf("embed: MaxRetries: %d is negative", c.MaxRetries)
	}
	if c.Dim < 0 {
		return fmt.Errorf("embed: Dim: %d is negative", c.Dim)
	}
	return nil
}

func (c HTTPConfig) withDefaults() HTTPConfig {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	return c
}

// endpoint turns the base URL into the embeddings URL.
func endpoint(base string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, errors.New("embed: URL: not a valid URL")
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/v1/embeddings"):
	case strings.HasSuffix(p, "/v1"):
		p += "/embeddings"
	default:
		p += "/v1/embeddings"
	}
	u.Path = p
	u.RawPath = ""
	return u, nil
}

// HTTP embeds texts through an OpenAI-compatible POST /v1/embeddings endpoint.
//
// Texts are sent in batches of BatchSize, one batch after the other; results are ordered by
// each item's "index", not by its position in "data". Every returned vector is checked (same
// dimension throughout, finite values, one per input) and L2-normalized, so that the dot
// product of two vectors is their cosine similarity, whatever the server's own normalization.
//
// Failures that can pass (connection errors, timeouts, 429, 502, 503 — llama-server's
// "Loading model" —, 504) are retried with capped exponential backoff and jitter, honouring
// Retry-After; other statuses (400, 401, 403, 404, 413, 500, …) fail at once with a
// *StatusError quoting the server's message. llama-server answers 500 for an input longer
// than its physical batch, which no retry cures. Context cancellation stops at once.
//
// An HTTP is safe for concurrent use.
type HTTP struct {
	cfg      HTTPConfig
	endpoint string // the full embeddings URL
	logURL   string // endpoint without userinfo, for errors and logs
	client   *http.Client
	owned    bool // client was created here; Close releases its idle connections
	log      *slog.Logger
	dim      atomic.Int64

	// backoffBase and backoffMax shape the retry waits; maxRetryAfter caps a server's
	// Retry-After. wait sleeps or returns the context's error; tests replace it.
	backoffBase   time.Duration
	backoffMax    time.Duration
	maxRetryAfter time.Duration
	wait          func(ctx context.Context, d time.Duration) error
}

var _ Dense = (*HTTP)(nil)

// NewHTTP validates cfg, applies defaults and returns the embedder. A nil client gets a
// dedicated one whose transport keeps enough idle connections for concurrent batches; a nil
// logger discards. NewHTTP makes no request: call Probe to check the server and learn Dim.
func NewHTTP(cfg HTTPConfig, client *http.Client, logger *slog.Logger) (*HTTP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	u, err := endpoint(cfg.URL)
	if err != nil {
		return nil, err
	}
	owned := false
	if client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 32
		t.MaxIdleConnsPerHost = 16
		t.IdleConnTimeout = 90 * time.Second
		client = &http.Client{Transport: t}
		owned = true
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &HTTP{
		cfg:           cfg,
		endpoint:      u.String(),
		logURL:        u.Redacted(),
		client:        client,
		owned:         owned,
		log:           logger.With("component", "embed", "url", u.Redacted(), "model", cfg.Model),
		backoffBase:   250 * time.Millisecond,
		backoffMax:    8 * time.Second,
		maxRetryAfter: time.Minute,
		wait:          sleepCtx,
	}
	h.dim.Store(int64(cfg.Dim))
	return h, nil
}

// Model returns the configured model id.
func (h *HTTP) Model() string { return h.cfg.Model }

// Dim returns the vector dimension: HTTPConfig.Dim if set, else what the first successful
// Embed or Probe returned, else 0.
func (h *HTTP) Dim() int { return int(h.dim.Load()) }

// Close releases idle connections of a client that NewHTTP created. It never fails.
func (h *HTTP) Close() error {
	if h.owned {
		h.client.CloseIdleConnections()
	}
	return nil
}

// Probe embeds one short text in a single attempt (no retries, so a readiness check answers
// promptly): it fails while the server is down or loading its model (a *StatusError with
// status 503), and otherwise learns the dimension or checks it against HTTPConfig.Dim.
func (h *HTTP) Probe(ctx context.Context) error {
	if _, err := h.embedBatch(ctx, []string{probeText}, 0, 0); err != nil {
		return fmt.Errorf("embed: probe: %w", err)
	}
	return nil
}

// Embed returns one L2-normalized vector per text, in the order of texts. An empty slice
// needs no request; an empty text is refused (servers disagree on what it means).
func (h *HTTP) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return [][]float32{}, nil
	}
	for i, t := range texts {
		if strings.TrimSpace(t) == "" {
			return nil, fmt.Errorf("embed: text %d is empty", i)
		}
	}
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += h.cfg.BatchSize {
		end := min(start+h.cfg.BatchSize, len(texts))
		vecs, err := h.embedBatch(ctx, texts[start:end], start, h.cfg.MaxRetries)
		if err != nil {
			return nil, fmt.Errorf("embed: texts %d-%d of %d: %w", start, end-1, len(texts), err)
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// embedBatch sends one batch, retrying up to retries times. offset is the index of the
// batch's first text in the caller's slice, used to name texts in errors.
func (h *HTTP) embedBatch(ctx context.Context, texts []string, offset, retries int) ([][]float32, error) {
	body, err := json.Marshal(embeddingsRequest{Model: h.cfg.Model, Input: texts, EncodingFormat: "float"})
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		vecs, retryAfter, err := h.post(ctx, body, texts, offset)
		if err == nil {
			return vecs, nil
		}
		if ctx.Err() != nil {
			// The caller gave up: report that, with what the attempt saw.
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		}
		if !retryable(err) || attempt >= retries {
			if attempt > 0 {
				return nil, fmt.Errorf("after %d attempts: %w", attempt+1, err)
			}
			return nil, err
		}
		d := h.backoff(attempt, retryAfter)
		h.log.LogAttrs(ctx, slog.LevelWarn, "embeddings request failed; retrying",
			slog.Int("attempt", attempt+1), slog.Int("max_attempts", retries+1),
			slog.Duration("wait", d), slog.String("error", err.Error()))
		if werr := h.wait(ctx, d); werr != nil {
			return nil, fmt.Errorf("%w (last attempt: %w)", werr, err)
		}
	}
}

// backoff is the wait before retry number attempt+1: the server's Retry-After when it gave
// one (capped), else base·2^attempt capped at backoffMax, with equal jitter.
func (h *HTTP) backoff(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, h.maxRetryAfter)
	}
	d := h.backoffMax
	if attempt < 30 && h.backoffBase<<attempt < h.backoffMax {
		d = h.backoffBase << attempt
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// post makes one request with its own timeout. retryAfter is the server's Retry-After, if any.
func (h *HTTP) post(ctx context.Context, body []byte, texts []string, offset int) (vecs [][]float32, retryAfter time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("build request: %w", h.redactErr(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "toolmesh-embed")
	if h.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+h.cfg.APIKey)
	}
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, 0, &transportError{err: fmt.Errorf("POST %s: no answer within %s: %w", h.logURL, h.cfg.Timeout, context.DeadlineExceeded)}
		}
		return nil, 0, &transportError{err: fmt.Errorf("POST %s: %w", h.logURL, h.redactErr(stripURLError(err)))}
	}
	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
		se := parseErrorBody(resp.StatusCode, raw)
		se.Message = h.redact(se.Message)
		return nil, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), se
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, 0, &transportError{err: fmt.Errorf("POST %s: response not read within %s: %w", h.logURL, h.cfg.Timeout, context.DeadlineExceeded)}
		}
		return nil, 0, &transportError{err: fmt.Errorf("POST %s: read response: %w", h.logURL, h.redactErr(err))}
	}
	if len(raw) > maxResponseBytes {
		return nil, 0, fmt.Errorf("response larger than %d bytes", maxResponseBytes)
	}
	vecs, usage, err := h.decode(raw, len(texts), offset)
	if err != nil {
		return nil, 0, err
	}
	h.log.LogAttrs(ctx, slog.LevelDebug, "embedded batch",
		slog.Int("texts", len(texts)), slog.Int("dim", h.Dim()),
		slog.Int("prompt_tokens", usage), slog.Duration("took", time.Since(start)))
	return vecs, 0, nil
}

// decode parses, orders, checks and normalizes one response. n is the number of inputs.
func (h *HTTP) decode(raw []byte, n, offset int) ([][]float32, int, error) {
	var r embeddingsResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, 0, fmt.Errorf("decode response: %w", err)
	}
	if len(r.Data) != n {
		return nil, 0, fmt.Errorf("server returned %d embeddings for %d inputs", len(r.Data), n)
	}
	out := make([][]float32, n)
	for pos, item := range r.Data {
		idx := pos // a server that omits "index" is taken to answer in order
		if item.Index != nil {
			idx = *item.Index
		}
		if idx < 0 || idx >= n {
			return nil, 0, fmt.Errorf("response item %d has index %d, outside 0-%d", pos, idx, n-1)
		}
		if out[idx] != nil {
			return nil, 0, fmt.Errorf("response repeats index %d (text %d)", idx, offset+idx)
		}
		v, err := decodeVector(item.Embedding)
		if err != nil {
			return nil, 0, fmt.Errorf("embedding of text %d: %w", offset+idx, err)
		}
		out[idx] = v
	}
	// Dimension: every vector the same, and the same as configured or learned before.
	want := h.Dim()
	for i, v := range out {
		if want == 0 {
			want = len(v)
			continue
		}
		if len(v) != want {
			return nil, 0, fmt.Errorf("embedding of text %d has dimension %d, want %d", offset+i, len(v), want)
		}
	}
	for i, v := range out {
		if err := normalize(v); err != nil {
			return nil, 0, fmt.Errorf("embedding of text %d: %w", offset+i, err)
		}
	}
	if h.dim.CompareAndSwap(0, int64(want)) {
		h.log.Info("learned embedding dimension", "dim", want, "server_model", r.Model)
	} else if got := h.Dim(); got != want {
		// Another batch learned a different dimension concurrently.
		return nil, 0, fmt.Errorf("embedding dimension %d, want %d", want, got)
	}
	usage := 0
	if r.Usage != nil {
		usage = r.Usage.PromptTokens
	}
	return out, usage, nil
}

// decodeVector reads a JSON array of numbers or a base64 string of little-endian float32s.
func decodeVector(raw json.RawMessage) ([]float32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New("missing")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("decode base64 string: %w", err)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("decode base64: %w", err)
		}
		if len(b)%4 != 0 {
			return nil, fmt.Errorf("base64 holds %d bytes, not a whole number of float32s", len(b))
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, nil
	case '[':
		inner := bytes.TrimSpace(raw[1:])
		if len(inner) > 0 && inner[0] == '[' {
			return nil, errors.New("server returned one vector per token (llama-server with --pooling none?); use a pooling such as mean, cls or last")
		}
		// A non-finite value is written as null by llama.cpp's JSON library; decoding null
		// into a float32 would silently give 0.
		if bytes.Contains(raw, []byte("null")) {
			return nil, errors.New("holds null (a NaN or infinite value on the server)")
		}
		var v []float32
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		return v, nil
	default:
		return nil, fmt.Errorf("is neither an array nor a base64 string (starts with %q)", raw[0])
	}
}

// normalize scales v to unit L2 norm in place; it refuses empty, non-finite and zero vectors.
func normalize(v []float32) error {
	if len(v) == 0 {
		return errors.New("is empty")
	}
	var ss float64
	for i, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("value %d is %v", i, x)
		}
		ss += f * f
	}
	if ss == 0 || math.IsInf(ss, 0) {
		return fmt.Errorf("has norm %v, cannot be normalized", math.Sqrt(ss))
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
	return nil
}

type embeddingsRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
}

type embeddingsResponse struct {
	Data []struct {
		Index     *int            `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage *struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

// StatusError is a non-200 answer from the embeddings server.
type StatusError struct {
	// Status is the HTTP status code.
	Status int
	// Message is the server's error message (error.message in the llama.cpp and OpenAI
	// shapes), or the start of the body when it has no recognizable message.
	Message string
	// Type is the server's error type (e.g. "invalid_request_error"), if it gave one.
	Type string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("embeddings server answered %d %s", e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + strconv.Quote(e.Message)
	}
	if e.Type != "" {
		s += " (" + e.Type + ")"
	}
	return s
}

// Retryable reports whether the status is one that passes (429, 502, 503, 504).
func (e *StatusError) Retryable() bool {
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// transportError marks a failure to get an answer at all (refused, reset, timed out).
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

func retryable(err error) bool {
	var te *transportError
	if errors.As(err, &te) {
		return true
	}
	var se *StatusError
	return errors.As(err, &se) && se.Retryable()
}

// parseErrorBody reads the error shapes in use:
// llama.cpp and OpenAI {"error":{"code":400,"message":"...","type":"..."}},
// TEI and Ollama {"error":"...","error_type":"..."}, older vLLM {"object":"error","message":"...","type":"..."}.
func parseErrorBody(status int, raw []byte) *StatusError {
	se := &StatusError{Status: status}
	var shape struct {
		Error     json.RawMessage `json:"error"`
		ErrorType string          `json:"error_type"`
		Message   string          `json:"message"`
		Type      string          `json:"type"`
	}
	if json.Unmarshal(raw, &shape) == nil {
		var obj struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		}
		var str string
		switch {
		case len(shape.Error) > 0 && json.Unmarshal(shape.Error, &obj) == nil && obj.Message != "":
			se.Message, se.Type = obj.Message, obj.Type
		case len(shape.Error) > 0 && json.Unmarshal(shape.Error, &str) == nil && str != "":
			se.Message, se.Type = str, shape.ErrorType
		case shape.Message != "":
			se.Message, se.Type = shape.Message, shape.Type
		}
	}
	if se.Message == "" {
		se.Message = snippet(raw)
	}
	return se
}

// snippet is the start of a body as one printable line.
func snippet(raw []byte) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(raw), "\uFFFD")), " ")
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(min(secs, 86400)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// stripURLError drops *url.Error's Op and URL (we name the redacted URL ourselves).
func stripURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redact removes the API key from text that came from elsewhere (a server's message).
func (h *HTTP) redact(s string) string {
	if h.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, h.cfg.APIKey, "[redacted]")
}

// redactErr keeps err's chain but guarantees its text holds no API key.
func (h *HTTP) redactErr(err error) error {
	if err == nil || h.cfg.APIKey == "" || !strings.Contains(err.Error(), h.cfg.APIKey) {
		return err
	}
	return &redactedError{msg: h.redact(err.Error()), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
