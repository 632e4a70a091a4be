// Package api is toolmesh's public API: the tools API and the agent loop over gRPC and REST.
package api

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/audit"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/webguard"
	"github.com/toolmesh/toolmesh/services/api/mcpface"
)

// Service is the api target. It holds client connections to its dependencies.
type Service struct {
	cfg    Config
	logger *slog.Logger
	conns  []*grpc.ClientConn
	tools  *toolHandler
	agent  *agentHandler
	guard  *auth.Guard
	web    *webguard.Guard
	tel    *telemetry.Service
	// mcp is the MCP face, served on the REST port (Gateway).
	mcp *mcpface.Face
	// prompts serves PromptService and ResourceService.
	prompts *contextHandler
	// metrics serves GET /metrics when set (SetMetrics).
	metrics http.Handler
	// started is when the api started, for --api.ready-server-grace.
	started time.Time
	// audit writes the audit trail of the api's tool calls.
	audit *audit.Recorder
	trail *trail
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
	if err := checkExposure(cfg, guard.Enabled()); err != nil {
		return nil, err
	}
	if cfg.AllowOpen && !guard.Enabled() && (!server.Loopback(cfg.HTTPAddr) || !server.Loopback(cfg.GRPCAddr)) {
		logger.Warn("the api listens beyond loopback without API tokens (--api.allow-open): anyone who reaches it can call every tool",
			"http_addr", cfg.HTTPAddr, "grpc_addr", cfg.GRPCAddr)
	}
	web, err := webguard.New(cfg.Web, logger)
	if err != nil {
		return nil, err
	}
	// The servers' rules are the executor's: they come from it (rules.go), and until they do
	// the policy refuses calls as unavailable.
	cfg.Policy.Servers, cfg.Policy.Pending = nil, pendingRules(cfg)
	pol, err := newPolicy(cfg.Policy, guard, tel)
	if err != nil {
		return nil, err
	}
	if cfg.MaxToolCalls == 0 {
		cfg.MaxToolCalls = DefaultMaxToolCalls
	}
	if cfg.MaxStepCalls == 0 {
		cfg.MaxStepCalls = DefaultMaxStepCalls
	}
	s := &Service{cfg: cfg, logger: logger, guard: guard, web: web, tel: tel, started: time.Now()}
	s.audit, err = audit.New(cfg.Audit, audit.Options{Logger: logger, Meter: tel.Meter("github.com/toolmesh/toolmesh/internal/audit"),
		Log: tel.Logger("github.com/toolmesh/toolmesh/internal/audit")})
	if err != nil {
		return nil, err
	}
	s.trail = &trail{rec: s.audit, key: rand.Text(), on: s.audit.Enabled()}
	exec := cfg.LocalExecutor
	if exec == nil {
		conn, err := s.dial(toolmeshv1.ExecutorService_ServiceDesc.ServiceName, cfg.ExecutorAddr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("executor client: %w", err)
		}
		exec = toolmeshv1.NewExecutorServiceClient(conn)
	}
	rules := &serverRules{policy: pol, exec: exec, cfg: cfg, log: logger}
	s.tools = &toolHandler{cfg: cfg, executor: exec, policy: pol, rules: rules, trail: s.trail}
	s.prompts = &contextHandler{cfg: cfg, executor: exec, policy: pol}
	mcfg := cfg.MCP
	mcfg.RPCTimeout = cfg.RPCTimeout
	mcfg.HostAllowed = web.HostAllowed // one Host rule for the whole REST port, /mcp included
	// The face's WatchTools stream carries the executor's rules to the policy too.
	s.mcp = mcpface.New(mcfg, s.tools, watchTap{exec, rules}, pol, logger, tel)
	s.mcp.ServeContext(s.prompts, exec)
	switch {
	case cfg.LocalRetriever != nil:
		s.tools.retriever = cfg.LocalRetriever
	case cfg.RetrieverAddr != "":
		conn, err := s.dial(toolmeshv1.RetrieverService_ServiceDesc.ServiceName, cfg.RetrieverAddr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("retriever client: %w", err)
		}
		s.tools.retriever = toolmeshv1.NewRetrieverServiceClient(conn)
	}
	s.agent = newAgentHandler(cfg, logger, tel, s.tools.executor)
	s.agent.policy, s.agent.rules, s.agent.guard, s.agent.trail = pol, rules, guard, s.trail
	if s.tools.retriever != nil {
		s.agent.retriever = s.tools.retriever
	}
	switch {
	case cfg.LocalInference != nil:
		s.agent.inference = cfg.LocalInference
	case cfg.InferenceAddr != "":
		conn, err := s.dial(toolmeshv1.InferenceService_ServiceDesc.ServiceName, cfg.InferenceAddr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("inference client: %w", err)
		}
		s.agent.inference = toolmeshv1.NewInferenceServiceClient(conn)
	}
	return s, nil
}

// Audit is the api's audit trail, for events of other parts of the process to join it (a pin
// approved or a tool quarantined: Recorder.Event). It is nil-safe and safe for concurrent use.
func (s *Service) Audit() *audit.Recorder { return s.audit }

// newPolicy compiles the policy and checks that the tokens its scopes name exist: a scope for
// a misspelt name would leave the real token with the default (or nothing) and no hint why.
func newPolicy(cfg policy.Config, guard *auth.Guard, tel *telemetry.Service) (*policy.Policy, error) {
	pol, err := policy.New(cfg, tel.Meter("github.com/toolmesh/toolmesh/services/api"))
	if err != nil {
		return nil, err
	}
	names := pol.Tokens()
	if len(names) == 0 {
		return pol, nil
	}
	slices.Sort(names)
	if !guard.Enabled() {
		return nil, fmt.Errorf("policy.tokens gives scopes to %s, but no API tokens are configured (--api.tokens-file or %s); without tokens every caller gets policy.default",
			strings.Join(names, ", "), auth.EnvTokens)
	}
	known := guard.Names()
	for _, n := range names {
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("policy.tokens.%s: no API token is named %q (a name is the NAME of a NAME:TOKEN entry in --api.tokens-file or %s)", n, n, auth.EnvTokens)
		}
	}
	return pol, nil
}

// checkExposure refuses an api that anyone on the network could use to call every tool: a
// REST or gRPC listen address beyond loopback with no API tokens, unless --api.allow-open says
// that is meant.
func checkExposure(cfg Config, tokens bool) error {
	if tokens || cfg.AllowOpen {
		return nil
	}
	for _, a := range []struct{ flag, addr string }{{"api.http-addr", cfg.HTTPAddr}, {"api.grpc-addr", cfg.GRPCAddr}} {
		if !server.Loopback(a.addr) {
			return fmt.Errorf("%s: %s listens beyond loopback but no API tokens are configured, so anyone who reaches it could call every tool: "+
				"set tokens (--api.tokens-file or $%s), listen on 127.0.0.1, or pass --api.allow-open to run an open api on purpose",
				a.flag, a.addr, auth.EnvTokens)
		}
	}
	return nil
}

// dial makes a client of the dependency service (its full gRPC name) at addr.
func (s *Service) dial(service, addr string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr, slices.Concat(server.DialOptionsFor(service, addr), s.cfg.DialOptions, s.tel.GRPCDialOptions())...)
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
	toolmeshv1.RegisterPromptServiceServer(g, s.prompts)
	toolmeshv1.RegisterResourceServiceServer(g, s.prompts)
	toolmeshv1.RegisterAgentServiceServer(g, s.agent)
}

// Run follows the executor's catalog for the MCP endpoints and its pin events for the audit
// trail until ctx ends, then closes the dependency connections and the trail.
func (s *Service) Run(ctx context.Context) error {
	pins := make(chan struct{})
	if src, ok := s.tools.executor.(pinEventSource); ok && s.audit.Enabled() {
		go func() { // the executor's pin events join the audit trail
			defer close(pins)
			followPinEvents(ctx, src, s.logger, func(ctx context.Context, ev *toolmeshv1.PinEvent) {
				kind, tool, detail := pinEventAudit(ev)
				s.audit.Event(ctx, kind, tool, detail)
			})
		}()
	} else {
		close(pins)
	}
	err := s.mcp.Run(ctx)
	<-pins
	s.Close()
	return err
}

// Drain ends the MCP endpoints' open streams when the REST server starts draining.
func (s *Service) Drain() { s.mcp.Drain() }

// Close stops the MCP endpoints, closes the dependency connections and writes what the audit
// trail still holds.
func (s *Service) Close() {
	if s.mcp != nil {
		s.mcp.Close()
	}
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
	if err := s.audit.Close(); err != nil {
		s.logger.Error("closing the audit trail", "err", err)
	}
}
