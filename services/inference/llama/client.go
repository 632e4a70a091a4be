// Package llama is a client of llama.cpp's llama-server HTTP API (/health, /props, /tokenize,
// /completion with and without streaming), the way the inference service drives Gorilla
// OpenFunctions v2. Failures come back as *Error, whose Code is the gRPC code the service
// answers with. Package llamatest holds a protocol-faithful double of the server and helpers
// that run the real one on a tiny model.
package llama

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/services/inference/llmhttp"
)

// Defaults applied by New to zero fields of Config.
const (
	DefaultTimeout        = 2 * time.Minute
	DefaultIdleTimeout    = time.Minute
	DefaultHealthTimeout  = 2 * time.Second
	DefaultReadyTimeout   = 2 * time.Minute
	DefaultTokenCacheSize = 4096
	DefaultNPredict       = 1024
)

const (
	maxResponseBytes  = 16 << 20 // one JSON answer or one stream event
	maxErrorBodyBytes = 64 << 10 // how much of an error body is read and quoted
)

// Config configures a Client. Zero durations and sizes take the defaults above.
type Config struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:8080 (llama-server is always
	// started with an explicit --host/--port).
	URL string
	// APIKey, when set, is sent as "Authorization: Bearer KEY" (llama-server --api-key). It is
	// never logged and never appears in errors.
	APIKey string
	// Model names the model in logs and spans; llama-server serves the one it loaded.
	Model string
	// Timeout bounds one request: a whole completion, streamed ones included.
	Timeout time.Duration
	// IdleTimeout bounds the wait for the first byte of an answer and, when streaming, the
	// gap between two events (a long prompt on a slow machine can take a while to process).
	IdleTimeout time.Duration
	// HealthTimeout bounds one /health probe.
	HealthTimeout time.Duration
	// ReadyTimeout bounds WaitReady (model loading included).
	ReadyTimeout time.Duration
	// TokenCacheSize is how many texts CountTokens remembers (least recently used go first).
	TokenCacheSize int
	// NPredict is n_predict for requests that leave it 0.
	NPredict int
	// Sampling is what requests that leave a setting nil send; nil here too means the
	// server's default.
	Sampling Sampling
}

// Sampling settings of /completion; nil fields are not sent.
type Sampling struct {
	Temperature *float64
	TopK        *int
	TopP        *float64
	MinP        *float64
	Seed        *int64
	// RepeatPenalty is repeat_penalty (1 = off).
	RepeatPenalty *float64
}

// RegisterFlags binds the config to flags named prefix+"url" and so on (prefix e.g.
// "inference.llama.") and sets their defaults; the URL's default is what c holds. Model is
// not a flag here: the caller names the model. The API key is not a flag (flags show in ps
// and logs): the caller reads it from the environment.
func (c *Config) RegisterFlags(fs *flag.FlagSet, prefix string) {
	fs.StringVar(&c.URL, prefix+"url", c.URL, "base URL of a llama-server you run yourself, e.g. http://127.0.0.1:8080")
	fs.DurationVar(&c.Timeout, prefix+"timeout", DefaultTimeout, "timeout of one llama-server request (a whole completion)")
	fs.DurationVar(&c.IdleTimeout, prefix+"idle-timeout", DefaultIdleTimeout, "longest wait for the first byte of an answer or between two streamed events")
	fs.DurationVar(&c.HealthTimeout, prefix+"health-timeout", DefaultHealthTimeout, "timeout of one /health probe")
	fs.DurationVar(&c.ReadyTimeout, prefix+"ready-timeout", DefaultReadyTimeout, "how long to wait for llama-server to load its model")
	fs.IntVar(&c.TokenCacheSize, prefix+"token-cache", DefaultTokenCacheSize, "texts whose token counts are cached")
	fs.IntVar(&c.NPredict, prefix+"n-predict", DefaultNPredict, "n_predict of requests that do not set it")
	fs.Func(prefix+"temperature", "sampling temperature (default: 0, greedy)", floatFlag(&c.Sampling.Temperature))
	if c.Sampling.Temperature == nil {
		c.Sampling.Temperature = new(0.0)
	}
}

func floatFlag(p **float64) func(string) error {
	return func(s string) error {
		var f float64
		if _, err := fmt.Sscan(s, &f); err != nil {
			return fmt.Errorf("not a number: %q", s)
		}
		*p = &f
		return nil
	}
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	if _, err := llmhttp.ParseBaseURL("llama", c.URL); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", c.Timeout}, {"IdleTimeout", c.IdleTimeout}, {"HealthTimeout", c.HealthTimeout}, {"ReadyTimeout", c.ReadyTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("llama: %s: %v is negative", d.name, d.v)
		}
	}
	if c.TokenCacheSize < 0 {
		return fmt.Errorf("llama: TokenCacheSize: %d is negative", c.TokenCacheSize)
	}
	if strings.ContainsAny(c.APIKey, "\r\n") {
		return errors.New("llama: APIKey: contains a line break")
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Timeout, DefaultTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.HealthTimeout, DefaultHealthTimeout)
	def(&c.ReadyTimeout, DefaultReadyTimeout)
	if c.TokenCacheSize == 0 {
		c.TokenCacheSize = DefaultTokenCacheSize
	}
	if c.NPredict == 0 {
		c.NPredict = DefaultNPredict
	}
	return c
}

// Client calls one llama-server. It is safe for concurrent use.
type Client struct {
	cfg     Config
	base    *url.URL
	hc      *http.Client
	ownHC   bool
	log     *slog.Logger
	tokens  *tokenCache
	backoff func(attempt int) time.Duration
}

// New returns a client of the server at cfg.URL. A nil httpClient means a private one (Close
// releases its idle connections); a nil logger discards logs.
func New(cfg Config, httpClient *http.Client, logger *slog.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	base, _ := url.Parse(strings.TrimRight(cfg.URL, "/"))
	own := httpClient == nil
	if own {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 16
		httpClient = &http.Client{Transport: tr}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Client{
		cfg: cfg, base: base, hc: httpClient, ownHC: own,
		log:     logger.With("component", "llama", "server", base.Redacted(), "model", cfg.Model),
		tokens:  newTokenCache(cfg.TokenCacheSize),
		backoff: readyBackoff,
	}, nil
}

// Config is the client's configuration with the defaults applied.
func (c *Client) Config() Config { return c.cfg }

// Close releases idle connections of the client's own HTTP client.
func (c *Client) Close() error {
	if c.ownHC {
		c.hc.CloseIdleConnections()
	}
	return nil
}

// Health asks /health once: nil when the server answers 200. While it loads its model the
// error matches ErrNotReady (Code Unavailable); a server that cannot be reached is
// Unavailable too.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.getJSON(ctx, "health", "/health", c.cfg.HealthTimeout)
	return err
}

// WaitReady polls /health until the server is ready, backing off from 50 ms to 2 s, for at
// most ReadyTimeout. It returns the last probe's error when time runs out. Only "not ready"
// and "unreachable" are waited out: any other answer (401, 404…) is returned at once.
func (c *Client) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, c.cfg.ReadyTimeout, errTimeout{c.cfg.ReadyTimeout})
	defer cancel()
	var last error
	for attempt := 0; ; attempt++ {
		err := c.Health(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return c.readyTimeout(ctx, cmp.Or(last, err))
		}
		if llmhttp.Code(err) != codes.Unavailable && llmhttp.Code(err) != codes.DeadlineExceeded {
			return err
		}
		last = err
		c.log.DebugContext(ctx, "llama-server not ready", "attempt", attempt+1, "err", err)
		t := time.NewTimer(c.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return c.readyTimeout(ctx, last)
		case <-t.C:
		}
	}
}

func (c *Client) readyTimeout(ctx context.Context, last error) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, context.Canceled) {
		return &Error{Op: "health", Code: codes.Canceled, sentinel: context.Canceled,
			Message: fmt.Sprintf("canceled while waiting for the server to be ready (last: %v)", last), err: last}
	}
	what := "deadline exceeded"
	var te errTimeout
	if errors.As(cause, &te) {
		what = te.Error()
	}
	return &Error{Op: "health", Code: codes.DeadlineExceeded, sentinel: context.DeadlineExceeded,
		Message: fmt.Sprintf("not ready: %s (last: %v)", what, last), err: last}
}

// readyBackoff is 50 ms doubling to 2 s, with ±20% jitter.
func readyBackoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 6)
	d = min(d, 2*time.Second)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Props is what /props tells about the server.
type Props struct {
	// NCtx is the context size of one slot (-c divided by -np, unless the KV cache is unified
	// per slot): the most tokens one request's prompt and output can take.
	NCtx int
	// TotalSlots is -np, the requests served in parallel.
	TotalSlots int
	ModelPath  string
	ModelAlias string
	BuildInfo  string // "b11669-Debian"
	BOSToken   string
	EOSToken   string
	// Raw is the whole answer.
	Raw json.RawMessage
}

// Props reads /props.
func (c *Client) Props(ctx context.Context) (*Props, error) {
	raw, err := c.getJSON(ctx, "props", "/props", c.cfg.Timeout)
	if err != nil {
		return nil, err
	}
	var p struct {
		DefaultGenerationSettings struct {
			NCtx   int `json:"n_ctx"`
			Params struct {
				NCtx int `json:"n_ctx"`
			} `json:"params"`
		} `json:"default_generation_settings"`
		NCtx       int    `json:"n_ctx"`
		TotalSlots int    `json:"total_slots"`
		ModelPath  string `json:"model_path"`
		ModelAlias string `json:"model_alias"`
		BuildInfo  string `json:"build_info"`
		BOSToken   string `json:"bos_token"`
		EOSToken   string `json:"eos_token"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, badAnswer("props", err, raw)
	}
	out := &Props{
		NCtx:       cmpOr(p.DefaultGenerationSettings.NCtx, p.DefaultGenerationSettings.Params.NCtx, p.NCtx),
		TotalSlots: p.TotalSlots, ModelPath: p.ModelPath, ModelAlias: p.ModelAlias,
		BuildInfo: p.BuildInfo, BOSToken: p.BOSToken, EOSToken: p.EOSToken, Raw: raw,
	}
	if out.NCtx <= 0 {
		return nil, badAnswer("props", errors.New("no default_generation_settings.n_ctx"), raw)
	}
	return out, nil
}

func cmpOr(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

// Tokenize returns the tokens of text as /completion sees a prompt string, without the BOS
// token it adds in front (add_special false, parse_special true).
func (c *Client) Tokenize(ctx context.Context, text string) ([]int, error) {
	toks, err := c.tokenize(ctx, text, false)
	if err != nil {
		return nil, err
	}
	ids := make([]int, len(toks))
	for i, t := range toks {
		ids[i] = t.ID
	}
	return ids, nil
}

// Token is one token of a text and its piece: the bytes it stands for, which for a byte token
// may be part of a character.
type Token struct {
	ID    int
	Piece []byte
}

// TokenizePieces is Tokenize with each token's piece ("with_pieces": true), so a text can be cut
// at a token boundary without a /detokenize round trip. A tokenizer that puts a space in front
// of a text (SentencePiece) shows it in the first piece.
func (c *Client) TokenizePieces(ctx context.Context, text string) ([]Token, error) {
	return c.tokenize(ctx, text, true)
}

func (c *Client) tokenize(ctx context.Context, text string, withPieces bool) ([]Token, error) {
	req := map[string]any{"content": text, "add_special": false, "parse_special": true}
	if withPieces {
		req["with_pieces"] = true
	}
	body, _ := json.Marshal(req)
	raw, err := c.postJSON(ctx, "tokenize", "/tokenize", body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Tokens == nil {
		if err == nil {
			err = errors.New("no tokens field")
		}
		return nil, badAnswer("tokenize", err, raw)
	}
	toks := make([]Token, len(out.Tokens))
	for i, t := range out.Tokens {
		// Plain ids, or {"id":N,"piece":...} (asked for, or a server's default).
		if json.Unmarshal(t, &toks[i].ID) == nil {
			if withPieces {
				return nil, badAnswer("tokenize", fmt.Errorf("token %d has no piece (a server without with_pieces)", i), raw)
			}
			continue
		}
		var p struct {
			ID    *int            `json:"id"`
			Piece json.RawMessage `json:"piece"`
		}
		if json.Unmarshal(t, &p) != nil || p.ID == nil {
			return nil, badAnswer("tokenize", fmt.Errorf("token %d is %s", i, t), raw)
		}
		toks[i].ID = *p.ID
		if !withPieces {
			continue
		}
		piece, err := pieceBytes(p.Piece)
		if err != nil {
			return nil, badAnswer("tokenize", fmt.Errorf("token %d: %w", i, err), raw)
		}
		toks[i].Piece = piece
	}
	return toks, nil
}

// pieceBytes reads a /tokenize piece: a string when its bytes are valid UTF-8, else the array
// of its byte values.
func pieceBytes(raw json.RawMessage) ([]byte, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []byte(s), nil
	}
	var bs []int
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, fmt.Errorf("piece %s is neither a string nor bytes", llmhttp.Snippet(raw))
	}
	out := make([]byte, len(bs))
	for i, b := range bs {
		if b < 0 || b > 255 {
			return nil, fmt.Errorf("piece byte %d is out of range", b)
		}
		out[i] = byte(b)
	}
	return out, nil
}

// CountTokens is len(Tokenize(text)), remembered for the last TokenCacheSize texts. Counts
// do not add up exactly: a SentencePiece tokenizer puts a space in front of each text, so
// count the prompt as a whole when it has to be exact.
func (c *Client) CountTokens(ctx context.Context, text string) (int, error) {
	if n, ok := c.tokens.get(text); ok {
		return n, nil
	}
	ids, err := c.Tokenize(ctx, text)
	if err != nil {
		return 0, err
	}
	c.tokens.put(text, len(ids))
	return len(ids), nil
}

func (c *Client) getJSON(ctx context.Context, op, path string, timeout time.Duration) ([]byte, error) {
	return c.roundTrip(ctx, op, http.MethodGet, path, nil, timeout)
}

func (c *Client) postJSON(ctx context.Context, op, path string, body []byte) ([]byte, error) {
	return c.roundTrip(ctx, op, http.MethodPost, path, body, c.cfg.Timeout)
}

// roundTrip sends one request and returns the 200 body, which must be JSON.
func (c *Client) roundTrip(ctx context.Context, op, method, path string, body []byte, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout{timeout})
	defer cancel()
	start := time.Now()
	resp, err := c.send(ctx, op, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, c.transportError(ctx, op, err)
	}
	c.log.DebugContext(ctx, "llama-server call", "op", op, "status", resp.StatusCode, "duration", time.Since(start))
	if resp.StatusCode != http.StatusOK {
		return nil, c.redactError(statusError(op, resp.StatusCode, raw))
	}
	if len(raw) > maxResponseBytes {
		return nil, &Error{Op: op, Code: codes.ResourceExhausted, Message: fmt.Sprintf("answer larger than %d bytes", maxResponseBytes)}
	}
	if !json.Valid(raw) {
		return nil, badAnswer(op, errors.New("not JSON"), raw)
	}
	return raw, nil
}

// send starts a request; the caller closes the body. A non-nil error is an *Error.
func (c *Client) send(ctx context.Context, op, method, path string, body []byte) (*http.Response, error) {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, &Error{Op: op, Code: codes.Internal, Message: "building the request: " + err.Error()}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := llmhttp.Do(c.hc, req)
	if err != nil {
		return nil, c.transportError(ctx, op, err)
	}
	return resp, nil
}

// errTimeout is the cause of a context that ran out of Timeout.
type errTimeout struct{ d time.Duration }

func (e errTimeout) Error() string { return fmt.Sprintf("timed out after %v", e.d) }
func (e errTimeout) Unwrap() error { return context.DeadlineExceeded }

// errIdle is the cause of a request cancelled for silence.
type errIdle struct{ d time.Duration }

func (e errIdle) Error() string { return fmt.Sprintf("no answer for %v", e.d) }
func (e errIdle) Unwrap() error { return context.DeadlineExceeded }

// transportError classifies a failure to get (all of) an answer.
func (c *Client) transportError(ctx context.Context, op string, err error) *Error {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		var te errTimeout
		var ie errIdle
		switch {
		case errors.As(cause, &ie):
			return &Error{Op: op, Code: codes.DeadlineExceeded, Message: ie.Error(), sentinel: context.DeadlineExceeded}
		case errors.As(cause, &te):
			return &Error{Op: op, Code: codes.DeadlineExceeded, Message: te.Error(), sentinel: context.DeadlineExceeded}
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return &Error{Op: op, Code: codes.DeadlineExceeded, Message: "deadline exceeded", sentinel: context.DeadlineExceeded}
		}
		return &Error{Op: op, Code: codes.Canceled, Message: "canceled", sentinel: context.Canceled}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // drop the method and URL: the error names the server already
	}
	return c.redactError(&Error{Op: op, Code: codes.Unavailable, Message: "unreachable: " + err.Error(), err: err})
}

// badAnswer is Unavailable: an answer we cannot read is a bad gateway, which gRPC's HTTP mapping
// (502 → UNAVAILABLE) and our REST front (503) both tell the caller to retry or fix the backend.
func badAnswer(op string, err error, raw []byte) *Error {
	return &Error{Op: op, Code: codes.Unavailable, Message: fmt.Sprintf("unreadable answer (%v): %s", err, llmhttp.Snippet(raw)), err: err, sentinel: llmhttp.ErrUnreadable}
}

// redactError makes sure no error text carries the API key (a server or proxy may echo it).
func (c *Client) redactError(e *Error) *Error {
	if c.cfg.APIKey != "" {
		e.Message = strings.ReplaceAll(e.Message, c.cfg.APIKey, "[redacted]")
		if e.err != nil && strings.Contains(e.err.Error(), c.cfg.APIKey) {
			e.err = errors.New(strings.ReplaceAll(e.err.Error(), c.cfg.APIKey, "[redacted]"))
		}
	}
	return e
}
