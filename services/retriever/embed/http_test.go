package embed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testKey = "sk-test-5f1d9c0e7b2a4c8d"

// waits records the retry waits instead of sleeping (it still honours cancellation).
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) wait(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.d)
}

// newTestHTTP builds an embedder on d whose retry waits are recorded, not slept; logs go to
// the returned buffer.
func newTestHTTP(t *testing.T, d *embeddingsDouble, cfg HTTPConfig) (*HTTP, *waits, *syncBuffer) {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = d.srv.URL
	}
	if cfg.Model == "" {
		cfg.Model = "all-MiniLM-L6-v2"
	}
	logs := &syncBuffer{}
	h, err := NewHTTP(cfg, nil, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("NewHTTP: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	w := &waits{}
	h.wait = w.wait
	return h, w, logs
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func texts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tool %d: convert %d degrees celsius to fahrenheit", i, i)
	}
	return out
}

// checkVectors compares got with the double's vectors for in, normalized.
func checkVectors(t *testing.T, in []string, got [][]float32, dim int) {
	t.Helper()
	if len(got) != len(in) {
		t.Fatalf("got %d vectors, want %d", len(got), len(in))
	}
	for i, text := range in {
		want := doubleVector(text, dim)
		if err := normalize(want); err != nil {
			t.Fatal(err)
		}
		if len(got[i]) != dim {
			t.Fatalf("vector %d: got dim %d, want %d", i, len(got[i]), dim)
		}
		var norm float64
		for j := range want {
			if math.Abs(float64(got[i][j]-want[j])) > 1e-6 {
				t.Fatalf("vector %d (%q) component %d: got %v, want %v", i, text, j, got[i][j], want[j])
			}
			norm += float64(got[i][j]) * float64(got[i][j])
		}
		if math.Abs(norm-1) > 1e-5 {
			t.Fatalf("vector %d: got squared norm %v, want 1", i, norm)
		}
	}
}

func TestHTTPConfigValidate(t *testing.T) {
	ok := HTTPConfig{URL: "http://127.0.0.1:8081", Model: "all-MiniLM-L6-v2"}
	tests := []struct {
		name    string
		mutate  func(c *HTTPConfig)
		wantErr string // "" = valid
	}{
		{"minimal", func(*HTTPConfig) {}, ""},
		{"all set", func(c *HTTPConfig) {
			c.APIKey, c.BatchSize, c.Timeout, c.MaxRetries, c.Dim = "k", 8, time.Second, 5, 384
		}, ""},
		{"https with path", func(c *HTTPConfig) { c.URL = "https://example.test/ollama/v1" }, ""},
		{"no URL", func(c *HTTPConfig) { c.URL = "" }, "URL: required"},
		{"bad scheme", func(c *HTTPConfig) { c.URL = "ftp://h:1" }, `URL: scheme "ftp"`},
		{"no scheme", func(c *HTTPConfig) { c.URL = "127.0.0.1:8081" }, "URL:"},
		{"no host", func(c *HTTPConfig) { c.URL = "http:///v1" }, "URL:"},
		{"no model", func(c *HTTPConfig) { c.Model = " " }, "Model: required"},
		{"key with newline", func(c *HTTPConfig) { c.APIKey = "a\nb" }, "APIKey:"},
		{"negative batch", func(c *HTTPConfig) { c.BatchSize = -1 }, "BatchSize:"},
		{"negative timeout", func(c *HTTPConfig) { c.Timeout = -time.Second }, "Timeout:"},
		{"negative retries", func(c *HTTPConfig) { c.MaxRetries = -1 }, "MaxRetries:"},
		{"negative dim", func(c *HTTPConfig) { c.Dim = -3 }, "Dim:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
			if _, nerr := NewHTTP(c, nil, nil); (nerr == nil) != (err == nil) {
				t.Fatalf("NewHTTP error %v disagrees with Validate error %v", nerr, err)
			}
		})
	}
}

func TestHTTPDefaults(t *testing.T) {
	h, err := NewHTTP(HTTPConfig{URL: "http://127.0.0.1:1", Model: "m"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got := h.cfg
	if got.BatchSize != 32 || got.Timeout != 30*time.Second || got.MaxRetries != 3 {
		t.Fatalf("defaults: got batch %d timeout %s retries %d, want 32 30s 3", got.BatchSize, got.Timeout, got.MaxRetries)
	}
	if h.Model() != "m" || h.Dim() != 0 {
		t.Fatalf("got Model %q Dim %d, want m 0", h.Model(), h.Dim())
	}
}

func TestEndpoint(t *testing.T) {
	tests := []struct{ base, want string }{
		{"http://127.0.0.1:8081", "http://127.0.0.1:8081/v1/embeddings"},
		{"http://127.0.0.1:8081/", "http://127.0.0.1:8081/v1/embeddings"},
		{"http://localhost:11434/v1", "http://localhost:11434/v1/embeddings"},
		{"http://localhost:11434/v1/", "http://localhost:11434/v1/embeddings"},
		{"https://gw.test/tei/v1/embeddings", "https://gw.test/tei/v1/embeddings"},
		{"https://gw.test/tei", "https://gw.test/tei/v1/embeddings"},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			u, err := endpoint(tt.base)
			if err != nil {
				t.Fatal(err)
			}
			if got := u.String(); got != tt.want {
				t.Fatalf("endpoint(%q) = %q, want %q", tt.base, got, tt.want)
			}
		})
	}
}

// TestEmbed drives Embed against the double's documented behaviours.
func TestEmbed(t *testing.T) {
	tests := []struct {
		name   string
		double doubleOptions
		cfg    HTTPConfig
		n      int // texts
		// success: the batch sizes the double saw; failure: the error text pieces.
		wantBatches  []int
		wantErr      []string
		wantRequests int
		wantWaits    []time.Duration // exact waits (Retry-After); nil = not checked
		wantNumWaits int
	}{
		{
			name: "one batch", double: doubleOptions{}, n: 5,
			wantBatches: []int{5}, wantRequests: 1,
		},
		{
			name: "70 texts in 3 batches of 32", double: doubleOptions{dim: 16}, n: 70,
			wantBatches: []int{32, 32, 6}, wantRequests: 3,
		},
		{
			name: "batch size 10", double: doubleOptions{}, cfg: HTTPConfig{BatchSize: 10}, n: 25,
			wantBatches: []int{10, 10, 5}, wantRequests: 3,
		},
		{
			name: "shuffled data ordered by index", double: doubleOptions{shuffle: true}, n: 70,
			wantBatches: []int{32, 32, 6}, wantRequests: 3,
		},
		{
			name: "no index: position order", double: doubleOptions{noIndex: true}, n: 7,
			wantBatches: []int{7}, wantRequests: 1,
		},
		{
			name: "base64 embeddings", double: doubleOptions{base64: true, shuffle: true}, n: 40,
			wantBatches: []int{32, 8}, wantRequests: 2,
		},
		{
			name: "llama-server loading then ready", double: doubleOptions{loading: 2}, n: 3,
			wantBatches: []int{3}, wantRequests: 3, wantNumWaits: 2,
		},
		{
			name: "429 honours Retry-After", double: doubleOptions{rateLimited: 2, retryAfter: "2"}, n: 3,
			wantBatches: []int{3}, wantRequests: 3, wantWaits: []time.Duration{2 * time.Second, 2 * time.Second},
		},
		{
			name: "502 from a proxy is retried", double: doubleOptions{badGateway: 1}, n: 3,
			wantBatches: []int{3}, wantRequests: 2, wantNumWaits: 1,
		},
		{
			name: "still loading after all retries", double: doubleOptions{loading: 100}, cfg: HTTPConfig{MaxRetries: 2}, n: 3,
			wantErr: []string{"503", `"Loading model"`, "unavailable_error", "after 3 attempts"}, wantRequests: 3, wantNumWaits: 2,
		},
		{
			name: "400 exceed context is not retried", double: doubleOptions{maxTokens: 6}, n: 3,
			cfg:     HTTPConfig{},
			wantErr: []string{"400", "request (10 tokens) exceeds the available context size (6 tokens)", "exceed_context_size_error"}, wantRequests: 1,
		},
		{
			name: "500 input too large is not retried", double: doubleOptions{maxBatchTokens: 6}, n: 3,
			wantErr: []string{"500", "is too large to process. increase the physical batch size"}, wantRequests: 1,
		},
		{
			name: "401 bad key is not retried", double: doubleOptions{apiKey: "sk-the-right-one"}, cfg: HTTPConfig{APIKey: testKey}, n: 3,
			wantErr: []string{"401", "Incorrect API key provided", "invalid_request_error"}, wantRequests: 1,
		},
		{
			name: "right key", double: doubleOptions{apiKey: testKey}, cfg: HTTPConfig{APIKey: testKey}, n: 3,
			wantBatches: []int{3}, wantRequests: 1,
		},
		{
			name: "404 wrong path is not retried", double: doubleOptions{}, cfg: HTTPConfig{URL: "/nope/v1/embeddings/x"}, n: 1,
			wantErr: []string{"404", "File Not Found"}, wantRequests: 1,
		},
		{
			name: "wrong count", double: doubleOptions{dropLast: true}, n: 4,
			wantErr: []string{"returned 3 embeddings for 4 inputs"}, wantRequests: 1,
		},
		{
			name: "mismatched dims name the text", double: doubleOptions{badDimAt: at(3)}, n: 40,
			wantErr: []string{"text 3 has dimension 9, want 8"}, wantRequests: 1,
		},
		{
			name: "dimension changes between batches", double: doubleOptions{regrowAfter: 1}, n: 40,
			wantErr: []string{"texts 32-39 of 40", "text 32 has dimension 16, want 8"}, wantRequests: 2,
		},
		{
			name: "configured dim differs", double: doubleOptions{dim: 8}, cfg: HTTPConfig{Dim: 384}, n: 2,
			wantErr: []string{"text 0 has dimension 8, want 384"}, wantRequests: 1,
		},
		{
			name: "configured dim matches", double: doubleOptions{dim: 8}, cfg: HTTPConfig{Dim: 8}, n: 2,
			wantBatches: []int{2}, wantRequests: 1,
		},
		{
			name: "null (NaN) value", double: doubleOptions{nullAt: at(1)}, n: 3,
			wantErr: []string{"text 1", "null"}, wantRequests: 1,
		},
		{
			name: "per-token vectors (pooling none)", double: doubleOptions{perToken: true}, n: 2,
			wantErr: []string{"--pooling none"}, wantRequests: 1,
		},
		{
			name: "hanging server times out and retries", double: doubleOptions{hang: true},
			cfg: HTTPConfig{Timeout: 50 * time.Millisecond, MaxRetries: 1}, n: 1,
			wantErr: []string{"no answer within 50ms", "after 2 attempts"}, wantRequests: 2, wantNumWaits: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDouble(t, tt.double)
			cfg := tt.cfg
			if strings.HasPrefix(cfg.URL, "/") {
				cfg.URL = d.srv.URL + cfg.URL
			}
			h, w, logs := newTestHTTP(t, d, cfg)
			in := texts(tt.n)
			got, err := h.Embed(context.Background(), in)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Embed: %v", err)
				}
				checkVectors(t, in, got, d.dim)
				if h.Dim() != d.dim {
					t.Fatalf("Dim() = %d, want %d", h.Dim(), d.dim)
				}
				if gotB := d.batchSizes(); !slices.Equal(gotB, tt.wantBatches) {
					t.Fatalf("batch sizes: got %v, want %v", gotB, tt.wantBatches)
				}
				// The batches went in order: batch k holds texts k·B … (k+1)·B−1.
				batches, models, formats := d.sent()
				var sent []string
				for _, b := range batches {
					sent = append(sent, b...)
				}
				if !slices.Equal(sent, in) {
					t.Fatalf("texts were not sent in order")
				}
				for i, m := range models {
					if m != "all-MiniLM-L6-v2" || formats[i] != "float" {
						t.Fatalf("request %d: got model %q encoding_format %q, want all-MiniLM-L6-v2 float", i, m, formats[i])
					}
				}
			} else {
				if err == nil {
					t.Fatalf("Embed: got nil error, want one containing %q", tt.wantErr)
				}
				for _, part := range tt.wantErr {
					if !strings.Contains(err.Error(), part) {
						t.Fatalf("Embed error %q: want it to contain %q", err, part)
					}
				}
				if got != nil {
					t.Fatalf("Embed: got %d vectors with an error, want none", len(got))
				}
			}
			if n := d.count(); n != tt.wantRequests {
				t.Fatalf("requests: got %d, want %d", n, tt.wantRequests)
			}
			gotWaits := w.all()
			if tt.wantWaits != nil && !slices.Equal(gotWaits, tt.wantWaits) {
				t.Fatalf("waits: got %v, want %v", gotWaits, tt.wantWaits)
			}
			if tt.wantWaits == nil && len(gotWaits) != tt.wantNumWaits {
				t.Fatalf("waits: got %v, want %d of them", gotWaits, tt.wantNumWaits)
			}
			for _, s := range []string{err2s(err), logs.String()} {
				if strings.Contains(s, testKey) {
					t.Fatalf("API key leaked: %q", s)
				}
			}
		})
	}
}

func err2s(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestEmbedStatusErrorIsTyped(t *testing.T) {
	d := newDouble(t, doubleOptions{maxTokens: 3})
	h, _, _ := newTestHTTP(t, d, HTTPConfig{})
	_, err := h.Embed(context.Background(), []string{"a b c d e"})
	var se *StatusError
	if !errors.As(err, &se) {
		t.Fatalf("Embed error %v: want a *StatusError in its chain", err)
	}
	if se.Status != 400 || se.Type != "exceed_context_size_error" || se.Retryable() {
		t.Fatalf("got %+v (retryable %v), want status 400 type exceed_context_size_error not retryable", se, se.Retryable())
	}
}

func TestEmbedEmptyInput(t *testing.T) {
	d := newDouble(t, doubleOptions{})
	h, _, _ := newTestHTTP(t, d, HTTPConfig{})
	got, err := h.Embed(context.Background(), nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("Embed(nil) = %v, %v; want empty, nil", got, err)
	}
	if _, err := h.Embed(context.Background(), []string{"ok", " "}); err == nil || !strings.Contains(err.Error(), "text 1 is empty") {
		t.Fatalf("Embed with a blank text: got %v, want an error naming text 1", err)
	}
	if n := d.count(); n != 0 {
		t.Fatalf("requests: got %d, want 0", n)
	}
}

func TestEmbedCancellation(t *testing.T) {
	tests := []struct {
		name   string
		double doubleOptions
		// realWait keeps the real sleeping wait with a long backoff, so the cancel lands in it.
		realWait bool
	}{
		{name: "while the server hangs", double: doubleOptions{hang: true}},
		{name: "during the backoff wait", double: doubleOptions{loading: 100}, realWait: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDouble(t, tt.double)
			h, _, _ := newTestHTTP(t, d, HTTPConfig{Timeout: time.Minute, MaxRetries: 5})
			if tt.realWait {
				h.wait = sleepCtx
				h.backoffBase, h.backoffMax = time.Minute, time.Minute
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			start := time.Now()
			_, err := h.Embed(ctx, texts(3))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Embed error %v: want context.Canceled in its chain", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("Embed returned %s after the cancel, want at once", took)
			}
			if n := d.count(); n != 1 {
				t.Fatalf("requests: got %d, want 1 (no retry after cancel)", n)
			}
		})
	}
}

func TestEmbedConnectionRefusedIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	h, err := NewHTTP(HTTPConfig{URL: "http://" + addr, Model: "m", APIKey: testKey, MaxRetries: 2}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	w := &waits{}
	h.wait = w.wait
	_, err = h.Embed(context.Background(), []string{"hello"})
	if err == nil || !strings.Contains(err.Error(), "after 3 attempts") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Embed error %v: want connection refused after 3 attempts", err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Fatalf("API key leaked: %q", err)
	}
	if got := len(w.all()); got != 2 {
		t.Fatalf("waits: got %d, want 2", got)
	}
}

func TestBackoff(t *testing.T) {
	h, err := NewHTTP(HTTPConfig{URL: "http://127.0.0.1:1", Model: "m"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for attempt := range 40 {
		d := h.backoff(attempt, 0)
		hi := min(h.backoffBase<<min(attempt, 20), h.backoffMax)
		if d < hi/2 || d > hi {
			t.Fatalf("backoff(%d) = %s, want in [%s, %s]", attempt, d, hi/2, hi)
		}
	}
	if d := h.backoff(0, 7*time.Second); d != 7*time.Second {
		t.Fatalf("backoff with Retry-After 7s = %s, want 7s", d)
	}
	if d := h.backoff(0, time.Hour); d != h.maxRetryAfter {
		t.Fatalf("backoff with Retry-After 1h = %s, want the cap %s", d, h.maxRetryAfter)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {" 0 ", 0}, {"-4", 0}, {"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestParseErrorBody(t *testing.T) {
	tests := []struct {
		name          string
		status        int
		body          string
		wantMsg, want string // want: the Type
	}{
		{"llama.cpp 401", 401, `{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}`, "Invalid API Key", "authentication_error"},
		{"llama.cpp", 503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, "Loading model", "unavailable_error"},
		{"llama.cpp exceed context", 400, `{"error":{"code":400,"message":"request (600 tokens) exceeds the available context size (512 tokens)","type":"exceed_context_size_error","n_prompt_tokens":600,"n_ctx":512}}`,
			"request (600 tokens) exceeds the available context size (512 tokens)", "exceed_context_size_error"},
		{"openai", 401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, "Incorrect API key provided", "invalid_request_error"},
		{"tei", 413, `{"error":"batch size 64 > maximum allowed batch size 32","error_type":"validation"}`, "batch size 64 > maximum allowed batch size 32", "validation"},
		{"ollama", 404, `{"error":"model \"nomic\" not found, try pulling it first"}`, `model "nomic" not found, try pulling it first`, ""},
		{"vllm flat", 400, `{"object":"error","message":"This model's maximum context length is 512 tokens.","type":"BadRequestError","param":null,"code":400}`, "This model's maximum context length is 512 tokens.", "BadRequestError"},
		{"html", 502, "<html>\n<body>502   Bad Gateway</body></html>", "<html> <body>502 Bad Gateway</body></html>", ""},
		{"empty", 504, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := parseErrorBody(tt.status, []byte(tt.body))
			if se.Message != tt.wantMsg || se.Type != tt.want || se.Status != tt.status {
				t.Fatalf("got %+v, want status %d message %q type %q", se, tt.status, tt.wantMsg, tt.want)
			}
		})
	}
}

func TestDecodeVector(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    []float32
		wantErr string
	}{
		{"floats", `[0.5, -1, 2e-3]`, []float32{0.5, -1, 0.002}, ""},
		{"base64", `"AAAAPwAAgL8="`, []float32{0.5, -1}, ""},
		{"base64 ragged", `"AAAAPwAA"`, nil, "whole number"},
		{"null inside", `[0.5, null]`, nil, "null"},
		{"missing", `null`, nil, "missing"},
		{"nested", `[[0.1],[0.2]]`, nil, "per token"},
		{"object", `{"x":1}`, nil, "neither"},
		{"overflow", `[1e300]`, nil, "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeVector([]byte(tt.raw))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("decodeVector(%s) error %v, want one containing %q", tt.raw, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("decodeVector(%s) = %v, %v; want %v", tt.raw, got, err, tt.want)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name    string
		in      []float32
		want    []float32
		wantErr string
	}{
		{"3-4-5", []float32{3, 4}, []float32{0.6, 0.8}, ""},
		{"already unit", []float32{0, 1, 0}, []float32{0, 1, 0}, ""},
		{"zero", []float32{0, 0}, nil, "norm 0"},
		{"NaN", []float32{1, float32(math.NaN())}, nil, "value 1 is NaN"},
		{"Inf", []float32{float32(math.Inf(-1))}, nil, "value 0 is -Inf"},
		{"empty", nil, nil, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := slices.Clone(tt.in)
			err := normalize(v)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("normalize(%v) error %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range v {
				if math.Abs(float64(v[i]-tt.want[i])) > 1e-6 {
					t.Fatalf("normalize(%v) = %v, want %v", tt.in, v, tt.want)
				}
			}
		})
	}
}

func TestProbe(t *testing.T) {
	tests := []struct {
		name    string
		double  doubleOptions
		cfg     HTTPConfig
		wantErr []string
		wantDim int
	}{
		{name: "learns the dimension", double: doubleOptions{dim: 384}, wantDim: 384},
		{name: "loading: one attempt, quoted", double: doubleOptions{loading: 5}, wantErr: []string{"probe", "503", "Loading model"}},
		{name: "dimension differs from config", double: doubleOptions{dim: 384}, cfg: HTTPConfig{Dim: 768}, wantErr: []string{"dimension 384, want 768"}, wantDim: 768},
		{name: "bad key", double: doubleOptions{apiKey: "other"}, cfg: HTTPConfig{APIKey: testKey}, wantErr: []string{"401"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDouble(t, tt.double)
			h, w, _ := newTestHTTP(t, d, tt.cfg)
			err := h.Probe(context.Background())
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Probe: %v", err)
			}
			for _, part := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), part) {
					t.Fatalf("Probe error %v: want it to contain %q", err, part)
				}
			}
			if err != nil && strings.Contains(err.Error(), testKey) {
				t.Fatalf("API key leaked: %q", err)
			}
			if h.Dim() != tt.wantDim {
				t.Fatalf("Dim() = %d, want %d", h.Dim(), tt.wantDim)
			}
			if n := d.count(); n != 1 || len(w.all()) != 0 {
				t.Fatalf("got %d requests and %d waits, want 1 and 0", n, len(w.all()))
			}
		})
	}
}

// TestEmbedConcurrent checks the embedder is safe for concurrent use (run with -race).
func TestEmbedConcurrent(t *testing.T) {
	d := newDouble(t, doubleOptions{shuffle: true})
	h, _, _ := newTestHTTP(t, d, HTTPConfig{BatchSize: 4})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			in := texts(10 + g)
			got, err := h.Embed(context.Background(), in)
			if err != nil {
				errs <- err
				return
			}
			if len(got) != len(in) {
				errs <- fmt.Errorf("got %d vectors, want %d", len(got), len(in))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestIntegrationRealServer runs against a real OpenAI-compatible embeddings server, e.g.
// llama-server -m all-MiniLM-L6-v2.gguf --embedding --pooling mean --host 127.0.0.1 --port 8081.
func TestIntegrationRealServer(t *testing.T) {
	base := os.Getenv("TOOLMESH_TEST_EMBEDDINGS_URL")
	if base == "" {
		t.Skip("TOOLMESH_TEST_EMBEDDINGS_URL not set: no real embeddings server (the double-backed tests ran)")
	}
	model := os.Getenv("TOOLMESH_TEST_EMBEDDINGS_MODEL")
	if model == "" {
		model = "all-MiniLM-L6-v2"
	}
	h, err := NewHTTP(HTTPConfig{URL: base, Model: model, APIKey: os.Getenv("TOOLMESH_TEST_EMBEDDINGS_API_KEY"), BatchSize: 8}, nil,
		slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The server may still be loading its model: poll Probe.
	for {
		err = h.Probe(ctx)
		var se *StatusError
		if err == nil || !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable {
			break
		}
		if werr := sleepCtx(ctx, 500*time.Millisecond); werr != nil {
			t.Fatalf("server still loading: %v", err)
		}
	}
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if h.Dim() <= 0 {
		t.Fatalf("Dim() = %d after Probe, want > 0", h.Dim())
	}
	in := []string{
		"convert degrees celsius to fahrenheit",
		"convert a temperature from celsius into fahrenheit",
		"add two numbers",
	}
	in = append(in, texts(17)...) // 20 texts: 3 batches of 8
	got, err := h.Embed(ctx, in)
	if err != nil {
		t.Fatalf("Embed: %v", err)
	}
	if len(got) != len(in) {
		t.Fatalf("got %d vectors, want %d", len(got), len(in))
	}
	for i, v := range got {
		if len(v) != h.Dim() {
			t.Fatalf("vector %d: dim %d, want %d", i, len(v), h.Dim())
		}
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if math.Abs(n-1) > 1e-4 {
			t.Fatalf("vector %d: squared norm %v, want 1", i, n)
		}
	}
	// Batched results equal one-at-a-time results: the order is kept.
	for _, i := range []int{0, 9, 19} {
		one, err := h.Embed(ctx, in[i:i+1])
		if err != nil {
			t.Fatal(err)
		}
		if c := cosine(one[0], got[i]); c < 0.999 {
			t.Fatalf("text %d alone vs in a batch: cosine %v, want ≈1", i, c)
		}
	}
	t.Logf("model %s dim %d; cos(celsius, celsius')=%.3f cos(celsius, add)=%.3f",
		model, h.Dim(), cosine(got[0], got[1]), cosine(got[0], got[2]))

	// An input far beyond any embedding model's context is either truncated by the server
	// (Ollama) or refused at once with the server's message (llama-server: 500 "input (N
	// tokens) is too large to process…"; TEI: 413), never hangs in retries.
	huge := strings.Repeat("celsius fahrenheit kelvin ", 20000)
	start := time.Now()
	if _, err := h.Embed(ctx, []string{huge}); err != nil {
		var se *StatusError
		if !errors.As(err, &se) || se.Retryable() || se.Message == "" {
			t.Fatalf("Embed(huge): %v; want a non-retryable *StatusError with the server's message", err)
		}
		t.Logf("huge input refused in %s: %v", time.Since(start).Round(time.Millisecond), err)
	}

	if key := os.Getenv("TOOLMESH_TEST_EMBEDDINGS_API_KEY"); key != "" {
		bad := "sk-wrong-" + key
		hb, err := NewHTTP(HTTPConfig{URL: base, Model: model, APIKey: bad}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer hb.Close()
		err = hb.Probe(ctx)
		var se *StatusError
		if !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
			t.Fatalf("Probe with a wrong key: %v; want a 401 *StatusError", err)
		}
		if strings.Contains(err.Error(), bad) {
			t.Fatalf("API key leaked: %q", err)
		}
		t.Logf("wrong key: %v", err)
	}
}

func cosine(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}
