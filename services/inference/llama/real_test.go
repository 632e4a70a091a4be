package llama

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/internal/llamatest"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/services/inference/llmhttp"
)

// TestRealServer runs the client against a real llama-server (TOOLMESH_LLAMA_SERVER, from
// ./scripts/llamaserver) serving the tiny random model: its text is noise, but health, props,
// tokenization, streaming, grammars and error bodies are the server's own.
func TestRealServer(t *testing.T) {
	start := time.Now()
	srv := llamatest.StartServer(t, llamatest.ServerOptions{})
	t.Logf("llama-server ready in %v at %s", srv.Started, srv.URL)
	c, _ := newClient(t, srv.URL, Config{Timeout: 20 * time.Second, Sampling: Sampling{Seed: new(int64(7))}})
	ctx := t.Context()

	t.Run("health and props", func(t *testing.T) {
		if err := c.WaitReady(ctx); err != nil {
			t.Fatalf("WaitReady: %v", err)
		}
		if err := c.Health(ctx); err != nil {
			t.Fatalf("Health: %v", err)
		}
		p, err := c.Props(ctx)
		if err != nil {
			t.Fatalf("Props: %v", err)
		}
		if p.NCtx != 4096 || p.TotalSlots != 1 || p.BOSToken != "<s>" || p.EOSToken != "</s>" || p.BuildInfo == "" {
			t.Errorf("Props = %+v, want per-slot n_ctx 4096 (-c 4096 -np 1), 1 slot", p)
		}
		t.Logf("build %s, model %s", p.BuildInfo, p.ModelPath)
	})

	t.Run("tokenize matches the double", func(t *testing.T) {
		for _, text := range []string{"Hello wörld 🙂", "  two  spaces", "tab\there\nnl", "", "<s>abc</s>d",
			`<<function>>get_weather(city="Paris", days=3)`} {
			got, err := c.Tokenize(ctx, text)
			if err != nil {
				t.Fatalf("Tokenize(%q): %v", text, err)
			}
			if want := llamatest.Tokenize(text, false, true); !slices.Equal(got, want) {
				t.Errorf("Tokenize(%q) = %v; the double says %v", text, got, want)
			}
			if n, err := c.CountTokens(ctx, text); err != nil || n != len(got) {
				t.Errorf("CountTokens(%q) = %d, %v; want %d", text, n, err, len(got))
			}
			toks, err := c.TokenizePieces(ctx, text)
			if err != nil {
				t.Fatalf("TokenizePieces(%q): %v", text, err)
			}
			for i, tok := range toks {
				if i >= len(got) || tok.ID != got[i] || !bytes.Equal(tok.Piece, llamatest.Piece(tok.ID)) {
					t.Errorf("TokenizePieces(%q)[%d] = %d %q; want %v with the double's pieces", text, i, tok.ID, tok.Piece, got)
				}
			}
		}
	})

	t.Run("plain and streamed completion agree", func(t *testing.T) {
		req := CompletionRequest{Prompt: "The weather in Paris is", NPredict: 24,
			Sampling: Sampling{Temperature: new(0.0)}, CachePrompt: new(false)}
		plain, err := c.Complete(ctx, req)
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if plain.TokensPredicted == 0 || plain.TokensPredicted > 24 || plain.Timings.PredictedN != plain.TokensPredicted ||
			plain.TokensEvaluated != 1+len(llamatest.Tokenize(req.Prompt, false, true)) ||
			(plain.StopType != StopLimit && plain.StopType != StopEOS) || !utf8.ValidString(plain.Content) {
			t.Errorf("Complete = %+v", plain)
		}
		var chunks []string
		streamed, err := c.CompleteStream(ctx, req, func(ch Chunk) error {
			chunks = append(chunks, ch.Text)
			return nil
		})
		if err != nil {
			t.Fatalf("CompleteStream: %v", err)
		}
		if strings.Join(chunks, "") != streamed.Content || streamed.Content != plain.Content ||
			streamed.StopType != plain.StopType || streamed.TokensPredicted != plain.TokensPredicted {
			t.Errorf("streamed %q (%s, %d tokens) in %d chunks; plain %q (%s, %d tokens)", streamed.Content,
				streamed.StopType, streamed.TokensPredicted, len(chunks), plain.Content, plain.StopType, plain.TokensPredicted)
		}
	})

	t.Run("multi-byte characters through byte tokens", func(t *testing.T) {
		// The tiny vocabulary has no token for é or 🙂, so the grammar forces them out one byte
		// token at a time.
		const want = "é🙂x"
		var chunks []string
		got, err := c.CompleteStream(ctx, CompletionRequest{Prompt: "Say it", NPredict: 16, Grammar: `root ::= "é🙂x"`},
			func(ch Chunk) error {
				if !utf8.ValidString(ch.Text) {
					t.Errorf("chunk %q is not valid UTF-8", ch.Text)
				}
				chunks = append(chunks, ch.Text)
				return nil
			})
		if err != nil {
			t.Fatalf("CompleteStream: %v", err)
		}
		if got.Content != want || got.StopType != StopEOS || got.TokensPredicted != 8 {
			t.Errorf("content %q, stop %s, %d tokens; want %q, eos, 8 (7 byte tokens + EOS)", got.Content, got.StopType, got.TokensPredicted, want)
		}
		t.Logf("chunks: %q (the server holds an unfinished character back)", chunks)
	})

	t.Run("grammar constrains the output", func(t *testing.T) {
		seen := map[string]bool{}
		for seed := range int64(6) {
			got, err := c.Complete(ctx, CompletionRequest{Prompt: "Is it raining?", NPredict: 8,
				Grammar: `root ::= "yes" | "no"`, Sampling: Sampling{Temperature: new(1.5), Seed: new(seed)}})
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if got.Content != "yes" && got.Content != "no" {
				t.Errorf("seed %d: content %q, want yes or no", seed, got.Content)
			}
			seen[got.Content] = true
		}
		t.Logf("answers seen: %v", seen)
		// A stop string cuts the grammar's output; the stop string is not part of it.
		got, err := c.Complete(ctx, CompletionRequest{Prompt: "x", NPredict: 16, Grammar: `root ::= "abc" "xyz"`, Stop: []string{"xy"}})
		if err != nil || got.Content != "abc" || got.StopType != StopWord || got.StoppingWord != "xy" {
			t.Errorf("stop string: %+v, %v", got, err)
		}
	})

	t.Run("malformed grammar is InvalidArgument", func(t *testing.T) {
		for _, stream := range []bool{false, true} {
			req := CompletionRequest{Prompt: "x", NPredict: 4, Grammar: `root ::= "yes`}
			var err error
			if stream {
				_, err = c.CompleteStream(ctx, req, func(Chunk) error { return nil })
			} else {
				_, err = c.Complete(ctx, req)
			}
			e := wantCode(t, err, codes.InvalidArgument)
			if e.HTTPStatus != 400 || e.Type != "invalid_request_error" || !strings.Contains(e.Message, "failed to parse grammar") {
				t.Errorf("stream %v: %+v", stream, e)
			}
		}
	})

	t.Run("prompt over the context is ResourceExhausted", func(t *testing.T) {
		prompt := strings.Repeat("ab ", 1500) // BOS, a leading space, then 3 tokens a time: 4502
		for _, stream := range []bool{false, true} {
			req := CompletionRequest{Prompt: prompt, NPredict: 4}
			var err error
			if stream {
				_, err = c.CompleteStream(ctx, req, func(Chunk) error { return nil })
			} else {
				_, err = c.Complete(ctx, req)
			}
			e := wantCode(t, err, codes.ResourceExhausted)
			if !errors.Is(err, llmhttp.ErrContextExceeded) || e.Type != "exceed_context_size_error" ||
				e.PromptTokens != 4502 || len(llamatest.Tokenize(prompt, true, true)) != 4502 || e.ContextSize != 4096 || !strings.Contains(e.Message, "exceeds the available context size") {
				t.Errorf("stream %v: %+v", stream, e)
			}
		}
		// A prompt that fits, with n_predict past the context: output stops at the end of
		// the context, marked truncated.
		got, err := c.Complete(ctx, CompletionRequest{Prompt: strings.Repeat("ab ", 1360), NPredict: 100,
			IgnoreEOS: true, Sampling: Sampling{Temperature: new(0.0)}})
		if err != nil || !got.Truncated || got.StopType != StopLimit || got.TokensEvaluated+got.TokensPredicted > 4096 {
			t.Errorf("near the context: %+v, %v", got, err)
		}
	})

	t.Run("cancel mid-stream stops the generation", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		n := 0
		began := time.Now()
		_, err := c.CompleteStream(cctx, CompletionRequest{Prompt: "count", NPredict: 3000, IgnoreEOS: true,
			Grammar: `root ::= [a-z]+`}, func(Chunk) error {
			if n++; n == 3 {
				cancel()
			}
			return nil
		})
		wantCode(t, err, codes.Canceled)
		if n != 3 {
			t.Errorf("%d chunks after cancelling at the third", n)
		}
		// The slot frees at once: a new request is served without waiting out the 3000 tokens.
		eventually.True(t, 5*time.Second, "the slot to be idle", func() bool { return slotIdle(t, srv.URL) })
		if _, err := c.Complete(ctx, CompletionRequest{Prompt: "next", NPredict: 2}); err != nil {
			t.Fatalf("Complete after cancel: %v", err)
		}
		t.Logf("cancelled and served again in %v", time.Since(began))
	})

	t.Run("timeout mid-stream", func(t *testing.T) {
		short, _ := newClient(t, srv.URL, Config{Timeout: 300 * time.Millisecond})
		_, err := short.CompleteStream(ctx, CompletionRequest{Prompt: "count", NPredict: 100000, IgnoreEOS: true,
			Grammar: `root ::= [a-z]+`, Sampling: Sampling{Temperature: new(1.0)}}, func(Chunk) error {
			time.Sleep(10 * time.Millisecond) // a slow reader: 4096 tokens would take 40 s
			return nil
		})
		wantCode(t, err, codes.DeadlineExceeded)
		eventually.True(t, 5*time.Second, "the slot to be idle", func() bool { return slotIdle(t, srv.URL) })
	})

	t.Run("api key", func(t *testing.T) {
		keyed := llamatest.StartServer(t, llamatest.ServerOptions{APIKey: testKey})
		good, _ := newClient(t, keyed.URL, Config{APIKey: testKey})
		bad, logs := newClient(t, keyed.URL, Config{APIKey: "sk-wrong-key"})
		if err := bad.Health(ctx); err != nil {
			t.Errorf("Health without the right key: %v (/health is public)", err)
		}
		if _, err := good.Tokenize(ctx, "hi"); err != nil {
			t.Errorf("Tokenize with the key: %v", err)
		}
		for _, call := range []func() error{
			func() error { _, err := bad.Props(ctx); return err },
			func() error { _, err := bad.Complete(ctx, CompletionRequest{Prompt: "x", NPredict: 1}); return err },
			func() error {
				_, err := bad.CompleteStream(ctx, CompletionRequest{Prompt: "x", NPredict: 1}, func(Chunk) error { return nil })
				return err
			},
		} {
			err := call()
			e := wantCode(t, err, codes.Unauthenticated)
			if e.HTTPStatus != 401 || e.Message != "Invalid API Key" || strings.Contains(err.Error(), "sk-wrong-key") {
				t.Errorf("err = %v", err)
			}
		}
		if strings.Contains(logs.String(), "sk-wrong-key") {
			t.Errorf("the key is in the logs")
		}
	})

	t.Run("not running", func(t *testing.T) {
		down, _ := newClient(t, closedURL(t), Config{ReadyTimeout: 200 * time.Millisecond})
		wantCode(t, down.Health(ctx), codes.Unavailable)
		wantCode(t, down.WaitReady(ctx), codes.DeadlineExceeded)
	})
	t.Logf("real-server tests took %v", time.Since(start))
}

// TestRealServerLoading watches a real llama-server load a model big enough (about 40 MB)
// for the load to be seen: refused connections, then 503 "Loading model", then ready.
func TestRealServerLoading(t *testing.T) {
	srv := llamatest.StartServer(t, llamatest.ServerOptions{NoWait: true,
		Model: llamatest.TinyModel{Embedding: 512, Blocks: 4, FeedForward: 1024}})
	c, _ := newClient(t, srv.URL, Config{HealthTimeout: time.Second})
	ctx := t.Context()
	seen := map[string]int{}
	start := time.Now()
	for {
		err := c.Health(ctx)
		switch {
		case err == nil:
		case errors.Is(err, llmhttp.ErrNotReady):
			seen["loading"]++
			if e := wantCode(t, err, codes.Unavailable); e.HTTPStatus != 503 || e.Message != "Loading model" || e.Type != "unavailable_error" {
				t.Errorf("loading: %+v", e)
			}
		case llmhttp.Code(err) == codes.Unavailable:
			seen["unreachable"]++
		default:
			t.Fatalf("Health while starting: %v", err)
		}
		if err == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("not ready after 20 s (seen %v)", seen)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("ready after %v; probes before: %v", time.Since(start), seen)
	if seen["loading"] == 0 {
		t.Errorf("never saw 503 Loading model (probes: %v)", seen)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Errorf("WaitReady when ready: %v", err)
	}
}

// slotIdle reads /slots (enabled by default) and reports whether no slot is processing.
func slotIdle(t *testing.T, url string) bool {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := hc.Get(url + "/slots")
	if err != nil {
		t.Fatalf("/slots: %v", err)
	}
	defer resp.Body.Close()
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&slots); err != nil {
		t.Fatalf("/slots: %v", err)
	}
	for _, s := range slots {
		if s.IsProcessing {
			return false
		}
	}
	return true
}
