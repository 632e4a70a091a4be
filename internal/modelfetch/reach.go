package modelfetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
)

// ErrUnreachable: the hub (or the server its redirect named) could not be connected to at all:
// its name does not resolve, the connection is refused or times out, there is no route. A pull
// whose first request meets it gives up at once instead of retrying, since the usual causes
// (no network, a wrong HF_ENDPOINT) outlast any retry; later in a pull it is retried like a
// cut. It is not Permanent: the network may come back.
var ErrUnreachable = errors.New("cannot reach the hub")

// UnreachableError says which server could not be reached and why, in words: Go's own error
// quotes the whole URL (and "dial tcp 127.0.0.1:1: connect:"), where one host says it. It
// matches ErrUnreachable.
type UnreachableError struct {
	// Server is "the hub at HOST" or "the download server HOST" (where the hub redirected).
	Server string
	// Cause is why, in a few words: "connection refused", "no such host".
	Cause string
	// Err is the transport's error, without the URL.
	Err error
}

func (e *UnreachableError) Error() string   { return "cannot reach " + e.Server + ": " + e.Cause }
func (e *UnreachableError) Unwrap() error   { return e.Err }
func (e *UnreachableError) Is(t error) bool { return t == ErrUnreachable }

// transportError is the error of a request that got no HTTP answer: an *UnreachableError when
// the connection itself failed, else the error without the URL Go quotes in it (bare).
func (f *Fetcher) transportError(r Ref, method, target string, err error) error {
	if cause, ok := dialCause(err); ok {
		return fmt.Errorf("%s: %w", r, &UnreachableError{Server: f.server(target), Cause: cause, Err: bare(err)})
	}
	u, _ := url.Parse(target)
	host := target
	if u != nil {
		host = u.Host
	}
	return fmt.Errorf("%s: %s to %s: %w", r, method, host, bare(err))
}

// server names the server of target for messages: the hub by its host, else the server the
// hub's redirect sent the download to. No path, query or credentials: the signed query of a
// CDN's URL is a secret, and the path is the reference the message already names.
func (f *Fetcher) server(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return "the hub"
	}
	if f.sameOrigin(u) {
		return "the hub at " + u.Host
	}
	return "the download server " + u.Host
}

// dialCause says in a few words why a connection could not be made, and whether err is that
// (rather than a server that was reached and then hung up or answered badly).
func dialCause(err error) (string, bool) {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		switch {
		case dns.IsNotFound:
			return "no such host", true
		case dns.IsTimeout:
			return "the DNS lookup timed out", true
		}
		return "the DNS lookup failed: " + dns.Err, true
	}
	var op *net.OpError
	if !errors.As(err, &op) || (op.Op != "dial" && op.Op != "proxyconnect") {
		return "", false
	}
	proxy := ""
	if op.Op == "proxyconnect" {
		proxy = " (through the proxy in HTTPS_PROXY)"
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused" + proxy, true
	case errors.Is(err, syscall.ENETUNREACH):
		return "network is unreachable" + proxy, true
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "no route to host" + proxy, true
	case errors.Is(err, context.DeadlineExceeded), op.Timeout():
		return "no answer to the connection (timed out)" + proxy, true
	}
	// What is left (a refused socket, a reset while connecting) in the system's words.
	msg := op.Err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg + proxy, true
}
