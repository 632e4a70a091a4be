package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// Local serves one target's gRPC services to callers in the same process without a listener:
// no socket, no HTTP/2, no protobuf encoding (`toolmesh up`). Nothing outside the process can
// reach it, so nothing can get past the api's tokens and policy through it.
//
// A call runs what a call to NewGRPC's server runs: the same interceptors (panic recovery,
// masked error statuses, the call log), the target's stats handler (its server span and
// rpc.server metrics) and, on the caller's side, the caller's stats handler (client span and
// metrics; it puts the trace context in the outgoing metadata, as over gRPC). The handler sees
// what a gRPC server gives it: the caller's deadline and cancellation, the caller's outgoing
// metadata as incoming, a peer (network "local"), grpc.Method, grpc.SetHeader and
// grpc.SetTrailer (back to the caller's grpc.Header and grpc.Trailer options), and none of the
// caller's context values. Errors reach the caller as a gRPC client gets them: a status (a
// plain error becomes Unknown, a context error Canceled or DeadlineExceeded), never the
// handler's own error value.
//
// Messages are handed over, not copied: a handler keeps no request and returns no message it
// changes later, and a caller changes neither its request after the call nor a response.
// (Over gRPC each side had its own copy.) Message size limits do not apply.
type Local struct {
	name   string
	logger *slog.Logger
	drain  time.Duration
	force  <-chan struct{}
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
	stats  stats.Handler // nil: none

	// services is written by RegisterService before the first call, then only read.
	services map[string]any

	mu       sync.Mutex
	stopping bool
	calls    sync.WaitGroup
}

// NewLocal is the in-process server of the target name; serverStats (telemetry's
// GRPCServerStats) may be nil. drain bounds how long Run waits for calls in flight once its
// context ends.
func NewLocal(name string, logger *slog.Logger, drain time.Duration, serverStats stats.Handler) *Local {
	return &Local{
		name: name, logger: logger, drain: drain, stats: serverStats, services: map[string]any{},
		// NewGRPC's chains without the request codec: nothing is decoded here.
		unary:  chainUnary(unaryRecover(logger), unaryRedact, unaryLog(logger)),
		stream: chainStream(streamRecover(logger), streamRedact, streamLog(logger)),
	}
}

// RegisterService makes Local a grpc.ServiceRegistrar: a service registers on it as on a
// grpc.Server.
func (l *Local) RegisterService(desc *grpc.ServiceDesc, impl any) {
	l.services[desc.ServiceName] = impl
}

// Service is the implementation registered for the full service name, nil when none is.
func (l *Local) Service(name string) any { return l.services[name] }

// ForceOn makes a drain end at once when force is closed (a second stop signal).
func (l *Local) ForceOn(force <-chan struct{}) { l.force = force }

// Addr is what the banner shows for it.
func (l *Local) Addr() string { return "in-process (no listener)" }

// Run waits until ctx ends, then refuses new calls (Unavailable, as a stopping gRPC server
// does) and waits for those in flight for at most the drain deadline. Their contexts are their
// callers': a caller that stops ends them.
func (l *Local) Run(ctx context.Context) error {
	<-ctx.Done()
	l.mu.Lock()
	l.stopping = true
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(l.drain):
		l.logger.Warn("in-process drain deadline passed; calls still in flight are left to their callers", "target", l.name, "drain", l.drain)
	case <-l.force:
	}
	return nil
}

// enter counts a call in, or refuses it once Run is stopping.
func (l *Local) enter() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping {
		return status.Error(codes.Unavailable, l.name+" is stopping")
	}
	l.calls.Add(1)
	return nil
}

// LocalClient calls a Local's services for one caller, with the caller's stats handler
// (telemetry's GRPCClientStats; nil: none).
type LocalClient struct {
	l     *Local
	stats stats.Handler
}

// Client is a client of l for a caller whose stats handler is clientStats.
func (l *Local) Client(clientStats stats.Handler) *LocalClient {
	return &LocalClient{l: l, stats: clientStats}
}

// Local is the server c calls.
func (c *LocalClient) Local() *Local { return c.l }

// localAddr is the peer address handlers see, and the banner's.
type localAddr struct{}

func (localAddr) Network() string { return "local" }
func (localAddr) String() string  { return "in-process" }

var localPeer = &peer.Peer{Addr: localAddr{}, LocalAddr: localAddr{}}

// transportStream is what grpc.Method, grpc.SetHeader and grpc.SetTrailer find in a handler's
// context.
type transportStream struct {
	method          string
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (t *transportStream) Method() string { return t.method }
func (t *transportStream) SetHeader(md metadata.MD) error {
	t.mu.Lock()
	t.header = metadata.Join(t.header, md)
	t.mu.Unlock()
	return nil
}
func (t *transportStream) SendHeader(md metadata.MD) error { return t.SetHeader(md) }
func (t *transportStream) SetTrailer(md metadata.MD) error {
	t.mu.Lock()
	t.trailer = metadata.Join(t.trailer, md)
	t.mu.Unlock()
	return nil
}

// deliver fills the caller's grpc.Header and grpc.Trailer options.
func (t *transportStream) deliver(opts []grpc.CallOption) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = t.header
		case grpc.TrailerCallOption:
			*o.TrailerAddr = t.trailer
		}
	}
}

// callContext is a handler's context: the caller's deadline and cancellation, and only the
// values a gRPC server would give it.
type callContext struct {
	context.Context // the caller's: Deadline, Done, Err
	values          context.Context
}

func (c callContext) Value(key any) any { return c.values.Value(key) }

// AfterFunc lets context.WithCancel and friends on a handler's context register with the
// caller's instead of starting a goroutine each.
func (c callContext) AfterFunc(f func()) func() bool { return context.AfterFunc(c.Context, f) }

// begin starts a call on the server's side: the client's stats, the handler's context and the
// server's stats. end finishes both sides with err (a status or nil).
func (c *LocalClient) begin(ctx context.Context, method string, server, client bool) (cctx, sctx context.Context, ts *transportStream, end func(error)) {
	start := time.Now()
	cctx = ctx
	if c.stats != nil {
		cctx = c.stats.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method})
		c.stats.HandleRPC(cctx, &stats.Begin{Client: true, BeginTime: start, IsClientStream: client, IsServerStream: server})
	}
	ts = &transportStream{method: method}
	values := peer.NewContext(grpc.NewContextWithServerTransportStream(context.Background(), ts), localPeer)
	if md, ok := metadata.FromOutgoingContext(cctx); ok {
		values = metadata.NewIncomingContext(values, md)
	}
	sctx = callContext{Context: cctx, values: values}
	ss := c.l.stats
	if ss != nil {
		sctx = ss.TagRPC(sctx, &stats.RPCTagInfo{FullMethodName: method})
		ss.HandleRPC(sctx, &stats.Begin{BeginTime: start, IsClientStream: client, IsServerStream: server})
	}
	return cctx, sctx, ts, func(err error) {
		now := time.Now()
		if ss != nil {
			ss.HandleRPC(sctx, &stats.End{BeginTime: start, EndTime: now, Error: err})
		}
		if c.stats != nil {
			c.stats.HandleRPC(cctx, &stats.End{Client: true, BeginTime: start, EndTime: now, Error: err})
		}
	}
}

// LocalUnary calls the unary method (its full name, "/toolmesh.v1.ExecutorService/CallTool")
// of c's server, whose handler is h, with req.
func LocalUnary[Req, Resp any](ctx context.Context, c *LocalClient, method string, req Req, h func(context.Context, Req) (Resp, error), opts ...grpc.CallOption) (Resp, error) {
	var zero Resp
	if err := ctx.Err(); err != nil {
		return zero, status.FromContextError(err).Err()
	}
	if err := c.l.enter(); err != nil {
		return zero, err
	}
	defer c.l.calls.Done()
	cctx, sctx, ts, end := c.begin(ctx, method, false, false)
	info := &grpc.UnaryServerInfo{Server: nil, FullMethod: method}
	resp, err := c.l.unary(sctx, req, info, func(ctx context.Context, req any) (any, error) { return h(ctx, req.(Req)) })
	err = asStatus(err)
	if err == nil && cctx.Err() != nil {
		// A gRPC client stops waiting at its deadline, whatever the handler does after.
		err = status.FromContextError(cctx.Err()).Err()
	}
	end(err)
	ts.deliver(opts)
	if err != nil {
		return zero, err
	}
	out, ok := resp.(Resp)
	if !ok { // a handler that returned nil, nil: gRPC cannot send that either
		return zero, status.Errorf(codes.Internal, "%s returned no response", method)
	}
	return out, nil
}

// asStatus is err as a gRPC client receives it: the status it carries, or grpc-go's mapping
// of a plain error (a context error to its code, anything else Unknown).
func asStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	return st.Err()
}

// LocalServerStream calls the server-streaming method of c's server, whose handler is h,
// with req: h runs in its own goroutine, its messages reach the caller's Recv in order, at
// most localStreamBuffer ahead of it (a gRPC stream's flow control holds a sender back too).
func LocalServerStream[Req, Resp any](ctx context.Context, c *LocalClient, method string, req Req, h func(Req, grpc.ServerStreamingServer[Resp]) error, opts ...grpc.CallOption) (grpc.ServerStreamingClient[Resp], error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if err := c.l.enter(); err != nil {
		return nil, err
	}
	// The handler ends with the caller's context, like a gRPC stream whose client is gone.
	ctx, cancel := context.WithCancel(ctx)
	cctx, sctx, ts, end := c.begin(ctx, method, true, false)
	s := &localStream[Resp]{ctx: cctx, sctx: sctx, ts: ts, cancel: cancel, msgs: make(chan *Resp, localStreamBuffer), done: make(chan struct{})}
	go func() {
		defer c.l.calls.Done()
		info := &grpc.StreamServerInfo{FullMethod: method, IsServerStream: true}
		err := c.l.stream(nil, s.server(), info, func(_ any, ss grpc.ServerStream) error {
			return h(req, serverStreamOf[Resp]{ss})
		})
		s.err = asStatus(err)
		end(s.err)
		close(s.done)
	}()
	return s, nil
}

// localStreamBuffer is how many messages a local stream's handler may send ahead of its caller.
const localStreamBuffer = 16

// localStream is both ends of one server-streaming call.
type localStream[Resp any] struct {
	ctx, sctx context.Context
	ts        *transportStream
	cancel    context.CancelFunc
	msgs      chan *Resp
	done      chan struct{} // closed when the handler has returned; err is set then
	err       error
}

// Recv is the next message; io.EOF once the handler returned nil and every message was read.
func (s *localStream[Resp]) Recv() (*Resp, error) {
	select {
	case m := <-s.msgs:
		return m, nil
	default:
	}
	select {
	case m := <-s.msgs:
		return m, nil
	case <-s.done:
		select { // a message sent just before the end
		case m := <-s.msgs:
			return m, nil
		default:
		}
		s.cancel()
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s *localStream[Resp]) Header() (metadata.MD, error) {
	s.ts.mu.Lock()
	defer s.ts.mu.Unlock()
	return s.ts.header, nil
}

func (s *localStream[Resp]) Trailer() metadata.MD {
	select {
	case <-s.done:
	default:
		return nil // as gRPC: only once the stream has ended
	}
	s.ts.mu.Lock()
	defer s.ts.mu.Unlock()
	return s.ts.trailer
}

func (s *localStream[Resp]) CloseSend() error         { return nil }
func (s *localStream[Resp]) Context() context.Context { return s.ctx }
func (s *localStream[Resp]) SendMsg(any) error {
	return errors.New("server-streaming call: the request was sent")
}
func (s *localStream[Resp]) RecvMsg(m any) error            { return errors.New("local stream: use Recv") }
func (s *localStream[Resp]) server() *localServerSide[Resp] { return &localServerSide[Resp]{s} }

// localServerSide is the handler's end of a localStream.
type localServerSide[Resp any] struct{ s *localStream[Resp] }

func (ss *localServerSide[Resp]) SetHeader(md metadata.MD) error  { return ss.s.ts.SetHeader(md) }
func (ss *localServerSide[Resp]) SendHeader(md metadata.MD) error { return ss.s.ts.SetHeader(md) }
func (ss *localServerSide[Resp]) SetTrailer(md metadata.MD)       { _ = ss.s.ts.SetTrailer(md) }
func (ss *localServerSide[Resp]) Context() context.Context        { return ss.s.sctx }
func (ss *localServerSide[Resp]) RecvMsg(any) error               { return io.EOF }

// SendMsg hands m (a *Resp) to the caller, waiting while the caller is localStreamBuffer
// messages behind; it fails once the caller is gone, as gRPC's Send does.
func (ss *localServerSide[Resp]) SendMsg(m any) error {
	msg, ok := m.(*Resp)
	if !ok {
		return status.Errorf(codes.Internal, "local stream: sending %T", m)
	}
	select {
	case ss.s.msgs <- msg:
		return nil
	case <-ss.s.sctx.Done():
		return status.FromContextError(ss.s.sctx.Err()).Err()
	}
}

// serverStreamOf gives a handler the typed Send of the (possibly wrapped) stream an
// interceptor passed on.
type serverStreamOf[Resp any] struct{ grpc.ServerStream }

func (s serverStreamOf[Resp]) Send(m *Resp) error { return s.SendMsg(m) }

// chainUnary runs interceptors outermost first, as grpc.ChainUnaryInterceptor does.
func chainUnary(is ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		for i := len(is) - 1; i >= 0; i-- {
			next, in := h, is[i]
			h = func(ctx context.Context, req any) (any, error) { return in(ctx, req, info, next) }
		}
		return h(ctx, req)
	}
}

// chainStream runs interceptors outermost first, as grpc.ChainStreamInterceptor does.
func chainStream(is ...grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		for i := len(is) - 1; i >= 0; i-- {
			next, in := h, is[i]
			h = func(srv any, ss grpc.ServerStream) error { return in(srv, ss, info, next) }
		}
		return h(srv, ss)
	}
}
