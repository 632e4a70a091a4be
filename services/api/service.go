// Package api is toolmesh's public API: the tools API and the agent loop over gRPC and REST.
package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Service is the api target. It holds client connections to its dependencies.
type Service struct {
	cfg    Config
	logger *slog.Logger
	conns  []*grpc.ClientConn
	tools  *toolHandler
	agent  *agentHandler
	guard  *auth.Guard
	tel    *telemetry.Service
	// metrics serves GET /metrics when set (SetMetrics).
	metrics http.Handler
}

// SetMetrics makes the REST server answer GET /metrics with h (the process's registry).
func (s *Service) SetMetrics(h http.Handler) { s.metrics = h }

// New dials the dependencies lazily: the api starts even while they are still coming up.
func New(cfg Config, logger *slog.Logger, tel *telemetry.Service) (*Service, error) {
	guard, err := auth.New(cfg.Auth, cfg.Tokens, logger)
	if err != nil {
		return nil, fmt.Errorf("api tokens: %w", err)
	}
	if guard.Enabled() {
		logger.Info("api tokens required", "source", "--api.tokens-file and "+auth.EnvTokens)
	}
	s := &Service{cfg: cfg, logger: logger, guard: guard, tel: tel}
	execConn, err := s.dial(cfg.ExecutorAddr)
	if err != nil {
		return nil, fmt.Errorf("executor client: %w", err)
	}
	s.tools = &toolHandler{cfg: cfg, executor: toolmeshv1.NewExecutorServiceClient(execConn)}
	if cfg.RetrieverAddr != "" {
		conn, err := s.dial(cfg.RetrieverAddr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("retriever client: %w", err)
		}
		s.tools.retriever = toolmeshv1.NewRetrieverServiceClient(conn)
	}
	s.agent = newAgentHandler(cfg, logger, tel, s.tools.executor)
	if s.tools.retriever != nil {
		s.agent.retriever = s.tools.retriever
	}
	if cfg.InferenceAddr != "" {
		conn, err := s.dial(cfg.InferenceAddr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("inference client: %w", err)
		}
		s.agent.inference = toolmeshv1.NewInferenceServiceClient(conn)
	}
	return s, nil
}

func (s *Service) dial(addr string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr, append(server.DialOptions(), s.tel.GRPCDialOptions()...)...)
	if err != nil {
		return nil, err
	}
	s.conns = append(s.conns, conn)
	return conn, nil
}

// ServerOptions are the options the api's gRPC server needs: the token check when tokens are set.
func (s *Service) ServerOptions() []grpc.ServerOption {
	return append(s.tel.GRPCServerOptions(), s.guard.ServerOptions()...)
}

// Register adds the public gRPC services.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	toolmeshv1.RegisterToolServiceServer(g, s.tools)
	toolmeshv1.RegisterAgentServiceServer(g, s.agent)
}

// Run waits for ctx to end, then closes the dependency connections.
func (s *Service) Run(ctx context.Context) error {
	<-ctx.Done()
	s.Close()
	return nil
}

// Close closes the dependency connections.
func (s *Service) Close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}
