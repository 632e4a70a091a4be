// Package server holds the gRPC and HTTP listeners every toolmesh target shares:
// health, reflection, panic recovery, request logs and graceful stop.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/redact"
)

const window = 1 << 20

// MaxRecvMsgSize bounds one message a toolmesh client accepts from another toolmesh service.
// The executor sends its whole catalog in one message (the WatchTools snapshot, the ListTools
// answer), about 1 KB a tool in protobuf (970 bytes for a BFCL-sized tool with four
// parameters), so grpc-go's default 4 MiB stops at ~4,000 tools: the retriever could never
// sync and /v1/tools failed. 256 MiB holds ~270,000 such tools, far past any mesh we expect,
// while still refusing a length prefix that would make us allocate up to 2 GiB. The servers
// send without limit (grpc-go's default is MaxInt32) and keep the default 4 MiB on what they
// receive: no request between our services comes near it.
const MaxRecvMsgSize = 256 << 20

// MaxConcurrentStreams bounds the calls one client connection may have open at once on every
// toolmesh gRPC server (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). grpc-go's default is no bound
// (2^32-1): one connection could make a server hold any number of handlers and their stream
// state. A call over the bound is not refused: grpc-go clients wait until one of the
// connection's calls ends. Our own clients put all their calls to one peer on one connection
// (the REST gateway every REST request, the api every tool call to an executor), so the bound
// must sit above the most work one api has in flight: 250 queries (Go's own HTTP/2 server
// allows 250 streams) each running up to 4 tool calls at once (api.max-parallel-calls'
// default) is 1,000. A caller may pass grpc.MaxConcurrentStreams to NewGRPC for another bound.
const MaxConcurrentStreams = 1000

// maxConnectionAge is how long a client may keep one connection to a toolmesh gRPC server.
// Then the server asks it to reconnect (an HTTP/2 GOAWAY; calls in flight finish on the old
// connection, grpc-go adds ±10% jitter), and the client looks up the server's name again: a
// client of a headless Service only learns about a replica added since it resolved the name
// when it looks again, and without this it would keep spreading calls over the old replicas
// for as long as they stay up. Five minutes bounds that staleness at a cost of one reconnect
// per client and server every five minutes. A variable so that a test can shorten it.
var maxConnectionAge = 5 * time.Minute

// DialOptions are the client options for calls between toolmesh services: plaintext over a
// trusted network or loopback, with the same fixed windows as the servers and room for a
// catalog of many thousand tools in one message. With mutual TLS, a grpc.WithTransportCredentials
// (ClientTLS) after them replaces the plaintext.
func DialOptions() []grpc.DialOption { return dialOptions("") }

// DialOptionsFor are DialOptions for a client of one toolmesh service (its full gRPC name,
// toolmeshv1.RetrieverService_ServiceDesc.ServiceName and the like) at target. When target can
// name several replicas (an ipv4: or ipv6: list of more than one address, a dns: name), the
// client watches each replica's grpc.health.v1 status of service and sends calls only to
// replicas reporting SERVING: a retriever whose index has not synced or an executor that drains
// gets none while another replica can answer. When none is SERVING, a call fails at once with
// UNAVAILABLE ("... health check failed. status=NOT_SERVING"). A target of one address is not
// watched: its calls reach it and get its own answer (the retriever's "not synced yet"), which
// says more, and there is no other replica to prefer.
func DialOptionsFor(service, target string) []grpc.DialOption {
	if !Replicated(target) {
		service = ""
	}
	return dialOptions(service)
}

// dialOptions are DialOptions, with client-side health checking of healthOf when it is not empty.
func dialOptions(healthOf string) []grpc.DialOption {
	// A name that resolves to several executors or retrievers spreads calls over all of them
	// instead of pinning every call to the first.
	config := `{"loadBalancingConfig":[{"round_robin":{}}]}`
	if healthOf != "" {
		// The health check client is registered by importing google.golang.org/grpc/health,
		// which this package does for its health server.
		config = fmt.Sprintf(`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":%q}}`, healthOf)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(window), grpc.WithStaticConnWindowSize(window),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRecvMsgSize)),
		grpc.WithDefaultServiceConfig(config),
		// "ipv4:ADDR,ADDR" lists replicas by address (resolver.go).
		grpc.WithResolvers(addressList{scheme: "ipv4"}, addressList{scheme: "ipv6"}),
		// A replica that restarts rejoins within seconds, not grpc-go's default of up to 2 min.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: 5 * time.Second}),
	}
}

// reconnectBackoff is how often a client tries a replica that went away again: from 200 ms,
// up to every 3 s.
var reconnectBackoff = backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second}

// GRPC is one gRPC listener with grpc.health.v1 and reflection registered.
type GRPC struct {
	Server *grpc.Server
	Health *health.Server

	lis    net.Listener
	logger *slog.Logger
	drain  time.Duration
	force  <-chan struct{}
}

// ForceOn makes a drain end at once when force is closed (a second stop signal).
func (g *GRPC) ForceOn(force <-chan struct{}) { g.force = force }

// NewGRPC binds addr at once, so a port in use fails at start-up rather than later. addr is
// host:port, or unix:PATH for a Unix socket only its owner may connect to (mode 0600; the
// directory it is in must keep others out too). drain bounds how long Run waits for in-flight
// calls once its context ends.
//
// opts are added after the server's own. Interceptors given with grpc.ChainUnaryInterceptor and
// grpc.ChainStreamInterceptor (as auth.Guard.ServerOptions does) run inside panic recovery and
// the call log, so a call they refuse is still logged and a panic in them is recovered. Do not
// use grpc.UnaryInterceptor or grpc.StreamInterceptor: gRPC runs those outside the chain.
func NewGRPC(addr string, logger *slog.Logger, drain time.Duration, opts ...grpc.ServerOption) (*GRPC, error) {
	if addr == "" {
		// net.Listen would pick a port on every interface.
		return nil, errors.New("listen grpc: no address given")
	}
	lis, err := listen(addr)
	if err != nil {
		return nil, fmt.Errorf("listen grpc %s: %w", addr, err)
	}
	codec := newRequestCodec()
	opts = append([]grpc.ServerOption{
		grpc.ForceServerCodecV2(codec),
		grpc.ChainUnaryInterceptor(unaryRecover(logger), unaryRedact, unaryLog(logger), codec.unary),
		grpc.ChainStreamInterceptor(streamRecover(logger), streamRedact, streamLog(logger), codec.stream),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: maxConnectionAge}),
		// A pool of workers instead of a new goroutine per RPC: a tool call runs deep mcp-go
		// stacks, and a fresh goroutine grows its stack on every call.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		// Fixed windows turn off the BDP estimator, whose PING/ACK lands in the middle of
		// every short call; our messages are small, so 1 MiB never limits them.
		grpc.StaticStreamWindowSize(window), grpc.StaticConnWindowSize(window),
	}, opts...)
	s := grpc.NewServer(opts...)
	h := health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	reflection.Register(s)
	return &GRPC{Server: s, Health: h, lis: lis, logger: logger, drain: drain}, nil
}

// ServeRegistered reports every service registered on the server, but health and reflection
// themselves, as SERVING: what a target reports to health is what it registered.
func (g *GRPC) ServeRegistered() { g.SetRegistered(true) }

// SetRegistered reports every service registered on the server, but health and reflection
// themselves, as SERVING or NOT_SERVING.
func (g *GRPC) SetRegistered(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for name := range g.Server.GetServiceInfo() {
		if name == healthpb.Health_ServiceDesc.ServiceName || strings.HasPrefix(name, "grpc.reflection.") {
			continue
		}
		g.Health.SetServingStatus(name, st)
	}
}

// Addr is the bound address (useful when addr asked for port 0), as a client dials it:
// host:port or unix:PATH.
func (g *GRPC) Addr() string { return addrOf(g.lis) }

// Run serves until ctx ends, then reports NOT_SERVING, drains in-flight calls for at most
// the drain deadline and force-stops what is left.
func (g *GRPC) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- g.Server.Serve(g.lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve grpc %s: %w", g.Addr(), err)
	case <-ctx.Done():
	}
	g.Health.Shutdown()
	done := make(chan struct{})
	go func() { g.Server.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(g.drain):
		g.logger.Warn("grpc drain deadline passed, forcing stop", "addr", g.Addr(), "drain", g.drain)
		g.Server.Stop()
		<-done
	case <-g.force:
		g.logger.Warn("stopping at once: calls in flight are cut", "addr", g.Addr())
		g.Server.Stop()
		<-done
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve grpc %s: %w", g.Addr(), err)
	}
	return nil
}

// unaryRedact masks URL credentials in the message of every error status a server returns
// (an MCP server's URL with ?api_key=... inside a connection error), whatever handler made it:
// a status message is shown to clients, REST users and the console.
func unaryRedact(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	return resp, redactStatus(err)
}

func streamRedact(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	return redactStatus(next(srv, ss))
}

// redactStatus keeps the code and details of err and masks its message.
func redactStatus(err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	msg := redact.Text(st.Message())
	if msg == st.Message() {
		return err
	}
	p := st.Proto()
	p.Message = msg
	return status.FromProto(p).Err()
}

func unaryRecover(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				logger.Error("panic in grpc handler", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return next(ctx, req)
	}
}

func streamRecover(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				logger.Error("panic in grpc stream handler", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return next(srv, ss)
	}
}

// unaryLog logs failed calls at warn and the rest at debug; arguments and results are never logged.
func unaryLog(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		code := status.Code(err)
		level := slog.LevelDebug
		if code != codes.OK && code != codes.NotFound && code != codes.InvalidArgument {
			level = slog.LevelWarn
		}
		if logger.Enabled(ctx, level) {
			logger.Log(ctx, level, "grpc call", "method", info.FullMethod, "code", code.String(), "duration", time.Since(start))
		}
		return resp, err
	}
}

// streamLog logs a stream when it ends, like unaryLog. A cancelled stream is the normal end of
// a watch whose client went away, so it stays at debug with the successes.
func streamLog(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
		start := time.Now()
		err := next(srv, ss)
		code := status.Code(err)
		level := slog.LevelDebug
		// A stream the server ends because it is stopping (a watch) is no problem.
		if code != codes.OK && code != codes.NotFound && code != codes.InvalidArgument && code != codes.Canceled &&
			errreason.Of(err) != errreason.Stopping {
			level = slog.LevelWarn
		}
		ctx := ss.Context()
		if logger.Enabled(ctx, level) {
			logger.Log(ctx, level, "grpc stream", "method", info.FullMethod, "code", code.String(), "duration", time.Since(start))
		}
		return err
	}
}
