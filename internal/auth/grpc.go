package auth

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// healthPrefix is exempt so load balancers and Kubernetes probes need no token.
const healthPrefix = "/grpc.health.v1.Health/"

// ServerOptions are the options that install the Guard's interceptors on a gRPC server:
// server.NewGRPC(addr, logger, drain, guard.ServerOptions()...) runs them after its panic
// recovery and call log. With auth off they are nil, so an unguarded server pays nothing.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	if !g.Enabled() {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(g.StreamInterceptor()),
	}
}

// UnaryInterceptor checks the "authorization" metadata ("Bearer TOKEN") of every call except
// grpc.health.v1.Health's: codes.Unauthenticated when it is missing or wrong,
// codes.ResourceExhausted with a "retry-after" header (whole seconds) when the token is over
// its rate limit. (The "www-authenticate: Bearer" header of a refused call is for the REST
// gateway.) The handler's context carries the token's name for Name.
func (g *Guard) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if !g.Enabled() || strings.HasPrefix(info.FullMethod, healthPrefix) {
			return next(ctx, req)
		}
		i, name, d := g.admitGRPC(ctx, info.FullMethod)
		if d != nil {
			_ = grpc.SetHeader(ctx, d.header())
			return nil, status.Error(d.code, d.message)
		}
		defer g.leave(i)
		return next(withName(ctx, name), req)
	}
}

// StreamInterceptor is UnaryInterceptor for streaming calls.
func (g *Guard) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
		if !g.Enabled() || strings.HasPrefix(info.FullMethod, healthPrefix) {
			return next(srv, ss)
		}
		i, name, d := g.admitGRPC(ss.Context(), info.FullMethod)
		if d != nil {
			_ = ss.SetHeader(d.header())
			return status.Error(d.code, d.message)
		}
		defer g.leave(i)
		return next(srv, &namedStream{ServerStream: ss, ctx: withName(ss.Context(), name)})
	}
}

func (g *Guard) admitGRPC(ctx context.Context, method string) (int, string, *denial) {
	md, _ := metadata.FromIncomingContext(ctx)
	// A call the REST gateway forwards comes from loopback for every REST client; Guard.HTTP
	// has checked that client by its own address already.
	client := ""
	p, havePeer := peer.FromContext(ctx)
	if !g.fromGateway(md) && havePeer {
		client = clientKey(p.Addr.String())
	}
	i, name, d := g.admit(md.Get("authorization"), client, true)
	if d != nil {
		attrs := []any{"method", method}
		if havePeer {
			attrs = append(attrs, "remote", p.Addr.String())
		}
		// Calls from the REST gateway come from loopback; the gateway adds the client's address
		// (as the client's own X-Forwarded-For claims, so for reading, not for trusting).
		if fwd := md.Get("x-forwarded-for"); len(fwd) > 0 {
			attrs = append(attrs, "forwarded_for", strings.Join(fwd, ", "))
		}
		g.logDenial(ctx, d, attrs...)
	}
	return i, name, d
}

// header is the response header metadata of a refused call: what the HTTP response would
// carry, so the REST gateway can pass it on (see OutgoingHeaderMatcher).
func (d *denial) header() metadata.MD {
	if d.code == codes.ResourceExhausted {
		return metadata.Pairs("retry-after", strconv.Itoa(d.retry))
	}
	return metadata.Pairs("www-authenticate", "Bearer")
}

// namedStream gives the handler a context that carries the token's name.
type namedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *namedStream) Context() context.Context { return s.ctx }
