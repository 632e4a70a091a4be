package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/services/executor"
)

type executorScenario struct {
	scenario *scenario
	health   *scenario // bare grpc.health.v1 Check on the same gRPC server
	inproc   *scenario // the same Service's CallTool called in-process, without gRPC
	// structs is the same call over the same connection with its arguments as a
	// google.protobuf.Struct, as callers sent them before arguments_json (issue 28).
	structs *scenario
	close   func()
}

// grpcTuning is the gRPC server and client configuration of an executor scenario.
type grpcTuning struct {
	// workers: grpc.NumStreamWorkers (0: a new goroutine per RPC).
	workers uint32
	// staticWindow: fixed 1 MiB stream and connection windows on both sides, which turns
	// off grpc-go's BDP estimator (a PING/ACK exchange on a connection that receives data).
	staticWindow bool
	// shipped: the gRPC server and client exactly as toolmesh runs them (internal/server:
	// interceptors, stream workers, static windows); the fields above are then ignored.
	shipped bool
}

// newExecutorScenario runs the executor in-process with the calculator configured over tr,
// serves it on a loopback gRPC listener and calls it through the generated client.
func newExecutorScenario(ctx context.Context, tr, url string, o options) (*executorScenario, error) {
	return newExecutorScenarioTuned(ctx, tr, url, o, "executor-grpc", grpcTuning{shipped: o.workers == 0, workers: uint32(o.workers)}, nil)
}

// newExecutorScenarioTuned is newExecutorScenario with another gRPC setup and the executor's
// telemetry (nil: none). The in-process scenario is named after name, executor-grpc →
// executor-inproc.
func newExecutorScenarioTuned(ctx context.Context, tr, url string, o options, name string, tune grpcTuning, tel *telemetry.Service) (*executorScenario, error) {
	var cfg executor.Config
	cfg.RegisterFlags(flag.NewFlagSet("executor", flag.ContinueOnError))
	transport := mcpconfig.TransportSSE
	if tr == "streamable-http" {
		transport = mcpconfig.TransportStreamableHTTP
	}
	cfg.Servers = map[string]mcpconfig.Server{"calculator": {
		Name:            "calculator",
		Transport:       transport,
		URL:             url,
		ProtocolVersion: o.protocol,
	}}
	// The per-server limit must not throttle the concurrent phase.
	cfg.MaxConcurrency = max(cfg.MaxConcurrency, o.concurrency)
	svc, err := executor.New(cfg, slog.New(slog.DiscardHandler), tel)
	if err != nil {
		return nil, err
	}

	runCtx, cancelRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = svc.Run(runCtx)
	}()

	var addr string
	var copts []grpc.DialOption
	var stopServer func()
	if tune.shipped {
		g, err := server.NewGRPC("127.0.0.1:0", slog.New(slog.DiscardHandler), 5*time.Second)
		if err != nil {
			cancelRun()
			<-runDone
			return nil, err
		}
		svc.Register(g.Server)
		gctx, stopG := context.WithCancel(context.Background())
		gdone := make(chan struct{})
		go func() { defer close(gdone); _ = g.Run(gctx) }()
		addr, copts = g.Addr(), server.DialOptions()
		stopServer = func() { stopG(); <-gdone }
	} else {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			cancelRun()
			<-runDone
			return nil, err
		}
		var sopts []grpc.ServerOption
		copts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if tune.workers > 0 {
			sopts = append(sopts, grpc.NumStreamWorkers(tune.workers))
		}
		if tune.staticWindow {
			sopts = append(sopts, grpc.StaticStreamWindowSize(1<<20), grpc.StaticConnWindowSize(1<<20))
			copts = append(copts, grpc.WithStaticStreamWindowSize(1<<20), grpc.WithStaticConnWindowSize(1<<20))
		}
		gs := grpc.NewServer(sopts...)
		healthpb.RegisterHealthServer(gs, health.NewServer())
		svc.Register(gs)
		go func() { _ = gs.Serve(lis) }()
		addr, stopServer = lis.Addr().String(), gs.Stop
	}

	conn, err := grpc.NewClient(addr, copts...)
	if err != nil {
		stopServer()
		cancelRun()
		<-runDone
		return nil, err
	}
	closeAll := func() {
		conn.Close()
		stopServer()
		cancelRun()
		select {
		case <-runDone:
		case <-time.After(5 * time.Second):
		}
	}

	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, why := svc.Ready()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			closeAll()
			return nil, fmt.Errorf("executor not ready after 20s: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}

	ex := toolmeshv1.NewExecutorServiceClient(conn)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	servers, err := ex.ListServers(lctx, &toolmeshv1.ExecutorServiceListServersRequest{})
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("list servers: %w", err)
	}
	var protocol string
	for _, s := range servers.GetServers() {
		if s.GetName() == "calculator" {
			protocol = s.GetProtocolVersion()
		}
	}

	// Both callers build the request the same way, so the only difference is the gRPC hop. The
	// arguments travel as the JSON text a client sent (arguments_json), as the api passes them
	// on from REST and the MCP face (issue 28).
	args := []byte(`{"a":2,"b":3}`)
	asJSON := func() (*toolmeshv1.ExecutorServiceCallToolRequest, error) {
		return &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "calculator.add", ArgumentsJson: args}, nil
	}
	asStruct := func() (*toolmeshv1.ExecutorServiceCallToolRequest, error) {
		st, err := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
		return &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "calculator.add", Arguments: st}, err
	}
	callAs := func(build func() (*toolmeshv1.ExecutorServiceCallToolRequest, error), call func(context.Context, *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error)) func(context.Context) error {
		return func(ctx context.Context) error {
			req, err := build()
			if err != nil {
				return err
			}
			resp, err := call(ctx, req)
			if err != nil {
				return err
			}
			if resp.GetIsError() {
				return fmt.Errorf("tool error: %v", resp.GetContent())
			}
			if c := resp.GetContent(); len(c) == 0 || c[0].GetText() != "5" {
				return fmt.Errorf("unexpected result %v", c)
			}
			return nil
		}
	}
	callWith := func(call func(context.Context, *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error)) func(context.Context) error {
		return callAs(asJSON, call)
	}
	note := "generated gRPC client → executor → held mcp-go session"
	if tune.shipped {
		note += " (gRPC server and client as toolmesh ships them: internal/server)"
	} else if tune.workers > 0 || tune.staticWindow {
		note += fmt.Sprintf(" (gRPC NumStreamWorkers %d, static windows %v)", tune.workers, tune.staticWindow)
	}
	s := &scenario{
		transport: tr,
		name:      name,
		protocol:  protocol,
		note:      note,
		call: callWith(func(ctx context.Context, req *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
			return ex.CallTool(ctx, req)
		}),
	}
	inproc := &scenario{
		transport: tr,
		name:      strings.Replace(name, "executor-grpc", "executor-inproc", 1),
		protocol:  protocol,
		note:      "the same executor's CallTool handler called in-process: everything but the gRPC hop",
		call:      callWith(svc.CallTool),
	}
	structs := &scenario{
		transport: tr,
		name:      strings.Replace(name, "executor-grpc", "executor-grpc-struct", 1),
		protocol:  protocol,
		note:      "the executor-grpc scenario with the arguments as a google.protobuf.Struct (callers before arguments_json)",
		call: callAs(asStruct, func(ctx context.Context, req *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
			return ex.CallTool(ctx, req)
		}),
	}
	hc := healthpb.NewHealthClient(conn)
	h := &scenario{
		name: "grpc-health",
		note: "bare grpc.health.v1 Check, same gRPC server and connection",
		call: func(ctx context.Context) error {
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		},
	}
	return &executorScenario{scenario: s, health: h, inproc: inproc, structs: structs, close: closeAll}, nil
}
