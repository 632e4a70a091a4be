// Package app is toolmesh's composition root: it maps each target to its init function,
// starts targets in dependency order and stops them in reverse, each with a drain deadline.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/services/api"
	"github.com/toolmesh/toolmesh/services/executor"
	"github.com/toolmesh/toolmesh/services/inference"
	"github.com/toolmesh/toolmesh/services/retriever"
)

// runner is one long-running part of a target: it runs until ctx ends, then stops cleanly.
type runner func(ctx context.Context) error

// target is one deployable unit: `serve --target=NAME`.
type target struct {
	deps []string
	init func(a *App) ([]runner, error)
}

// targets is the one table of what exists and what starts before what.
var targets = map[string]target{
	"demo":      {init: initDemo},
	"executor":  {deps: []string{"demo"}, init: initExecutor},
	"retriever": {deps: []string{"executor"}, init: initRetriever},
	"inference": {init: initInference},
	"api":       {deps: []string{"executor", "retriever", "inference"}, init: initAPI},
}

// serveTargets are the names `serve --target` accepts; "all" means every one of them.
var serveTargets = []string{"executor", "retriever", "inference", "api"}

// App runs a set of targets in one process.
type App struct {
	cfg    Config
	logger *slog.Logger
	tel    *telemetry.Telemetry
	// Endpoints lists what each started target listens on, for `up` to print.
	Endpoints []Endpoint
}

// Endpoint is one address a target listens on.
type Endpoint struct {
	Name, Addr string
}

// New checks the target names; cfg must be loaded and valid.
func New(cfg Config, logger *slog.Logger) (*App, error) {
	for _, t := range cfg.Targets {
		if _, ok := targets[t]; !ok {
			return nil, fmt.Errorf("target %q: unknown; choose from %s", t, strings.Join(serveTargets, ", "))
		}
	}
	tel, err := telemetry.New(cfg.Telemetry)
	if err != nil {
		return nil, err
	}
	return &App{cfg: cfg, logger: logger, tel: tel}, nil
}

// telemetry makes the providers of one target; each reports as its own service.
func (a *App) telemetry(target string) (*telemetry.Service, error) {
	return a.tel.Service(context.Background(), "toolmesh-"+target)
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
		hs, err := server.NewHTTP(a.cfg.MetricsAddr, mux, a.logger, a.cfg.DrainTimeout)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		a.endpoint("metrics", "http://"+hs.Addr()+"/metrics")
		mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); _ = hs.Run(mctx) }()
		defer func() { stop(); <-done }()
	}
	for _, name := range names {
		runners, err := targets[name].init(a)
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

func initExecutor(a *App) ([]runner, error) {
	logger := a.logger.With("target", "executor")
	tel, err := a.telemetry("executor")
	if err != nil {
		return nil, err
	}
	svc, err := executor.New(a.cfg.Executor, logger, tel)
	if err != nil {
		return nil, err
	}
	g, err := server.NewGRPC(a.cfg.ExecutorAddr, logger, a.cfg.DrainTimeout, tel.GRPCServerOptions()...)
	if err != nil {
		return nil, err
	}
	svc.Register(g.Server)
	g.Health.SetServingStatus("toolmesh.v1.ExecutorService", healthpb.HealthCheckResponse_SERVING)
	a.endpoint("executor gRPC", g.Addr())
	// In one process the api and the retriever use this executor, wherever it bound.
	if slices.Contains(a.cfg.Targets, "api") {
		a.cfg.API.ExecutorAddr = g.Addr()
	}
	if slices.Contains(a.cfg.Targets, "retriever") {
		a.cfg.Retriever.ExecutorAddr = g.Addr()
	}
	return []runner{svc.Run, g.Run}, nil
}

func initRetriever(a *App) ([]runner, error) {
	logger := a.logger.With("target", "retriever")
	tel, err := a.telemetry("retriever")
	if err != nil {
		return nil, err
	}
	svc, err := retriever.New(context.Background(), a.cfg.Retriever, logger, tel)
	if err != nil {
		return nil, err
	}
	g, err := server.NewGRPC(a.cfg.Retriever.GRPCAddr, logger, a.cfg.DrainTimeout, tel.GRPCServerOptions()...)
	if err != nil {
		svc.Close()
		return nil, err
	}
	svc.Register(g.Server)
	g.Health.SetServingStatus("toolmesh.v1.RetrieverService", healthpb.HealthCheckResponse_SERVING)
	a.endpoint("retriever gRPC", g.Addr())
	if slices.Contains(a.cfg.Targets, "api") {
		a.cfg.API.RetrieverAddr = g.Addr()
	}
	return []runner{svc.Run, g.Run}, nil
}

func initInference(a *App) ([]runner, error) {
	logger := a.logger.With("target", "inference")
	tel, err := a.telemetry("inference")
	if err != nil {
		return nil, err
	}
	svc, err := inference.New(a.cfg.Inference, logger, tel)
	if err != nil {
		return nil, err
	}
	g, err := server.NewGRPC(a.cfg.Inference.GRPCAddr, logger, a.cfg.DrainTimeout, tel.GRPCServerOptions()...)
	if err != nil {
		return nil, err
	}
	svc.Register(g.Server)
	g.Health.SetServingStatus("toolmesh.v1.InferenceService", healthpb.HealthCheckResponse_SERVING)
	a.endpoint("inference gRPC", g.Addr()+" (llama-server "+a.cfg.Inference.LLM.URL+")")
	if slices.Contains(a.cfg.Targets, "api") {
		a.cfg.API.InferenceAddr = g.Addr()
	}
	return []runner{svc.Run, g.Run}, nil
}

func initAPI(a *App) ([]runner, error) {
	logger := a.logger.With("target", "api")
	tel, err := a.telemetry("api")
	if err != nil {
		return nil, err
	}
	svc, err := api.New(a.cfg.API, logger, tel)
	if err != nil {
		return nil, err
	}
	g, err := server.NewGRPC(a.cfg.API.GRPCAddr, logger, a.cfg.DrainTimeout, svc.ServerOptions()...)
	if err != nil {
		svc.Close()
		return nil, err
	}
	svc.Register(g.Server)
	svc.SetMetrics(a.tel.MetricsHandler())
	g.Health.SetServingStatus("toolmesh.v1.ToolService", healthpb.HealthCheckResponse_SERVING)
	g.Health.SetServingStatus("toolmesh.v1.AgentService", healthpb.HealthCheckResponse_SERVING)
	h, closeGateway, err := svc.Gateway(context.Background(), g.Addr())
	if err != nil {
		svc.Close()
		return nil, err
	}
	hs, err := server.NewHTTP(a.cfg.API.HTTPAddr, h, logger, a.cfg.DrainTimeout)
	if err != nil {
		closeGateway()
		svc.Close()
		return nil, err
	}
	a.endpoint("REST", "http://"+hs.Addr())
	a.endpoint("console", "http://"+hs.Addr()+"/ui/")
	a.endpoint("api gRPC", g.Addr())
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
	return []runner{svc.Run, serve}, nil
}

// ServeTargets lists the targets `serve --target` accepts.
func ServeTargets() []string { return slices.Clone(serveTargets) }
