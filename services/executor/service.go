// Package executor holds the MCP sessions of every configured server: it keeps
// one long-lived client per server (SSE, streamable HTTP or stdio), a catalog
// of their tools under SERVER.TOOL ids, and calls them with validation,
// timeouts and per-server concurrency limits. handler.go serves it over gRPC.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Service is the executor.
type Service struct {
	toolmeshv1.UnimplementedExecutorServiceServer

	cfg      Config
	log      *slog.Logger
	cat      *catalog
	sessions map[string]*session // fixed after New; read without locks
	names    []string
	started  atomic.Bool
	stopped  chan struct{} // closed when Run returns
	// draining is closed by Drain: watch streams end so a drain waits only for calls.
	draining  chan struct{}
	drainOnce sync.Once
	tel       *telemetry.Service
	ins       *instruments
}

// New builds the executor; Run connects the servers.
func New(cfg Config, logger *slog.Logger, tel *telemetry.Service) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("executor config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	rules, err := policy.New(policy.Config{Servers: policy.RulesOf(cfg.Servers)}, tel.Meter("github.com/toolmesh/toolmesh/services/executor"))
	if err != nil {
		return nil, fmt.Errorf("executor config: %w", err)
	}
	s := &Service{
		cfg:      cfg,
		log:      logger,
		cat:      newCatalog(rules),
		sessions: make(map[string]*session, len(cfg.Servers)),
		stopped:  make(chan struct{}),
		draining: make(chan struct{}),
		tel:      tel,
		ins:      newInstruments(tel),
	}
	for name, srv := range cfg.Servers {
		srv.Name = name
		for _, w := range srv.Warnings {
			logger.Warn("mcp server config: "+w, "server", name)
		}
		s.sessions[name] = newSession(name, srv, cfg, logger, s.cat, s.ins)
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	return s, nil
}

// Run connects every server in parallel (one failing server never blocks the
// others), keeps the sessions alive, and returns once ctx has ended and every
// session and child process is closed.
func (s *Service) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("executor: Run called twice")
	}
	defer close(s.stopped)
	sessions := make([]*session, 0, len(s.names))
	for _, name := range s.names {
		sessions = append(sessions, s.sessions[name])
	}
	if reg, err := s.ins.observeSessions(sessions); err != nil {
		s.log.Warn("toolmesh.mcp.sessions will not be reported", "err", err)
	} else {
		defer func() { _ = reg.Unregister() }()
	}
	var wg sync.WaitGroup
	for _, name := range s.names {
		sess := s.sessions[name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess.run(ctx)
		}()
	}
	<-ctx.Done()
	wg.Wait()
	s.log.Info("executor stopped")
	return nil
}

// Drain ends every WatchTools stream (their subscribers resubscribe, to another executor when
// there is one) while calls in flight go on: the server is about to stop, and a watch never
// ends by itself.
func (s *Service) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// Register registers the gRPC ExecutorService.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	toolmeshv1.RegisterExecutorServiceServer(g, s)
}

// Ready reports whether every server is connected; if not, it says which are
// not and why.
func (s *Service) Ready() (bool, string) {
	var not []string
	for _, name := range s.names {
		if ok, why := s.sessions[name].ready(); !ok {
			not = append(not, name+": "+why)
		}
	}
	if len(not) == 0 {
		return true, ""
	}
	return false, strings.Join(not, "; ")
}

// callTool is the call path: look up, validate, call.
func (s *Service) callTool(ctx context.Context, id string, args *structpb.Struct, timeout time.Duration) (*mcp.CallToolResult, error) {
	server := toolid.Server(id)
	sess := s.sessions[server]
	if sess == nil {
		return nil, &unknownToolError{id: id}
	}
	if err := s.cat.denied(id); err != nil {
		return nil, err
	}
	t := s.cat.lookup(id)
	if t == nil {
		// Without a session we cannot know the server's tools.
		if _, err := sess.current(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &notInCatalogError{err}
		}
		_, name, _ := toolid.Split(id)
		if why, ok := sess.refusal(name); ok {
			return nil, &refusedToolError{id: id, reason: why}
		}
		return nil, &unknownToolError{id: id}
	}
	var m map[string]any
	if args != nil {
		m = args.AsMap()
	} else {
		m = map[string]any{}
	}
	if t.schema != nil {
		dropOptionalNulls(t.schema, m)
		if err := validateArgs(ctx, id, t.schema, m); err != nil {
			return nil, err
		}
	}
	return sess.call(ctx, t, m, timeout)
}

// endpointOf is the server's endpoint without credentials, query or command path.
func endpointOf(srv mcpconfig.Server) string { return srv.Endpoint() }

func transportEnum(t mcpconfig.Transport) toolmeshv1.Transport {
	switch t {
	case mcpconfig.TransportSSE:
		return toolmeshv1.Transport_TRANSPORT_SSE
	case mcpconfig.TransportStreamableHTTP:
		return toolmeshv1.Transport_TRANSPORT_STREAMABLE_HTTP
	case mcpconfig.TransportStdio:
		return toolmeshv1.Transport_TRANSPORT_STDIO
	}
	return toolmeshv1.Transport_TRANSPORT_UNSPECIFIED
}

func timestampOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
