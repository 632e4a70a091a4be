package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"
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
	size     atomic.Int64 // the answer's Content-Length, when it has one over the limit; else 0
	cut      atomic.Int64 // the line limit, when lineCap replaced the answer
	complete atomic.Bool  // a body was read to its clean end
	// head holds the first limit bytes of the answer (of the current event, for an event
	// stream), from which a result is made when the limit trips (resultFromHead).
	mu   sync.Mutex
	head []byte
}

// keep appends p to the head, up to the limit.
func (l *answerProbe) keep(p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := int(l.limit) - len(l.head); room > 0 {
		l.head = append(l.head, p[:min(room, len(p))]...)
	}
}

// restart empties the head: a new event of a stream begins.
func (l *answerProbe) restart() {
	l.mu.Lock()
	l.head = l.head[:0]
	l.mu.Unlock()
}

// setHead gives the probe the head lineCap kept of an answer it dropped.
func (l *answerProbe) setHead(head []byte) {
	l.mu.Lock()
	l.head = head
	l.mu.Unlock()
}

// cutResult is the result made of the head when the limit tripped; ok is false when it did
// not trip, or the head holds no result. c says how it was cut (the caller sets limit and source).
func (l *answerProbe) cutResult() (res *mcp.CallToolResult, c *resultCut, ok bool) {
	if !l.tripped.Load() {
		return nil, nil, false
	}
	l.mu.Lock()
	head := l.head
	l.mu.Unlock()
	c = &resultCut{size: l.limit, over: true}
	if n := l.size.Load(); n > 0 {
		c.size, c.over = n, false
	} else if n := l.cut.Load(); n > 0 {
		c.size = n
	}
	res, ok = resultFromHead(head, c)
	return res, c, ok
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
	if n := l.cut.Load(); n > 0 {
		return &resultTooLargeError{tool: tool, size: n, over: true, limit: int(l.limit)}
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
		if h, ok := r.Context().Value(lineCapKey{}).(*hooks); ok {
			resp.Body = struct {
				io.Reader
				io.Closer
			}{newLineCap(resp.Body, h.maxLine, h), resp.Body}
		}
		return resp, nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	lb := &limitedBody{rc: resp.Body, l: l, perEvent: mt == "text/event-stream"}
	if l.limit > 0 && !lb.perEvent && resp.ContentLength > l.limit {
		// Read up to the limit all the same: the result is cut from those bytes.
		l.size.Store(resp.ContentLength)
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
		if b.l.limit > 0 {
			b.l.keep(p[:n])
		}
	} else {
		from := 0 // the bytes of the current event in p start here
		for i, c := range p[:n] {
			b.n++
			switch c {
			case '\n':
				if b.lineLen == 0 {
					b.n = 0 // a blank line ends the event
					b.l.restart()
					from = i + 1
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
		if b.l.limit > 0 {
			b.l.keep(p[from:n])
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

// droppedHeads holds the heads of the lines lineCap dropped, by the JSON id of the answer,
// until the call they answer takes them (hooks.after). A call that ended before its answer
// came never does: past maxDropped heads the oldest go, so they cannot pile up.
type droppedHeads struct {
	mu    sync.Mutex
	heads map[string][]byte
	order []string
}

// maxDropped bounds droppedHeads; each head is at most the server's largest result limit.
const maxDropped = 4

// Store keeps head as the answer to id.
func (d *droppedHeads) Store(id string, head []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.heads == nil {
		d.heads = map[string][]byte{}
	}
	if _, ok := d.heads[id]; !ok {
		d.order = append(d.order, id)
	}
	d.heads[id] = head
	for len(d.order) > maxDropped {
		delete(d.heads, d.order[0])
		d.order = d.order[1:]
	}
}

// Load is the head kept for id.
func (d *droppedHeads) Load(id string) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.heads[id]
	return h, ok
}

// LoadAndDelete takes the head kept for id.
func (d *droppedHeads) LoadAndDelete(id string) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.heads[id]
	if ok {
		delete(d.heads, id)
		d.order = slices.DeleteFunc(d.order, func(o string) bool { return o == id })
	}
	return h, ok
}

// lineCapKey marks the context of a legacy SSE connection, whose event
// stream is read through a lineCap.
type lineCapKey struct{}

// lineLimit is the longest line lineCap passes on: the larger of the result
// and the listing limits, because the line may be a tools/list answer too. A
// result between the two is still refused, by its size, after decoding
// (handler.go).
func lineLimit(cfg Config) int { return max(cfg.MaxResultBytes, cfg.MaxListBytes) }

// lineCap bounds the lines of a stream that carries the answers of many
// requests: stdio's stdout and the legacy SSE transport's event stream. A
// line longer than limit is not passed on: its middle is dropped as it
// arrives, and it is replaced with a JSON-RPC error answer to the same id,
// so one oversized answer costs the executor the limit, concerns its own call
// only (hooks.after gives the call the line's head, from which its result is
// cut, or fails it with RESOURCE_EXHAUSTED), and keeps the connection. The id is taken from the line's first bytes (before "result",
// as mcp-go and the Python SDK write it) or its last ones (the TypeScript
// SDK puts it last); a line with neither is dropped, and its call times out.
type lineCap struct {
	r        io.Reader
	limit    int
	h        *hooks
	rbuf     []byte
	line     []byte // the current line, while it is under the limit
	out      []byte // ready for the reader from off on
	off      int
	dropping bool   // the current line went over the limit
	head     []byte // first bytes of the dropped line: capKeep, or hooks.keepHead when larger
	tail     []byte // last bytes of the dropped line
	err      error
}

const capKeep = 512 // bytes kept of each end of a dropped line

func newLineCap(r io.Reader, limit int, h *hooks) *lineCap {
	return &lineCap{r: r, limit: limit, h: h, rbuf: make([]byte, 32<<10)}
}

func (c *lineCap) Read(p []byte) (int, error) {
	for c.off == len(c.out) {
		if c.err != nil {
			if len(c.line) > 0 && !c.dropping {
				c.out = append(c.out, c.line...) // an unterminated last line
				c.line = nil
				break
			}
			return 0, c.err
		}
		n, err := c.r.Read(c.rbuf)
		c.feed(c.rbuf[:n])
		c.err = err
	}
	n := copy(p, c.out[c.off:])
	c.off += n
	if c.off == len(c.out) {
		c.out, c.off = c.shrink(c.out), 0
	}
	return n, nil
}

func (c *lineCap) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i+1]
		}
		b = b[len(seg):]
		if !c.dropping {
			if need := len(c.line) + len(seg); need <= c.limit {
				if need > cap(c.line) {
					// Double: append grows large slices by 1.25x, which
					// allocates ~5x a 16 MiB line on the way.
					l := make([]byte, len(c.line), min(max(2*cap(c.line), need, 4<<10), c.limit))
					copy(l, c.line)
					c.line = l
				}
				c.line = append(c.line, seg...)
				if i >= 0 {
					c.out = append(c.out, c.line...)
					c.line = c.shrink(c.line)
				}
				continue
			}
			c.dropping = true
			keep := max(capKeep, c.h.keepHead)
			c.head = make([]byte, 0, min(keep, len(c.line)+len(seg)))
			c.head = append(c.head, c.line[:min(len(c.line), keep)]...)
			if len(c.head) < keep {
				c.head = append(c.head, seg[:min(len(seg), keep-len(c.head))]...)
			}
			c.tail = c.tail[:0]
			c.keepTail(c.line)
			c.line = c.shrink(c.line)
		}
		c.keepTail(seg)
		if i >= 0 {
			c.out = append(c.out, c.replacement()...)
			c.dropping = false
		}
	}
}

// shrink empties a line buffer, and lets a large one go: one huge answer
// should not pin its size for the life of the connection.
func (c *lineCap) shrink(b []byte) []byte {
	if cap(b) > 64<<10 {
		return nil
	}
	return b[:0]
}

func (c *lineCap) keepTail(b []byte) {
	if len(b) >= capKeep {
		c.tail = append(c.tail[:0], b[len(b)-capKeep:]...)
		return
	}
	c.tail = append(c.tail, b...)
	if len(c.tail) > capKeep {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-capKeep:]...)
	}
}

var (
	headIDRE = regexp.MustCompile(`^\s*(?:data:\s*)?\{(?:[^"]|"(?:[^"\\]|\\.)*")*?"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9]+)`)
	tailIDRE = regexp.MustCompile(`"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9]+)\s*\}\s*$`)
)

// oversizedMessage marks the answers lineCap made.
const oversizedMessage = "toolmesh: answer over executor.max-result-bytes, dropped"

func (c *lineCap) replacement() []byte {
	prefix := ""
	if bytes.HasPrefix(c.head, []byte("data:")) {
		prefix = "data: "
	}
	id := ""
	head := c.head[:min(len(c.head), capKeep)]
	if r := bytes.Index(head, []byte(`"result"`)); r >= 0 {
		head = head[:r] // an "id" after "result" may be the result's own
	}
	if m := headIDRE.FindSubmatch(head); m != nil {
		id = string(m[1])
	} else if m := tailIDRE.FindSubmatch(c.tail); m != nil {
		id = string(m[1])
	}
	if id == "" {
		return nil
	}
	c.h.oversized.Store(id, c.head)
	c.head = nil
	return fmt.Appendf(nil, `%s{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%q}}`+"\n",
		prefix, id, mcp.INTERNAL_ERROR, oversizedMessage)
}
