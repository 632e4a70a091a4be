package llama

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/llamatest"

	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/services/inference/llmhttp"
)

// These tests run the client against llamatest.Double; real_test.go runs it against a real
// llama-server.

const testKey = "sk-llama-3c9e1f0a7d5b"

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// countingTransport counts requests per path.
type countingTransport struct {
	mu sync.Mutex
	n  map[string]int
	rt http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Path]++
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

func (c *countingTransport) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

// newClient builds a client of url whose WaitReady backoff is 1 ms; logs (debug) go to the
// returned buffer.
func newClient(t *testing.T, url string, cfg Config) (*Client, *syncBuffer) {
	t.Helper()
	cfg.URL = url
	logs := &syncBuffer{}
	c, err := New(cfg, nil, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.backoff = func(int) time.Duration { return time.Millisecond }
	t.Cleanup(func() { c.Close() })
	return c, logs
}

// wantCode fails unless err is an *Error with code (also as seen by grpc's status package).
func wantCode(t *testing.T, err error, code codes.Code) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want *llama.Error with code %v", err, err, code)
	}
	if e.Code != code || status.Code(err) != code || llmhttp.Code(err) != code {
		t.Fatalf("code = %v (status.Code %v), want %v; err: %v", e.Code, status.Code(err), code, err)
	}
	return e
}

func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "URL: required"},
		{Config{URL: "ftp://x"}, "not http or https"},
		{Config{URL: "http://"}, "has no host"},
		{Config{URL: "http://x", Timeout: -1}, "Timeout"},
		{Config{URL: "http://x", APIKey: "a\nb"}, "line break"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	if err := (Config{URL: "http://127.0.0.1:8080"}).Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestHealth(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{APIKey: testKey})
	c, _ := newClient(t, d.URL, Config{}) // no key: /health is public
	ctx := t.Context()
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}

	for _, old := range []bool{false, true} {
		d.Loading(1, old)
		err := c.Health(ctx)
		wantCode(t, err, codes.Unavailable)
		if !errors.Is(err, llmhttp.ErrNotReady) {
			t.Errorf("old=%v: Health while loading = %v, want ErrNotReady", old, err)
		}
	}
	d.Loading(1, false)
	if err := c.Health(ctx); !strings.Contains(err.Error(), `"Loading model"`) {
		t.Errorf("err = %v, want the server's message quoted", err)
	}

	d.Loading(5, false)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady after 5 loading answers: %v", err)
	}

	down, _ := newClient(t, closedURL(t), Config{ReadyTimeout: 100 * time.Millisecond})
	err := down.Health(ctx)
	wantCode(t, err, codes.Unavailable)
	if errors.Is(err, llmhttp.ErrNotReady) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("Health of a closed port = %v, want unreachable (not llmhttp.ErrNotReady)", err)
	}
	start := time.Now()
	err = down.WaitReady(ctx)
	wantCode(t, err, codes.DeadlineExceeded)
	if !strings.Contains(err.Error(), "unreachable") || time.Since(start) > 5*time.Second {
		t.Errorf("WaitReady = %v after %v, want a deadline naming the last failure", err, time.Since(start))
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	wantCode(t, down.WaitReady(cctx), codes.Canceled)

	// A wrong key is not waited out.
	d.Hang(0)
	wrong, _ := newClient(t, d.URL, Config{APIKey: "wrong"})
	if _, err := wrong.Props(ctx); err == nil {
		t.Fatal("Props with a wrong key: no error")
	} else {
		e := wantCode(t, err, codes.Unauthenticated)
		if e.HTTPStatus != 401 || e.Message != "Invalid API Key" || e.Type != "authentication_error" {
			t.Errorf("got %+v, want 401 authentication_error \"Invalid API Key\"", e)
		}
	}
}

func TestProps(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: 8192, Parallel: 4})
	c, _ := newClient(t, d.URL, Config{})
	p, err := c.Props(t.Context())
	if err != nil {
		t.Fatalf("Props: %v", err)
	}
	if p.NCtx != 2048 || p.TotalSlots != 4 || p.BOSToken != "<s>" || p.ModelPath == "" {
		t.Errorf("Props = %+v, want n_ctx 2048 (8192/4), 4 slots", p)
	}
	d.Garbage(1)
	_, err = c.Props(t.Context())
	if e := wantCode(t, err, codes.Unavailable); !strings.Contains(e.Message, "unreadable answer") {
		t.Errorf("garbage: %v", err)
	}
}

func TestTokenizeAndCountTokens(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	ct := &countingTransport{n: map[string]int{}, rt: http.DefaultTransport.(*http.Transport).Clone()}
	hc := &http.Client{Transport: ct}
	defer hc.CloseIdleConnections()
	c, err := New(Config{URL: d.URL, TokenCacheSize: 2}, hc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	got, err := c.Tokenize(ctx, "Hello wörld")
	if err != nil {
		t.Fatalf("Tokenize: %v", err)
	}
	// As the real server answers for the tiny model (see real_test.go).
	want := []int{259, 299, 328, 335, 335, 338, 259, 346, 198, 185, 341, 335, 327}
	if !slices.Equal(got, want) {
		t.Errorf("Tokenize = %v, want %v", got, want)
	}
	for range 3 {
		n, err := c.CountTokens(ctx, "Hello wörld")
		if err != nil || n != len(want) {
			t.Fatalf("CountTokens = %d, %v; want %d", n, err, len(want))
		}
	}
	if got := ct.count("/tokenize"); got != 2 {
		t.Errorf("/tokenize requests = %d, want 2 (one Tokenize, one CountTokens, then cached)", got)
	}
	for _, s := range []string{"a", "b", "c"} {
		if _, err := c.CountTokens(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.tokens.len(); n != 2 {
		t.Errorf("cache holds %d, want its bound 2", n)
	}
	if _, err := c.CountTokens(ctx, "Hello wörld"); err != nil || ct.count("/tokenize") != 6 {
		t.Errorf("the least recently used text was not evicted (requests %d)", ct.count("/tokenize"))
	}
}

// TestTokenizePieces: each token comes with the bytes it stands for, so a text cut after N
// pieces is its first N tokens (the tiny model's tokenizer puts a space in front of the text).
func TestTokenizePieces(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	c, _ := newClient(t, d.URL, Config{})
	for _, text := range []string{"Hello wörld", "🙂 ok", "two  spaces", ""} {
		toks, err := c.TokenizePieces(t.Context(), text)
		if err != nil {
			t.Fatalf("TokenizePieces(%q): %v", text, err)
		}
		ids, err := c.Tokenize(t.Context(), text)
		if err != nil {
			t.Fatal(err)
		}
		var joined []byte
		for i, tok := range toks {
			if i >= len(ids) || tok.ID != ids[i] {
				t.Errorf("%q: token %d is %d; Tokenize says %v", text, i, tok.ID, ids)
			}
			joined = append(joined, tok.Piece...)
		}
		want := " " + text
		if text == "" {
			want = ""
		}
		if len(toks) != len(ids) || string(joined) != want {
			t.Errorf("%q: %d tokens, pieces join to %q; want %d tokens joining to %q", text, len(toks), joined, len(ids), want)
		}
	}
}

func TestComplete(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	const prompt = "### Instruction: <<question>> weather in Paris?\n### Response: "
	d.Script(prompt, llamatest.Reply{Pieces: []string{"<<function>>", "get_weather", "(city='Paris')"}})
	c, logs := newClient(t, d.URL, Config{Sampling: Sampling{Temperature: new(0.0), Seed: new(int64(42))}})
	ctx := t.Context()
	req := CompletionRequest{
		Prompt: prompt, Grammar: `root ::= "<<function>>" [a-z_]+ "(" [^)]* ")"`, Stop: []string{"\n\n"},
		CachePrompt: new(true), Extra: map[string]any{"n_probs": 0, "prompt": "overridden"},
	}
	got, err := c.Complete(ctx, req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if got.Content != "<<function>>get_weather(city='Paris')" || got.StopType != StopEOS || got.TokensPredicted == 0 ||
		got.TokensEvaluated != len(llamatest.Tokenize(prompt, true, true)) || got.Timings.PredictedN == 0 {
		t.Errorf("Complete = %+v", got)
	}
	r := d.Requests()[0]
	if r.Prompt != prompt || r.Stream || r.NPredict != DefaultNPredict || r.Grammar != req.Grammar ||
		!slices.Equal(r.Stop, req.Stop) || r.CachePrompt == nil || !*r.CachePrompt ||
		r.Temperature == nil || *r.Temperature != 0 || r.Seed == nil || *r.Seed != 42 || r.Body["n_probs"] == nil {
		t.Errorf("request sent = %+v", r)
	}

	// Per-request settings win over the config's; negative n_predict is -1.
	if _, err := c.Complete(ctx, CompletionRequest{Prompt: prompt, NPredict: -5, Sampling: Sampling{Temperature: new(0.7)}}); err != nil {
		t.Fatal(err)
	}
	if r := d.Requests()[1]; r.NPredict != -1 || *r.Temperature != 0.7 {
		t.Errorf("request sent = %+v, want n_predict -1, temperature 0.7", r)
	}
	if strings.Contains(logs.String(), prompt) {
		t.Errorf("the prompt was logged:\n%s", logs)
	}
}

func TestCompleteStream(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	c, _ := newClient(t, d.URL, Config{})
	ctx := t.Context()
	for _, tc := range []struct {
		name        string
		pieces      []string
		stop        []string
		nPredict    int
		wantChunks  []string
		wantContent string
		wantStop    string
	}{
		{name: "plain", pieces: []string{"Hel", "lo", " world"},
			wantChunks: []string{"Hel", "lo", " world"}, wantContent: "Hello world", wantStop: StopEOS},
		{name: "characters split across events", pieces: []string{"caf", "\xc3", "\xa9 ok ", "\xf0\x9f", "\x99", "\x82", "!"},
			wantChunks: []string{"caf", "é ok ", "🙂", "!"}, wantContent: "café ok 🙂!", wantStop: StopEOS},
		{name: "unfinished character at the end", pieces: []string{"a", "\xe2\x82"},
			wantChunks: []string{"a", "\uFFFD"}, wantContent: "a\uFFFD", wantStop: StopEOS},
		{name: "bytes that never form a character", pieces: []string{"x\xa5y"},
			wantChunks: []string{"x\uFFFDy"}, wantContent: "x\uFFFDy", wantStop: StopEOS},
		{name: "JSON escapes", pieces: []string{"line\n", "\"q\" \\ \t\u00e9"},
			wantChunks: []string{"line\n", "\"q\" \\ \t\u00e9"}, wantContent: "line\n\"q\" \\ \té", wantStop: StopEOS},
		{name: "stop string", pieces: []string{"abc", "STOP", "def"}, stop: []string{"STOP"},
			wantChunks: []string{"abc"}, wantContent: "abc", wantStop: StopWord},
		{name: "n_predict", pieces: []string{"a", "b", "c", "d"}, nPredict: 2,
			wantChunks: []string{"a", "b"}, wantContent: "ab", wantStop: StopLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompt := "prompt " + tc.name
			d.Script(prompt, llamatest.Reply{Pieces: tc.pieces})
			var chunks []string
			got, err := c.CompleteStream(ctx, CompletionRequest{Prompt: prompt, Stop: tc.stop, NPredict: tc.nPredict}, func(ch Chunk) error {
				if !utf8.ValidString(ch.Text) || ch.Text == "" {
					t.Errorf("chunk %q: empty or not valid UTF-8", ch.Text)
				}
				chunks = append(chunks, ch.Text)
				return nil
			})
			if err != nil {
				t.Fatalf("CompleteStream: %v", err)
			}
			if !slices.Equal(chunks, tc.wantChunks) || got.Content != tc.wantContent || got.StopType != tc.wantStop {
				t.Errorf("chunks %q, content %q, stop %q; want %q, %q, %q", chunks, got.Content, got.StopType,
					tc.wantChunks, tc.wantContent, tc.wantStop)
			}
			if tc.wantStop == StopWord && got.StoppingWord != "STOP" {
				t.Errorf("stopping word %q", got.StoppingWord)
			}
			// The same reply without streaming has the same content.
			plain, err := c.Complete(ctx, CompletionRequest{Prompt: prompt, Stop: tc.stop, NPredict: tc.nPredict})
			if err != nil || plain.Content != tc.wantContent || plain.StopType != tc.wantStop {
				t.Errorf("Complete = %+v, %v; want content %q", plain, err, tc.wantContent)
			}
		})
	}
}

func TestStreamErrors(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	c, _ := newClient(t, d.URL, Config{})
	ctx := t.Context()
	for _, framing := range []llamatest.Framing{llamatest.FramingData, llamatest.FramingErrorField} {
		for _, tc := range []struct {
			fail llamatest.APIError
			code codes.Code
		}{
			{llamatest.APIError{Code: 500, Message: "decode failed", Type: "server_error"}, codes.Internal},
			{llamatest.APIError{Code: 400, Message: "the request exceeds the available context size, try increasing it", Type: "exceed_context_size_error"}, codes.ResourceExhausted},
			{llamatest.APIError{Code: 503, Message: "slot unavailable", Type: "unavailable_error"}, codes.Unavailable},
		} {
			prompt := "fail " + tc.fail.Type
			d.Script(prompt, llamatest.Reply{Pieces: []string{"partial", "never"}, Fail: &tc.fail, FailAfter: 1, Framing: framing})
			var chunks []string
			_, err := c.CompleteStream(ctx, CompletionRequest{Prompt: prompt}, func(ch Chunk) error {
				chunks = append(chunks, ch.Text)
				return nil
			})
			e := wantCode(t, err, tc.code)
			if !e.Streamed || e.Message != tc.fail.Message || e.Type != tc.fail.Type || !strings.Contains(err.Error(), `"`+tc.fail.Message+`"`) {
				t.Errorf("framing %d: err = %+v (%v)", framing, e, err)
			}
			if !slices.Equal(chunks, []string{"partial"}) {
				t.Errorf("framing %d: chunks before the error = %q", framing, chunks)
			}
			if tc.code == codes.ResourceExhausted && !errors.Is(err, llmhttp.ErrContextExceeded) {
				t.Errorf("err = %v, want ErrContextExceeded", err)
			}
		}
	}

	d.Garbage(1)
	d.SetDefault(llamatest.Reply{Pieces: []string{"x"}})
	_, err := c.CompleteStream(ctx, CompletionRequest{Prompt: "any"}, func(Chunk) error { return nil })
	if e := wantCode(t, err, codes.Unavailable); !strings.Contains(e.Message, "unreadable answer") {
		t.Errorf("garbage event: %v", err)
	}
}

func TestStatusErrors(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{APIKey: testKey, CtxSize: 64})
	c, logs := newClient(t, d.URL, Config{APIKey: testKey})
	d.Script("echo", llamatest.Reply{Status: 500, Body: `{"error":{"code":500,"message":"bad key ` + testKey + `","type":"server_error"}}`})
	d.Script("busy", llamatest.Reply{Status: 503, Fail: &llamatest.APIError{Code: 503, Message: "no slot", Type: "unavailable_error"}})
	d.Script("proxy", llamatest.Reply{Status: 502, Body: "<html>bad gateway</html>"})
	d.Script("timeout", llamatest.Reply{Status: 504, Body: "gateway timeout"})
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		req     CompletionRequest
		code    codes.Code
		message string
		is      error
	}{
		{"malformed grammar", CompletionRequest{Prompt: "x", Grammar: `root ::= "yes`}, codes.InvalidArgument,
			"Failed to initialize samplers: failed to parse grammar", nil},
		{"prompt over the context", CompletionRequest{Prompt: strings.Repeat("ab ", 40)}, codes.ResourceExhausted,
			"request (122 tokens) exceeds the available context size (64 tokens), try increasing it", llmhttp.ErrContextExceeded},
		{"server error quoting the key", CompletionRequest{Prompt: "echo"}, codes.Internal, "bad key [redacted]", nil},
		{"no slot", CompletionRequest{Prompt: "busy"}, codes.Unavailable, "no slot", nil},
		{"bad gateway", CompletionRequest{Prompt: "proxy"}, codes.Unavailable, "<html>bad gateway</html>", nil},
		{"gateway timeout", CompletionRequest{Prompt: "timeout"}, codes.DeadlineExceeded, "gateway timeout", nil},
	} {
		for _, stream := range []bool{false, true} {
			var err error
			if stream {
				_, err = c.CompleteStream(ctx, tc.req, func(Chunk) error { return nil })
			} else {
				_, err = c.Complete(ctx, tc.req)
			}
			e := wantCode(t, err, tc.code)
			if e.Message != tc.message || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("%s (stream %v): err = %v, want message %q", tc.name, stream, err, tc.message)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Errorf("%s: the API key is in the error: %v", tc.name, err)
			}
			if tc.is == llmhttp.ErrContextExceeded && (e.PromptTokens != 122 || e.ContextSize != 64) {
				t.Errorf("PromptTokens %d ContextSize %d, want 122 and 64", e.PromptTokens, e.ContextSize)
			}
			if tooLong := errreason.Of(err) == errreason.ContextTooLong; tooLong != (tc.is == llmhttp.ErrContextExceeded) {
				t.Errorf("%s (stream %v): reason %q; want %s only for a prompt over the context", tc.name, stream, errreason.Of(err), errreason.ContextTooLong)
			}
		}
	}
	if strings.Contains(logs.String(), testKey) {
		t.Errorf("the API key is in the logs:\n%s", logs)
	}

	nf, _ := newClient(t, d.URL+"/not-llama", Config{APIKey: testKey})
	wantCode(t, nf.Health(ctx), codes.Unimplemented)
}

func TestTimeoutsAndCancellation(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	ctx := t.Context()

	t.Run("request timeout", func(t *testing.T) {
		c, _ := newClient(t, d.URL, Config{Timeout: 150 * time.Millisecond})
		for _, call := range []func() error{
			func() error { _, err := c.Props(ctx); return err },
			func() error { _, err := c.Tokenize(ctx, "x"); return err },
			func() error { _, err := c.Complete(ctx, CompletionRequest{Prompt: "x"}); return err },
			func() error {
				_, err := c.CompleteStream(ctx, CompletionRequest{Prompt: "x"}, func(Chunk) error { return nil })
				return err
			},
		} {
			d.Hang(1)
			start := time.Now()
			err := call()
			e := wantCode(t, err, codes.DeadlineExceeded)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(e.Message, "timed out after 150ms") {
				t.Errorf("err = %v", err)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Errorf("took %v", el)
			}
		}
		d.Hang(1)
		hc, _ := newClient(t, d.URL, Config{HealthTimeout: 100 * time.Millisecond})
		wantCode(t, hc.Health(ctx), codes.DeadlineExceeded)
	})

	t.Run("stream stalls", func(t *testing.T) {
		c, _ := newClient(t, d.URL, Config{IdleTimeout: 200 * time.Millisecond})
		d.Script("stall", llamatest.Reply{Pieces: []string{"a", "b"}, Hang: true, HangAfter: 1})
		var got []string
		_, err := c.CompleteStream(ctx, CompletionRequest{Prompt: "stall"}, func(ch Chunk) error {
			got = append(got, ch.Text)
			return nil
		})
		if e := wantCode(t, err, codes.DeadlineExceeded); !strings.Contains(e.Message, "no answer for 200ms") {
			t.Errorf("err = %v", err)
		}
		if !slices.Equal(got, []string{"a"}) {
			t.Errorf("chunks = %q", got)
		}
		// Slow but steady streams are not cut.
		d.Script("slow", llamatest.Reply{Pieces: []string{"a", "b", "c", "d"}, Delay: 100 * time.Millisecond})
		if out, err := c.CompleteStream(ctx, CompletionRequest{Prompt: "slow"}, func(Chunk) error { return nil }); err != nil || out.Content != "abcd" {
			t.Errorf("slow stream: %+v, %v", out, err)
		}
	})

	t.Run("cancel mid-stream", func(t *testing.T) {
		c, _ := newClient(t, d.URL, Config{})
		d.Script("long", llamatest.Reply{Pieces: slices.Repeat([]string{"x"}, 1000), Delay: 5 * time.Millisecond})
		before := d.Canceled()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var n atomic.Int32
		_, err := c.CompleteStream(cctx, CompletionRequest{Prompt: "long"}, func(Chunk) error {
			if n.Add(1) == 3 {
				cancel()
			}
			return nil
		})
		wantCode(t, err, codes.Canceled)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		eventually.True(t, 5*time.Second, "the double to see the client go", func() bool { return d.Canceled() > before && d.Processing() == 0 })
	})

	t.Run("callback error stops the stream", func(t *testing.T) {
		c, _ := newClient(t, d.URL, Config{})
		before := d.Canceled()
		stop := errors.New("enough")
		_, err := c.CompleteStream(ctx, CompletionRequest{Prompt: "long"}, func(Chunk) error { return stop })
		if err != stop {
			t.Errorf("err = %v, want the callback's error as is", err)
		}
		eventually.True(t, 5*time.Second, "the double to see the client go", func() bool { return d.Canceled() > before })
	})

	t.Run("caller deadline", func(t *testing.T) {
		c, _ := newClient(t, d.URL, Config{})
		dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := c.CompleteStream(dctx, CompletionRequest{Prompt: "long"}, func(Chunk) error { return nil })
		wantCode(t, err, codes.DeadlineExceeded)
	})

	t.Run("unreachable", func(t *testing.T) {
		c, _ := newClient(t, closedURL(t), Config{})
		_, err := c.CompleteStream(ctx, CompletionRequest{Prompt: "x"}, func(Chunk) error { return nil })
		wantCode(t, err, codes.Unavailable)
	})
}

func TestUnquoteRaw(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"plain"`, "plain"},
		{`"a\"b\\c\/d\n\t\r\b\f"`, "a\"b\\c/d\n\t\r\b\f"},
		{`"\u00e9\ud83d\ude42"`, "é🙂"},
		{`"\ud83d"`, "\uFFFD"},
		{`"\ud83dx"`, "\uFFFDx"},
		{"\"raw \xc3\"", "raw \xc3"},
		{`null`, ""},
	} {
		got, err := unquoteRaw([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("unquoteRaw(%s) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`5`, `"\x"`, `"\u12"`, `"a\"`} {
		if _, err := unquoteRaw([]byte(bad)); err == nil {
			t.Errorf("unquoteRaw(%s): no error", bad)
		}
	}
}

func TestUTF8Acc(t *testing.T) {
	var a utf8Acc
	var got []string
	for _, p := range []string{"\xf0", "\x9f\x99", "\x82a\xe2", "\x82\xac", "\xff", "\xc3"} {
		got = append(got, a.push([]byte(p)))
	}
	got = append(got, a.flush())
	want := []string{"", "", "🙂a", "€", "\uFFFD", "", "\uFFFD"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestStreamReusesConnection: a streamed completion read to its last event leaves the
// connection for the next request rather than closing it with bytes unread.
func TestStreamReusesConnection(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	d.SetDefault(llamatest.Reply{Pieces: []string{"Hel", "lo"}})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c, err := New(Config{URL: d.URL}, &http.Client{Transport: tr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var reused []bool
	for range 3 {
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) },
		})
		if _, err := c.CompleteStream(ctx, CompletionRequest{Prompt: "hi"}, func(Chunk) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if len(reused) != 3 || !reused[1] || !reused[2] {
		t.Errorf("connections reused per request = %v, want the 2nd and 3rd reused", reused)
	}
}
