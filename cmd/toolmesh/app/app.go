// Package app is toolmesh's composition root: it maps each target to its init function,
// starts targets in dependency order and stops them in reverse, each with a drain deadline.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/localclient"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/oauth"
	"github.com/toolmesh/toolmesh/internal/redact"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/webguard"
	"github.com/toolmesh/toolmesh/services/api"
	"github.com/toolmesh/toolmesh/services/executor"
	"github.com/toolmesh/toolmesh/services/inference"
	"github.com/toolmesh/toolmesh/services/retriever"
)

// runner is one long-running part of a target: it runs until ctx ends, then stops cleanly.
type runner func(ctx context.Context) error

// service is the contract every target's service meets: its RPCs go on the target's gRPC
// server, and it runs (syncs, watches, holds sessions) until its context ends. The names it
// reports to health are the services it registered. Its context ends only once its servers
// have drained, so the calls in flight keep their clients, sessions and children to the end.
type service interface {
	Register(grpc.ServiceRegistrar)
	Run(ctx context.Context) error
}

// drainer is a service with streams that never end by themselves (the executor's WatchTools):
// Drain ends them when its server starts draining, so the drain waits only for real work.
type drainer interface{ Drain() }

var (
	_ service = (*executor.Service)(nil)
	_ service = (*retriever.Service)(nil)
	_ service = (*inference.Service)(nil)
	_ service = (*api.Service)(nil)
	// Found by type assertion like drainer and readiness: asserted here, so that a method
	// renamed in a service fails the build instead of silently ending its reloads.
	// The api is not one: it has the servers' rules from the executor (services/api/rules.go).
	_ reconfigurable  = (*executor.Service)(nil)
	_ refusalReporter = (*executor.Service)(nil)
)

// target is one deployable unit: `serve --target=NAME`.
type target struct {
	// deps start before this target when they run in the same process; their addresses are
	// then in the address book when this target starts.
	deps []string
	// check validates the part of the config this target uses.
	check func(c *Config) error
	init  func(a *App, env targetEnv) ([]runner, error)
	// internal is the gRPC port of a target only other toolmesh services call; nil for the
	// api, whose port is public, and the demo.
	internal *internalPort
}

// targets is the one table of what exists, what it needs and what starts before what.
var targets = map[string]target{
	"demo": {init: initDemo},
	"executor": {deps: []string{"demo"}, check: (*Config).checkExecutor, init: initExecutor,
		internal: &internalPort{flag: "executor.grpc-addr", addr: func(c *Config) string { return c.Executor.GRPCAddr },
			gives: "call every tool past the api's tokens and scopes"}},
	"retriever": {deps: []string{"executor"}, check: func(c *Config) error { return c.Retriever.Validate() }, init: initRetriever,
		internal: &internalPort{flag: "retriever.grpc-addr", addr: func(c *Config) string { return c.Retriever.GRPCAddr },
			gives: "search every tool past the api's tokens and scopes"}},
	"inference": {check: func(c *Config) error { return c.Inference.Validate() }, init: initInference,
		internal: &internalPort{flag: "inference.grpc-addr", addr: func(c *Config) string { return c.Inference.GRPCAddr },
			gives: "use the model past the api's tokens"}},
	"api": {deps: []string{"executor", "retriever", "inference"}, check: func(c *Config) error { return c.API.Validate() }, init: initAPI},
}

// serveTargets are the names `serve --target` accepts.
var serveTargets = []string{"executor", "retriever", "inference", "api"}

// App runs a set of targets in one process.
type App struct {
	cfg    Config
	logger *slog.Logger
	tel    *telemetry.Telemetry
	tls    tlsSources
	// Endpoints lists what each started target listens on, for `up` to print.
	Endpoints []Endpoint
	// book is where started targets leave what the targets after them read.
	book addressBook
	// force is closed by ForceStop: drains end at once.
	force     chan struct{}
	forceOnce sync.Once
	// reconfig are the services of this process that a reload of the MCP server
	// configuration reconfigures (reconfigurable), in the order they started.
	reconfig []reloadTarget
	// reloader is set by Run when there is a config file to read again.
	reloader *reloader
}

// ForceStop makes a stop under way skip what is left of its drains (a second signal): calls
// still in flight are cut.
func (a *App) ForceStop() { a.forceOnce.Do(func() { close(a.force) }) }

// afterDrain runs svc until serve has drained, then stops svc: serve runs until ctx ends and
// returns once its servers stopped taking and finished what they had. A service that ends on
// its own before the stop is a failure, and stops serve.
func afterDrain(svc service, serve runner) runner {
	return func(ctx context.Context) error {
		sctx, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
		defer stopSvc()
		svcDone := make(chan error, 1)
		go func() { svcDone <- svc.Run(sctx) }()
		gctx, stopServe := context.WithCancel(ctx)
		defer stopServe()
		serveDone := make(chan error, 1)
		go func() { serveDone <- serve(gctx) }()
		select {
		case err := <-svcDone:
			stopServe()
			return errors.Join(err, <-serveDone)
		case <-ctx.Done():
			if d, ok := svc.(drainer); ok {
				d.Drain()
			}
		}
		err := <-serveDone
		stopSvc()
		return errors.Join(err, <-svcDone)
	}
}

// addressBook holds what a started target offers the targets that depend on it: the address
// its gRPC server bound (port 0 picks one) and, for the demo, the MCP servers it runs.
type addressBook struct {
	grpc map[string]string
	// local are the targets served in this process only (serveLocal), by name.
	local      map[string]*server.Local
	mcpServers map[string]mcpconfig.Server
}

// dial is the address of target: the one it bound when it runs in this process, or configured
// (another process, another host) when it does not.
func (a *App) dial(target, configured string) string {
	if addr, ok := a.book.grpc[target]; ok {
		return addr
	}
	return configured
}

// Endpoint is one address a target listens on.
type Endpoint struct {
	Name, Addr string
}

// targetEnv is what every target's init gets: its name, logger and telemetry.
type targetEnv struct {
	name   string
	logger *slog.Logger
	tel    *telemetry.Service
	// internal is the target's internal port (targets); nil for the api and the demo.
	internal *internalPort
	// callersHere is whether every target that calls this one runs in this process.
	callersHere bool
}

// New checks the target names; cfg must be loaded and valid.
func New(cfg Config, logger *slog.Logger) (*App, error) {
	for _, t := range cfg.Targets {
		if _, ok := targets[t]; !ok {
			return nil, fmt.Errorf("target %q: unknown; choose from %s", t, strings.Join(serveTargets, ", "))
		}
	}
	// Errors logged by any target may quote an MCP server's URL with its credentials.
	logger = slog.New(redact.Handler(logger.Handler()))
	// Before telemetry, which would have to be shut down if the files did not load.
	tlsSrc, err := loadTLS(cfg.TLS, slices.Contains(cfg.Targets, "api"), logger)
	if err != nil {
		return nil, err
	}
	tel, err := telemetry.New(cfg.Telemetry)
	if err != nil {
		return nil, err
	}
	return &App{cfg: cfg, logger: logger, tel: tel, tls: tlsSrc, force: make(chan struct{}),
		book: addressBook{grpc: map[string]string{}, local: map[string]*server.Local{}, mcpServers: map[string]mcpconfig.Server{}}}, nil
}

// order lists the requested targets so that each comes after the dependencies that are also requested.
func order(requested []string) []string {
	var out []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		for _, d := range targets[name].deps {
			if slices.Contains(requested, d) {
				visit(d)
			}
		}
		out = append(out, name)
	}
	for _, t := range requested {
		visit(t)
	}
	return out
}

// Run starts every target and blocks until ctx ends or one of them fails; then it stops the
// targets in reverse dependency order, so the api drains before the executor closes sessions.
// started, if not nil, is called once every listener is bound.
func (a *App) Run(ctx context.Context, started func()) error {
	names := order(a.cfg.Targets)
	type running struct {
		name   string
		cancel context.CancelFunc
		wg     sync.WaitGroup
	}
	var all []*running
	failed := make(chan error, 16)
	stopAll := func() {
		for i := len(all) - 1; i >= 0; i-- {
			all[i].cancel()
			all[i].wg.Wait()
		}
	}
	if a.cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.tel.MetricsHandler())
		// The same Host and Origin rules as the REST port: a web page must not read it either.
		web, err := webguard.New(a.cfg.API.Web, a.logger)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		hs, err := server.NewHTTP(a.cfg.MetricsAddr, web.Handler(mux, nil), a.logger, a.cfg.DrainTimeout)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		hs.ForceOn(a.force)
		a.endpoint("metrics", "http://"+hs.Addr()+"/metrics")
		mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); _ = hs.Run(mctx) }()
		defer func() { stop(); <-done }()
	}
	// Rotated certificates are read while the targets run, and until the last has stopped.
	tlsCtx, stopTLS := context.WithCancel(context.WithoutCancel(ctx))
	defer a.tls.run(tlsCtx)()
	defer stopTLS()
	for _, name := range names {
		env := targetEnv{name: name, logger: a.logger.With("target", name), internal: targets[name].internal, callersHere: a.callersHere(name)}
		var err error
		// Each target reports as its own service; the demo's servers make their own.
		if name != "demo" {
			env.tel, err = a.tel.Service(context.Background(), "toolmesh-"+name)
		}
		var runners []runner
		if err == nil {
			runners, err = targets[name].init(a, env)
		}
		if err != nil {
			stopAll()
			return fmt.Errorf("start %s: %w", name, err)
		}
		r := &running{name: name}
		tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r.cancel = cancel
		for _, run := range runners {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				if err := run(tctx); err != nil && tctx.Err() == nil {
					failed <- fmt.Errorf("%s: %w", name, err)
				}
			}()
		}
		all = append(all, r)
	}
	if len(a.reconfig) > 0 && (a.cfg.ConfigFile != "" || a.cfg.MCPConfig != "") {
		a.reloader = newReloader(a.cfg, maps.Clone(a.book.mcpServers), a.reconfig, a.logger)
		rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := a.reloader.run(rctx); err != nil {
				a.logger.Warn("the mcp server config will not be reloaded", "err", err)
			}
		}()
		// Stopped before the targets: no reload starts sessions during a stop.
		stopAll = func(stopTargets func()) func() {
			return func() {
				stop()
				<-done
				stopTargets()
			}
		}(stopAll)
	}
	if started != nil {
		started()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-failed:
		a.logger.Error("target failed, stopping", "err", err)
	}
	stopAll()
	close(failed)
	for e := range failed {
		err = errors.Join(err, e)
	}
	// Spans of the last requests are still buffered: send them before the process ends.
	fctx, cancel := context.WithTimeout(context.Background(), a.cfg.DrainTimeout)
	defer cancel()
	if ferr := a.tel.Shutdown(fctx); ferr != nil {
		a.logger.Warn("flushing telemetry", "err", ferr)
	}
	return err
}

func (a *App) endpoint(name, addr string) {
	a.Endpoints = append(a.Endpoints, Endpoint{Name: name, Addr: addr})
}

// startGRPC binds addr, puts svc's RPCs on it and reports each of them SERVING, and writes the
// bound address in the address book under the target's name. On error svc is closed if it can be.
func (a *App) startGRPC(env targetEnv, addr string, svc service, opts ...grpc.ServerOption) (*server.GRPC, error) {
	// Every server speaks the TLS the config asks for: mutual between the services, and the
	// api's public port its own.
	if env.name == "api" {
		opts = append(opts, a.tls.apiServerOptions()...)
	} else {
		opts = append(opts, a.tls.serverOptions()...)
	}
	g, err := server.NewGRPC(addr, env.logger, a.cfg.DrainTimeout, opts...)
	if err != nil {
		if c, ok := svc.(interface{ Close() }); ok {
			c.Close()
		}
		return nil, err
	}
	g.ForceOn(a.force)
	svc.Register(g.Server)
	g.ServeRegistered()
	a.book.grpc[env.name] = g.Addr()
	a.reloads(env.name, svc)
	return g, nil
}

// reloads adds svc to the services a reload of the MCP server configuration reconfigures,
// when it is one.
func (a *App) reloads(name string, svc service) {
	if r, ok := svc.(reconfigurable); ok {
		a.reconfig = append(a.reconfig, reloadTarget{name: name, svc: r})
	}
}

// serveGRPC is an internal target (targets' internal port) that is one service: on a gRPC
// server at addr, or in this process only (serveLocal) when every target that calls it runs
// here and addr was not given on purpose (the command line or the config file).
func (a *App) serveGRPC(env targetEnv, addr string, svc service, opts ...grpc.ServerOption) ([]runner, error) {
	if env.callersHere && !a.cfg.given(env.internal.flag) {
		return a.serveLocal(env, svc), nil
	}
	if err := a.checkOpen(env, addr); err != nil {
		if c, ok := svc.(interface{ Close() }); ok {
			c.Close()
		}
		return nil, err
	}
	g, err := a.startGRPC(env, addr, svc, opts...)
	if err != nil {
		return nil, err
	}
	a.endpoint(env.name+" gRPC", g.Addr())
	runners := []runner{afterDrain(svc, g.Run)}
	if r, ok := svc.(readiness); ok {
		// Not serving until ready: a probe (Kubernetes' readiness, compose's health check)
		// keeps callers away from a replica that would only answer "not ready".
		g.SetRegistered(false)
		runners = append(runners, func(ctx context.Context) error { follow(ctx, readyPoll, r.Ready, g.SetRegistered); return nil })
	}
	return runners, nil
}

// serveLocal serves svc to the targets of this process only, without a listener: they call it
// directly (server.Local, internal/localclient), with the interceptors, spans and metrics of a
// gRPC call but no socket, HTTP/2 or encoding (issue 28). On a default `up` nothing outside the
// process can then reach the executor and run tools past the api's tokens and scopes, as anyone
// could on 127.0.0.1:7704 (issue 26 put these targets on private Unix sockets; now there is
// nothing to connect to at all).
func (a *App) serveLocal(env targetEnv, svc service) []runner {
	l := server.NewLocal(env.name, env.logger, a.cfg.DrainTimeout, env.tel.GRPCServerStats())
	l.ForceOn(a.force)
	svc.Register(l)
	a.book.local[env.name] = l
	a.reloads(env.name, svc)
	a.endpoint(env.name+" gRPC", l.Addr()+"; only this process calls it")
	return []runner{afterDrain(svc, l.Run)}
}

// localClient is a client of the target name when it runs in this process (serveLocal) for a
// caller whose telemetry is tel; nil when it does not.
func (a *App) localClient(name string, tel *telemetry.Service) *server.LocalClient {
	l, ok := a.book.local[name]
	if !ok {
		return nil
	}
	return l.Client(tel.GRPCClientStats())
}

// callersHere reports whether every target that calls the target name (has it in its deps)
// runs in this process.
func (a *App) callersHere(name string) bool {
	for caller, t := range targets {
		if slices.Contains(t.deps, name) && !slices.Contains(a.cfg.Targets, caller) {
			return false
		}
	}
	return true
}

// checkOpen refuses the internal target of env on addr beyond loopback without mutual TLS
// (Config.checkOpen; Validate checks the same before any target starts), and warns when
// --allow-insecure-internal lets it.
func (a *App) checkOpen(env targetEnv, addr string) error {
	p := env.internal
	if err := a.cfg.checkOpen(p, addr); err != nil {
		return err
	}
	if !a.cfg.TLS.Mutual() && !server.Loopback(addr) {
		env.logger.Warn("listening beyond loopback without mutual TLS (--allow-insecure-internal): anyone who reaches this port can "+p.gives,
			"flag", p.flag, "addr", addr)
	}
	return nil
}

// readiness is a service that can be up and still not able to answer (the retriever before
// its index has synced).
type readiness interface {
	Ready(ctx context.Context) (bool, string)
}

// readyPoll is how often a readiness is asked; modelPoll how often the api asks whether the
// model answers (a call to the inference service and from there to llama-server).
const (
	readyPoll = 500 * time.Millisecond
	modelPoll = 2 * time.Second
)

// follow asks ready every interval and calls set when the answer changes (the first answer
// is a change from not serving), until ctx ends (the server's own drain then reports
// NOT_SERVING).
func follow(ctx context.Context, every time.Duration, ready func(context.Context) (bool, string), set func(serving bool)) {
	t := time.NewTicker(every)
	defer t.Stop()
	serving := false
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok, _ := ready(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if ok != serving {
			serving = ok
			set(ok)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func initExecutor(a *App, env targetEnv) ([]runner, error) {
	if a.cfg.serversErr != nil {
		return nil, a.cfg.serversErr
	}
	cfg := a.cfg.Executor
	if len(a.book.mcpServers) > 0 {
		cfg.Servers = maps.Clone(cfg.Servers)
		if cfg.Servers == nil {
			cfg.Servers = map[string]mcpconfig.Server{}
		}
		maps.Copy(cfg.Servers, a.book.mcpServers)
	}
	cfg.PinFile = a.cfg.pinFile()
	svc, err := executor.New(cfg, env.logger, env.tel)
	if err != nil {
		return nil, err
	}
	runners, err := a.serveGRPC(env, cfg.GRPCAddr, svc, env.tel.GRPCServerOptions()...)
	if err != nil {
		return nil, err
	}
	// The banner names every MCP server the executor connects to, the configured ones too (the
	// demo's are listed by the demo), credentials in their URLs masked.
	for _, name := range mcpconfig.Names(a.cfg.Executor.Servers) {
		srv := a.cfg.Executor.Servers[name]
		a.endpoint(name+" MCP", redact.Text(string(srv.Transport)+" "+srv.Endpoint())+signInNote(srv, cfg.OAuthStore()))
	}
	return runners, nil
}

// signInNote is " (needs sign-in: toolmesh login NAME)" for an OAuth server nobody has signed
// in to, for the banner.
func signInNote(srv mcpconfig.Server, store oauth.Store) string {
	if srv.Auth != mcpconfig.AuthOAuth || srv.OAuth.GrantType() != mcpconfig.GrantAuthorizationCode {
		return ""
	}
	if _, err := store.Load(context.Background(), srv.Name); errors.Is(err, oauth.ErrNoRecord) {
		return " (" + (&oauth.NeedsSignIn{Server: srv.Name}).Error() + ")"
	}
	return ""
}

func initRetriever(a *App, env targetEnv) ([]runner, error) {
	cfg := a.cfg.Retriever
	cfg.ExecutorAddr = a.dial("executor", cfg.ExecutorAddr)
	cfg.DialOptions = a.tls.dialOptions()
	cfg.LocalExecutor = localclient.Executor(a.localClient("executor", env.tel))
	svc, err := retriever.New(context.Background(), cfg, env.logger, env.tel)
	if err != nil {
		return nil, err
	}
	return a.serveGRPC(env, cfg.GRPCAddr, svc, env.tel.GRPCServerOptions()...)
}

func initInference(a *App, env targetEnv) ([]runner, error) {
	cfg := a.cfg.Inference
	svc, err := inference.New(cfg, env.logger, env.tel)
	if err != nil {
		return nil, err
	}
	runners, err := a.serveGRPC(env, cfg.GRPCAddr, svc, env.tel.GRPCServerOptions()...)
	if err == nil {
		last := &a.Endpoints[len(a.Endpoints)-1]
		last.Addr += " (" + svc.Backend() + ")"
	}
	return runners, err
}

func initAPI(a *App, env targetEnv) ([]runner, error) {
	cfg := a.cfg.API
	cfg.ExecutorAddr = a.dial("executor", cfg.ExecutorAddr)
	cfg.RetrieverAddr = a.dial("retriever", cfg.RetrieverAddr)
	cfg.InferenceAddr = a.dial("inference", cfg.InferenceAddr)
	cfg.DialOptions = a.tls.dialOptions()
	cfg.LocalExecutor = localclient.Executor(a.localClient("executor", env.tel))
	cfg.LocalRetriever = localclient.Retriever(a.localClient("retriever", env.tel))
	cfg.LocalInference = localclient.Inference(a.localClient("inference", env.tel))
	if !slices.Contains(a.cfg.Targets, "executor") && (a.cfg.MCPConfig != "" || len(a.cfg.servers) > 0) {
		// Until issue 30 the api read the servers' rules from its own copy of the config; a
		// deployment that still gives it one starts, and is told where the rules are now.
		env.logger.Warn("--mcp-config and mcpServers are not read by the api: the MCP servers' rules come from the executor, so the executor's config is the one that counts",
			"mcp_config", a.cfg.MCPConfig)
	}
	svc, err := api.New(cfg, env.logger, env.tel)
	if err != nil {
		return nil, err
	}
	g, err := a.startGRPC(env, cfg.GRPCAddr, svc, svc.ServerOptions()...)
	if err != nil {
		return nil, err
	}
	svc.SetMetrics(a.tel.MetricsHandler())
	h, closeGateway, err := svc.Gateway(context.Background(), g.Addr(), a.tls.gatewayDialOptions()...)
	if err != nil {
		svc.Close()
		return nil, err
	}
	hs, err := server.NewHTTP(cfg.HTTPAddr, h, env.logger, a.cfg.DrainTimeout)
	if err != nil {
		closeGateway()
		svc.Close()
		return nil, err
	}
	hs.ForceOn(a.force)
	a.endpoint("REST", "http://"+hs.Addr())
	a.endpoint("console", "http://"+hs.Addr()+"/ui/")
	// Apps that speak OpenAI take this as their base URL (docs/app.md).
	a.endpoint("OpenAI API", "http://"+hs.Addr()+"/v1")
	a.endpoint("api gRPC", g.Addr())
	// AgentService's questions need the model: its health follows it, as /readyz's inference
	// section does (it said SERVING with no model), while ToolService's searches and calls
	// stay SERVING without one.
	agent := toolmeshv1.AgentService_ServiceDesc.ServiceName
	setAgent := func(ok bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		g.Health.SetServingStatus(agent, st)
	}
	setAgent(false)
	answers := func(ctx context.Context) error { follow(ctx, modelPoll, svc.QuestionsReady, setAgent); return nil }
	// The HTTP server drains before the gRPC server it forwards to stops.
	serve := func(ctx context.Context) error {
		errc := make(chan error, 1)
		gctx, stopGRPC := context.WithCancel(context.WithoutCancel(ctx))
		go func() { errc <- g.Run(gctx) }()
		herr := hs.Run(ctx)
		closeGateway()
		stopGRPC()
		return errors.Join(herr, <-errc)
	}
	return []runner{afterDrain(svc, serve), answers}, nil
}

// ServeTargets lists the targets `serve --target` accepts.
func ServeTargets() []string { return slices.Clone(serveTargets) }
