package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"sync/atomic"
)

// errorBodyLimit bounds the body of a non-2xx HTTP answer: mcp-go reads all
// of it into the error message, and a proxy's error page says what it has to
// say in far less.
const errorBodyLimit = 64 << 10

// answerProbe watches the HTTP answer to one request (tools/call, tools/list)
// sent with a context made by withAnswerProbe. limitBodies applies the limit
// to the body, and records that it tripped, because mcp-go drops read errors
// of an SSE-framed answer ("unexpected nil response"); it also records that
// the body ended cleanly, which tells a malformed answer from a broken
// connection (see brokenBy).
type answerProbe struct {
	limit    int64 // 0: none
	tripped  atomic.Bool
	size     atomic.Int64 // the Content-Length when that alone tripped it; else 0
	complete atomic.Bool  // a body was read to its clean end
}

type answerProbeKey struct{}

func withAnswerProbe(ctx context.Context, limit int) (context.Context, *answerProbe) {
	p := &answerProbe{limit: int64(limit)}
	return context.WithValue(ctx, answerProbeKey{}, p), p
}

// brokenBy reports whether err, the failure of the request p watched, means
// the connection is gone. A JSON-RPC answer cut short ("unexpected EOF") in a
// body that ended cleanly is a malformed answer: the server is still there,
// and reconnecting would only make its tools unavailable for a while.
func (p *answerProbe) brokenBy(err error) bool {
	if !isConnError(err) {
		return false
	}
	var ne net.Error
	return !(p.complete.Load() && errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &ne))
}

// err returns the error for tool when the limit tripped, else nil.
func (l *answerProbe) err(tool string) error {
	if !l.tripped.Load() {
		return nil
	}
	if n := l.size.Load(); n > 0 {
		return &resultTooLargeError{tool: tool, size: n, limit: int(l.limit)}
	}
	return &resultTooLargeError{tool: tool, size: l.limit, over: true, limit: int(l.limit)}
}

// limitBodies stops reading a tools/call answer at its resultLimit, so a
// server answering with 64 MiB costs the executor at most the limit. An
// event stream is limited per event, not per stream: it may carry progress
// notifications before the result.
type limitBodies struct{ next http.RoundTripper }

func (t limitBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, errorBodyLimit), resp.Body}
		return resp, nil
	}
	l, ok := r.Context().Value(answerProbeKey{}).(*answerProbe)
	if !ok {
		return resp, nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	lb := &limitedBody{rc: resp.Body, l: l, perEvent: mt == "text/event-stream"}
	if l.limit > 0 && !lb.perEvent && resp.ContentLength > l.limit {
		l.size.Store(resp.ContentLength)
		lb.trip()
	}
	resp.Body = lb
	return resp, nil
}

var errBodyTooLarge = errors.New("response over executor.max-result-bytes")

type limitedBody struct {
	rc       io.ReadCloser
	l        *answerProbe
	perEvent bool
	n        int64 // bytes of the body, or of the current event
	lineLen  int   // bytes of the current line, without CR and LF
	err      error
}

func (b *limitedBody) trip() {
	b.l.tripped.Store(true)
	b.err = fmt.Errorf("%w (%d bytes)", errBodyTooLarge, b.l.limit)
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	if !b.perEvent {
		b.n += int64(n)
	} else {
		for _, c := range p[:n] {
			b.n++
			switch c {
			case '\n':
				if b.lineLen == 0 {
					b.n = 0 // a blank line ends the event
				}
				b.lineLen = 0
			case '\r':
			default:
				b.lineLen++
			}
			if b.l.limit > 0 && b.n > b.l.limit {
				break
			}
		}
	}
	if b.l.limit > 0 && b.n > b.l.limit {
		b.trip()
		return 0, b.err
	}
	if err == io.EOF {
		b.l.complete.Store(true)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
