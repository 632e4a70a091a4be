// Package serve runs an mcp-go server over the MCP transports toolmesh
// supports: the legacy HTTP+SSE transport, streamable HTTP, and stdio.
//
// Over HTTP one handler serves both HTTP transports at once (SSE at /sse with
// messages posted to /message, streamable HTTP at /mcp), behind the MCP
// spec's DNS-rebinding rule: a request whose Origin header is not allowed is
// answered 403.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/webguard"
)

// Transports accepted in Options.Transport.
const (
	TransportSSE            = "sse"
	TransportStreamableHTTP = "streamable-http"
	TransportStdio          = "stdio"
)

// Paths served by Handler.
const (
	SSEPath            = "/sse"
	MessagePath        = "/message"
	StreamableHTTPPath = "/mcp"
)

// DefaultAddr is the listen address used when Options.Addr is empty: the IPv4
// loopback interface on a port chosen by the system.
const DefaultAddr = "127.0.0.1:0"

// DefaultShutdownTimeout bounds the graceful shutdown when
// Options.ShutdownTimeout is zero.
const DefaultShutdownTimeout = 5 * time.Second

// Options configure Handler and Run. The zero value serves both HTTP
// transports on DefaultAddr, accepting browser requests only from loopback
// origins, and logs nothing.
type Options struct {
	// Transport is TransportSSE, TransportStreamableHTTP or TransportStdio;
	// empty means TransportSSE. Both HTTP transports are always served
	// together; Transport only decides which URL is announced.
	Transport string

	// Addr is the host:port to listen on for the HTTP transports. Empty means
	// DefaultAddr; an empty host (":7801") means 127.0.0.1, so listening on
	// every interface must be asked for explicitly ("0.0.0.0:7801").
	Addr string

	// AllowedOrigins lists the exact browser origins ("https://app.example",
	// scheme://host[:port]) allowed to call the server; "*" allows any.
	// Empty means http and https origins on localhost, 127.0.0.1 and [::1],
	// on any port. Requests without an Origin header (non-browser clients)
	// are always allowed.
	AllowedOrigins []string

	// Logger receives the server's logs; nil discards them. With
	// TransportStdio it must not write to Stdout.
	Logger *slog.Logger

	// OnListen, when set, is called with the bound address once the HTTP
	// listener is open and before requests are served. Use it to learn the
	// port when Addr ends in ":0".
	OnListen func(addr net.Addr)

	// Stdin and Stdout are the streams of TransportStdio; nil means os.Stdin
	// and os.Stdout.
	Stdin  io.Reader
	Stdout io.Writer

	// ShutdownTimeout bounds the graceful shutdown of the HTTP server once
	// the context ends; zero means DefaultShutdownTimeout. Connections still
	// open after it are closed.
	ShutdownTimeout time.Duration

	// Telemetry, when set, traces every tools/call with a SERVER span
	// "tools/call {tool}" continuing the caller's trace (from the request's
	// params._meta, else its HTTP headers) and records
	// mcp.server.operation.duration; the tool handler's context carries the
	// span. Handler and Run install it on the server they are given (as
	// mcp-go hooks and a tool handler middleware); nil traces nothing.
	Telemetry *telemetry.Service
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// URL returns the URL a client of transport should connect to when the
// server listens on addr: http://ADDR/sse for TransportSSE (and the empty
// transport), http://ADDR/mcp for TransportStreamableHTTP, and "" for stdio.
// An unspecified listen IP (0.0.0.0, ::) is replaced by the loopback address.
func URL(addr net.Addr, transport string) string {
	host := addr.String()
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		loop := "127.0.0.1"
		if ta.IP.To4() == nil {
			loop = "::1"
		}
		host = net.JoinHostPort(loop, fmt.Sprint(ta.Port))
	}
	switch transport {
	case "", TransportSSE:
		return "http://" + host + SSEPath
	case TransportStreamableHTTP:
		return "http://" + host + StreamableHTTPPath
	}
	return ""
}

// Handler returns an http.Handler serving s over both HTTP transports: SSE at
// /sse (messages at /message) and streamable HTTP at /mcp. Requests whose
// Origin header is not allowed by opts.AllowedOrigins are answered 403.
//
// The SSE endpoint event carries a path relative to the host the client
// connected to, so the handler works on any address and behind any mount
// host without configuration. Open SSE and streamable-HTTP streams are
// long-lived: http.Server.Shutdown alone waits for them until its deadline;
// Run ends them first.
func Handler(s *server.MCPServer, opts Options) http.Handler {
	return newHandler(s, opts)
}

type handler struct {
	mux     *http.ServeMux
	sse     *server.SSEServer
	stream  *server.StreamableHTTPServer
	guarded http.Handler // the web guard in front of serve
	log     *slog.Logger
	traced  bool // requests carry their peer for the tools/call spans
}

func newHandler(s *server.MCPServer, opts Options) *handler {
	log := opts.logger()
	instrument(s, opts.Telemetry)
	h := &handler{
		mux: http.NewServeMux(),
		// No WithBaseURL: the endpoint event is then the relative
		// "/message?sessionId=...", which clients resolve against the URL
		// they opened the stream with, so it is right for whatever
		// host:port was bound or used to reach us (mcp-go's client even
		// rejects an absolute endpoint whose host differs from the one it
		// connected to, e.g. localhost vs 127.0.0.1).
		sse: server.NewSSEServer(s,
			server.WithSSEEndpoint(SSEPath),
			server.WithMessageEndpoint(MessagePath),
		),
		stream: server.NewStreamableHTTPServer(s,
			server.WithStreamableHTTPLogger(log),
			server.WithSessionIdManager(newSessionIDs()),
		),
		log:    log,
		traced: opts.Telemetry != nil,
	}
	h.guarded = newGuard(opts.AllowedOrigins, log).Handler(http.HandlerFunc(h.serve), nil)
	h.mux.Handle(SSEPath, h.sse.SSEHandler())
	h.mux.Handle(MessagePath, h.sse.MessageHandler())
	h.mux.Handle(StreamableHTTPPath, h.stream)
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.guarded.ServeHTTP(w, r) }

// newGuard is the web guard of the shipped MCP servers (internal/webguard, the api's): a
// browser page may call them only from their own origin, from allowed (exact origins, "*"
// for any; none given: loopback origins on any port, for the MCP Inspector and other local
// apps), and with CORS for MCP's headers; another site's page is refused, and a POST must be
// JSON. They are reached under any name (compose's service names, a pod's), so the Host check
// is off. An entry that is not an origin is logged and ignored.
func newGuard(allowed []string, log *slog.Logger) *webguard.Guard {
	cfg := webguard.Config{
		AllowedHosts:    []string{"*"},
		LoopbackOrigins: len(allowed) == 0,
		CORS: webguard.CORS{ExposeHeaders: "Mcp-Session-Id, Mcp-Protocol-Version",
			AllowMethods: "GET, POST, DELETE, OPTIONS", AllowRequestedHeaders: true},
	}
	for _, o := range allowed {
		one := webguard.Config{AllowedOrigins: []string{o}}
		if err := one.Validate(); err != nil {
			log.Warn("allowed origin ignored", "err", err)
			continue
		}
		cfg.AllowedOrigins = append(cfg.AllowedOrigins, o)
	}
	g, err := webguard.New(cfg, log)
	if err != nil {
		panic("serve: web guard: " + err.Error()) // every entry was checked above
	}
	return g
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request) {
	if h.traced {
		r = r.WithContext(withPeer(r.Context(), httpPeer(r)))
	}
	h.mux.ServeHTTP(w, r)
}

// closeSessions ends the open SSE and streamable-HTTP streams so that a
// graceful shutdown does not wait for them.
func (h *handler) closeSessions(ctx context.Context) {
	h.sse.CloseSessions()
	h.stream.CloseSessions(ctx)
}

// Run serves s until ctx ends, over opts.Transport. For the HTTP transports
// it listens on opts.Addr, serves Handler, and on cancellation closes the
// open streams and shuts the server down gracefully within
// opts.ShutdownTimeout. For stdio it serves opts.Stdin/opts.Stdout and
// returns when ctx ends or the input is closed. A stop caused by ctx is not
// an error.
//
// mcp-go keeps the stdio session in a package variable, so only one stdio
// Run may be active per process; and when ctx ends first, mcp-go's reader
// goroutine stays blocked on Stdin until it is closed or yields a line.
func Run(ctx context.Context, s *server.MCPServer, opts Options) error {
	switch opts.Transport {
	case TransportStdio:
		return runStdio(ctx, s, opts)
	case "", TransportSSE, TransportStreamableHTTP:
		return runHTTP(ctx, s, opts)
	}
	return fmt.Errorf("unknown MCP transport %q (want %s, %s or %s)", opts.Transport, TransportSSE, TransportStreamableHTTP, TransportStdio)
}

// listenAddr applies the defaults of Options.Addr.
func listenAddr(addr string) (string, error) {
	if addr == "" {
		return DefaultAddr, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

func runHTTP(ctx context.Context, s *server.MCPServer, opts Options) error {
	log := opts.logger()
	addr, err := listenAddr(opts.Addr)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if !isLoopback(ln.Addr()) {
		log.Warn("MCP server listens on a non-loopback address; anyone who can reach it can call its tools", "addr", ln.Addr().String())
	}

	h := newHandler(s, opts)
	// Request contexts derive from baseCtx, which is cancelled only when a
	// graceful shutdown runs out of time.
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	transport := opts.Transport
	if transport == "" {
		transport = TransportSSE
	}
	log.Info("MCP server listening",
		"transport", transport,
		"url", URL(ln.Addr(), transport),
		"sse", URL(ln.Addr(), TransportSSE),
		"streamable_http", URL(ln.Addr(), TransportStreamableHTTP))
	if opts.OnListen != nil {
		opts.OnListen(ln.Addr())
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		h.closeSessions(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	timeout := opts.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultShutdownTimeout
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h.closeSessions(sctx)
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("MCP server did not stop in time; closing connections", "timeout", timeout, "err", err)
		cancelBase()
		_ = srv.Close()
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("MCP server stopped", "addr", ln.Addr().String())
	return nil
}

func runStdio(ctx context.Context, s *server.MCPServer, opts Options) error {
	log := opts.logger()
	var in io.Reader = os.Stdin
	if opts.Stdin != nil {
		in = opts.Stdin
	}
	var out io.Writer = os.Stdout
	if opts.Stdout != nil {
		out = opts.Stdout
	}
	instrument(s, opts.Telemetry)
	ss := server.NewStdioServer(s)
	ss.SetErrorLogger(slog.NewLogLogger(log.Handler(), slog.LevelError))
	if opts.Telemetry != nil {
		ss.SetContextFunc(func(ctx context.Context) context.Context { return withPeer(ctx, stdioPeer) })
	}
	log.Info("MCP server serving on stdio")
	err := ss.Listen(ctx, in, out)
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("serve stdio: %w", err)
	}
	return nil
}

func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
