// Package executor holds the MCP sessions of every configured server: it keeps
// one long-lived client per server (SSE, streamable HTTP or stdio), a catalog
// of their tools under SERVER.TOOL ids, and calls them with validation,
// timeouts and per-server concurrency limits. handler.go serves it over gRPC.
package executor

import (
	"context"
	"encoding/json"
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
	"google.golang.org/protobuf/types/known/timestamppb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/logsample"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Service is the executor.
type Service struct {
	toolmeshv1.UnimplementedExecutorServiceServer

	cfg     Config
	log     *slog.Logger
	cat     *catalog
	set     atomic.Pointer[sessionSet] // replaced whole by Reconfigure
	started atomic.Bool
	stopped chan struct{} // closed when Run returns
	// draining is closed by Drain: watch streams end so a drain waits only for calls.
	draining  chan struct{}
	drainOnce sync.Once
	tel       *telemetry.Service
	ins       *instruments
	// pins are the trusted tool definitions (pins.go).
	pins *pinBook
	// cutLog takes the lines about cut results, which a server can cause at will.
	cutLog *logsample.Sampler

	// mu orders reconfigurations with the start and end of Run.
	mu      sync.Mutex
	runCtx  context.Context // Run's, while it runs
	runDone bool            // Run has ended: no session starts any more
	running sync.WaitGroup  // session loops and drains of retired sessions
	conf    configState
}

// sessionSet is the configured servers and their sessions, immutable once published.
type sessionSet struct {
	servers  map[string]mcpconfig.Server // as configured, Name set
	sessions map[string]*session
	names    []string // sorted
}

func (set *sessionSet) list() []*session {
	out := make([]*session, 0, len(set.names))
	for _, name := range set.names {
		out = append(out, set.sessions[name])
	}
	return out
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
	ins := newInstruments(tel)
	published := policy.RulesOf(cfg.Servers)
	rules, err := policy.New(policy.Config{Servers: published}, ins.meter)
	if err != nil {
		return nil, fmt.Errorf("executor config: %w", err)
	}
	s := &Service{
		cfg:      cfg,
		log:      logger,
		cat:      newCatalog(rules, published),
		stopped:  make(chan struct{}),
		draining: make(chan struct{}),
		tel:      tel,
		ins:      ins,
		cutLog:   logsample.New(logger, 10, 2*time.Second),
	}
	if s.pins, err = newPinBook(cfg.PinFile, cfg.PinPoll, logger, ins.meter); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	s.pins.republish = s.republish
	set := &sessionSet{servers: make(map[string]mcpconfig.Server, len(cfg.Servers)), sessions: make(map[string]*session, len(cfg.Servers))}
	for name, srv := range cfg.Servers {
		srv.Name = name
		set.servers[name] = srv
		set.sessions[name] = s.newSession(srv)
		set.names = append(set.names, name)
	}
	sort.Strings(set.names)
	s.set.Store(set)
	s.conf.applied(time.Now())
	return s, nil
}

func (s *Service) newSession(srv mcpconfig.Server) *session {
	for _, w := range srv.Warnings {
		s.log.Warn("mcp server config: "+w, "server", srv.Name)
	}
	sess := newSession(srv.Name, srv, s.cfg, s.log, s.cat, s.ins)
	sess.pins = s.pins
	return sess
}

// Run connects every server in parallel (one failing server never blocks the
// others), keeps the sessions alive, and returns once ctx has ended and every
// session and child process is closed.
func (s *Service) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("executor: Run called twice")
	}
	defer close(s.stopped)
	if reg, err := s.ins.observeSessions(func() []*session { return s.set.Load().list() }); err != nil {
		s.log.Warn("toolmesh.mcp.sessions will not be reported", "err", err)
	} else {
		defer func() { _ = reg.Unregister() }()
	}
	if reg, err := s.ins.observeConfig(&s.conf); err != nil {
		s.log.Warn("toolmesh.config.* will not be reported", "err", err)
	} else {
		defer func() { _ = reg.Unregister() }()
	}
	if reg, err := s.pins.observe(s.cat); err != nil {
		s.log.Warn("toolmesh.tools.pending and toolmesh.tools.flagged will not be reported", "err", err)
	} else {
		defer func() { _ = reg.Unregister() }()
	}
	s.mu.Lock()
	s.runCtx = ctx
	for _, sess := range s.set.Load().list() {
		s.startLocked(sess)
	}
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		s.pins.follow(ctx) // another replica's approvals, an operator's edits
	}()
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.runDone = true
	s.mu.Unlock()
	s.running.Wait()
	s.log.Info("executor stopped")
	return nil
}

// startLocked runs sess until Run's context ends or sess is retired and drained.
func (s *Service) startLocked(sess *session) {
	ctx, cancel := context.WithCancel(s.runCtx)
	sess.stop = cancel
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		defer cancel()
		sess.run(ctx)
	}()
}

// enter returns the current session of server with a call counted in (leave it when the
// call is done), or nil when no such server is configured. A session retired between
// reading the set and entering it has been replaced already: read the set again.
func (s *Service) enter(server string) *session {
	for range 3 {
		sess := s.set.Load().sessions[server]
		if sess == nil || sess.enter() {
			return sess
		}
	}
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
	for _, sess := range s.set.Load().list() {
		if ok, why := sess.ready(); !ok {
			not = append(not, sess.name+": "+why)
		}
	}
	if len(not) == 0 {
		return true, ""
	}
	return false, strings.Join(not, "; ")
}

// callTool is the call path: check the servers' rules, look up, validate, call.
func (s *Service) callTool(ctx context.Context, req *toolmeshv1.ExecutorServiceCallToolRequest, timeout time.Duration, sink *progressSink) (*mcp.CallToolResult, error) {
	id := req.GetToolId()
	server := toolid.Server(id)
	sess := s.enter(server)
	if sess == nil {
		return nil, &unknownToolError{id: id}
	}
	defer sess.leave()
	if err := s.cat.denied(id, nil, req.GetByModel()); err != nil {
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
		// The session may have just connected and published its tools.
		t = s.cat.lookup(id)
	}
	if t == nil {
		_, name, _ := toolid.Split(id)
		if why, ok := sess.refusal(name); ok {
			return nil, &refusedToolError{id: id, reason: why}
		}
		if q := s.pins.quarantined(id); q != nil {
			return nil, q
		}
		return nil, &unknownToolError{id: id}
	}
	if req.GetByModel() {
		if err := s.cat.denied(id, t, true); err != nil {
			return nil, err
		}
	}
	m, raw, err := callArguments(id, req)
	if err != nil {
		return nil, err
	}
	if t.schema != nil {
		if dropOptionalNulls(t.schema, m) && raw != nil {
			// The server gets what was validated: the text without the nulls dropped.
			if raw, err = json.Marshal(m); err != nil {
				return nil, err
			}
		}
		if err := validateArgs(ctx, id, t.schema, m); err != nil {
			return nil, err
		}
	}
	if raw != nil {
		return sess.call(ctx, t, raw, timeout, sink)
	}
	return sess.call(ctx, t, m, timeout, sink)
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
