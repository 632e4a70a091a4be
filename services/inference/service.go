// Package inference turns a question, candidate tools and earlier steps into tool calls or an
// answer, by driving a llama-server that runs Gorilla OpenFunctions v2 with a grammar built
// from the tools' schemas, so every call the model makes parses.
package inference

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/redact"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/services/inference/chat"
	"github.com/toolmesh/toolmesh/services/inference/llama"
)

// completer is what the service needs of a llama-server.
type completer interface {
	Health(ctx context.Context) error
	Props(ctx context.Context) (*llama.Props, error)
	CountTokens(ctx context.Context, text string) (int, error)
	TokenizePieces(ctx context.Context, text string) ([]llama.Token, error)
	Complete(ctx context.Context, req llama.CompletionRequest) (*llama.Completion, error)
	CompleteStream(ctx context.Context, req llama.CompletionRequest, fn func(llama.Chunk) error) (*llama.Completion, error)
}

// chatBackend is an OpenAI-compatible chat server with tools.
type chatBackend interface {
	Generate(ctx context.Context, req chat.Request) (*chat.Result, error)
	Compose(ctx context.Context, req chat.ComposeRequest, fn func(delta string) error) (*chat.ComposeResult, error)
}

// Service is the inference target.
type Service struct {
	toolmeshv1.UnimplementedInferenceServiceServer

	cfg    Config
	log    *slog.Logger
	llm    completer
	chat   chatBackend // set when the backend is openai; llm is then nil
	closer func() error

	catalogs *catalogs
	backend  backend // where the llama-server is; its sup is nil unless toolmesh runs it

	mu    sync.Mutex
	props *llama.Props // cached after the first success; the server's context does not change
}

// New builds the service and its llama-server client; nothing is contacted yet.
func New(cfg Config, logger *slog.Logger, tel *telemetry.Service) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Backend == "openai" {
		hc, closeHC := httpClient(tel)
		c, err := chat.New(chat.Config{URL: cfg.ChatURL, Model: cfg.ChatModel, APIKey: cfg.LLM.APIKey,
			Timeout: cfg.LLM.Timeout, MaxTokens: cfg.LLM.NPredict, Temperature: cfg.LLM.Sampling.Temperature}, hc, logger)
		if err != nil {
			return nil, fmt.Errorf("chat client: %w", err)
		}
		s := newService(cfg, nil, func() error { closeHC(); return c.Close() }, logger)
		s.chat = tracedChat{chatBackend: c, g: newGenAI(tel, "openai", cfg.ChatModel, cfg.ChatURL)}
		return s, nil
	}
	b, err := newBackend(cfg, logger)
	if err != nil {
		return nil, err
	}
	cfg.LLM.URL, cfg.LLM.Model = b.url, b.name
	hc, closeHC := httpClient(tel)
	c, err := llama.New(cfg.LLM, hc, logger)
	if err != nil {
		if b.sup != nil {
			_ = b.sup.Close()
		}
		return nil, fmt.Errorf("llama-server client: %w", err)
	}
	llm := tracedLLM{completer: c, g: newGenAI(tel, "llama.cpp", cfg.LLM.Model, cfg.LLM.URL)}
	closer := func() error {
		closeHC()
		if b.sup != nil {
			_ = b.sup.Close() // releases its listener if Run never ran
		}
		return c.Close()
	}
	s := newService(cfg, llm, closer, logger)
	s.backend = b
	return s, nil
}

// Close releases the client and the llama-server's listener when Run was never called (Run
// releases them itself).
func (s *Service) Close() { _ = s.closer() }

// Backend says where the model is: a llama-server the user runs, one toolmesh runs, or none
// yet and what to do about it.
func (s *Service) Backend() string {
	if s.chat != nil {
		return "OpenAI-compatible server " + redact.URL(s.cfg.ChatURL)
	}
	return s.backend.describe()
}

// httpClient is the HTTP client of the model backends: pooled for the concurrency the api
// drives, and traced (requests carry the trace context when sampled).
func httpClient(tel *telemetry.Service) (*http.Client, func()) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: tel.HTTPTransport(tr)}, tr.CloseIdleConnections
}

func newService(cfg Config, llm completer, closer func() error, logger *slog.Logger) *Service {
	if closer == nil {
		closer = func() error { return nil }
	}
	return &Service{cfg: cfg, log: logger, llm: llm, closer: closer, catalogs: newCatalogs(256),
		backend: backend{url: cfg.LLM.URL, name: cfg.LLM.Model}}
}

// Register adds the InferenceService.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	toolmeshv1.RegisterInferenceServiceServer(g, s)
}

// Run runs the llama-server toolmesh manages, if any, or says once whether the one it was
// given answers; then it waits for ctx, stops the llama-server and closes the client.
func (s *Service) Run(ctx context.Context) error {
	defer func() { _ = s.closer() }()
	if s.llm == nil {
		<-ctx.Done()
		return nil
	}
	if sup := s.backend.sup; sup != nil {
		s.log.Info("running llama-server for the model", "model", s.backend.ref.String(), "llama_server", sup.Bin(), "url", sup.URL())
		done := make(chan struct{})
		go func() { defer close(done); _ = sup.Run(ctx) }()
		<-done
		return nil
	}
	if err := s.llm.Health(ctx); err != nil && ctx.Err() == nil {
		attrs := []any{"url", s.cfg.LLM.URL, "err", err, "fix", s.backend.fix()}
		if s.backend.why != "" {
			attrs = append(attrs, "why", s.backend.why)
		}
		s.log.Warn("llama-server is not ready; questions fail until it is", attrs...)
	}
	<-ctx.Done()
	return nil
}

// contextSize is the per-slot context of the llama-server, asked once.
func (s *Service) contextSize(ctx context.Context) (*llama.Props, error) {
	s.mu.Lock()
	p := s.props
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := s.llm.Props(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.props = p
	s.mu.Unlock()
	return p, nil
}
