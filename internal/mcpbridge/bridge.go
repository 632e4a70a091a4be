// Package mcpbridge relays an MCP client that speaks stdio (newline-delimited JSON-RPC, as
// Claude Desktop and other clients that launch a local command do) to an MCP endpoint over
// streamable HTTP: `toolmesh connect` uses it to reach the mesh's /mcp.
//
// The bridge is a relay, not a second MCP implementation: each message from stdin is POSTed as
// it is, and what the endpoint answers (a JSON body or the events of an SSE stream) goes to
// stdout as it is, so every protocol version the endpoint speaks works through it, progress
// and cancellation included. It adds only what HTTP needs: the bearer token, the session id
// the endpoint handed out (2025 era) and the protocol version headers (the negotiated version,
// and on 2026-07-28 the Mcp-Method and Mcp-Name headers). In the 2025 era it also holds the GET
// stream on which the endpoint sends notifications such as tools/list_changed.
package mcpbridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// Config says where to relay to.
type Config struct {
	// URL is the MCP endpoint, e.g. http://127.0.0.1:7700/mcp.
	URL string
	// Token, when set, is sent as a bearer token.
	Token string
	// CallTimeout bounds one request (not the notification streams); 0 means 10 minutes.
	CallTimeout time.Duration
	// MaxInFlight bounds the requests relayed at once; 0 means 64. Past it, reading stdin waits.
	MaxInFlight int
	// Unreachable is what to tell the user when nothing listens at URL, e.g. "is `toolmesh up`
	// running?".
	Unreachable string
}

// maxMessage bounds one message, in either direction.
const maxMessage = 64 << 20

// Bridge relays one stdio client.
type Bridge struct {
	cfg  Config
	log  *slog.Logger
	http *http.Client

	outMu sync.Mutex
	out   *bufio.Writer

	mu       sync.Mutex
	session  string                        // Mcp-Session-Id, 2025 era
	version  string                        // negotiated protocol version
	inFlight map[string]context.CancelFunc // by JSON-RPC id, so notifications/cancelled can close the stream
	listen   bool                          // the GET stream is running
	down     bool                          // the last request could not reach the endpoint

	life context.Context // Run's, for the GET stream
	wg   sync.WaitGroup  // the GET stream's goroutine
}

// New makes a bridge; logger gets what goes wrong (never stdout: that is the protocol's).
func New(cfg Config, logger *slog.Logger) *Bridge {
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 10 * time.Minute
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 64
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: cfg.MaxInFlight,
		Proxy:               http.ProxyFromEnvironment,
	}
	return &Bridge{cfg: cfg, log: logger, http: &http.Client{Transport: tr}, inFlight: map[string]context.CancelFunc{}}
}

// message is what the bridge reads of a JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
}

// Run relays stdin to the endpoint and its answers to stdout until stdin ends or ctx does;
// then the requests in flight are answered (or, when ctx ended, cancelled) before it returns.
func (b *Bridge) Run(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	b.out = bufio.NewWriter(stdout)
	b.life = ctx
	// At the end the requests in flight are answered (a client may close stdin right after
	// sending), then the notification stream ends.
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		cancel()
		b.wg.Wait()
	}()
	slots := make(chan struct{}, b.cfg.MaxInFlight)
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), maxMessage)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			b.log.Warn("connect: stdin holds a line that is not a JSON-RPC message; dropped", "err", err)
			continue
		}
		body := bytes.Clone(line)
		if m.Method == string(mcp.MethodNotificationCancelled) {
			b.cancelled(m.Params)
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			b.relay(ctx, m, body)
		}()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	return nil
}

// relay POSTs one message and writes what comes back.
func (b *Bridge) relay(ctx context.Context, m message, body []byte) {
	isRequest := len(m.ID) > 0 && m.Method != ""
	var cancel context.CancelFunc
	if isRequest && m.Method != string(mcp.MethodSubscriptionsListen) {
		ctx, cancel = context.WithTimeout(ctx, b.cfg.CallTimeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	if isRequest {
		b.mu.Lock()
		b.inFlight[string(m.ID)] = cancel
		b.mu.Unlock()
		defer func() {
			b.mu.Lock()
			delete(b.inFlight, string(m.ID))
			b.mu.Unlock()
		}()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.cfg.URL, bytes.NewReader(body))
	if err != nil {
		b.fail(m, err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	b.headers(req, m)
	resp, err := b.http.Do(req)
	if err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			b.unreachable(m, err)
		}
		return
	}
	defer resp.Body.Close()
	b.reached()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		b.fail(m, httpFailure(b.cfg.URL, resp, msg))
		return
	}
	if id := resp.Header.Get(mcp.HeaderSessionID); id != "" && m.Method == string(mcp.MethodInitialize) {
		b.mu.Lock()
		b.session = id
		b.mu.Unlock()
	}
	onMessage := func(data []byte) {
		if m.Method == string(mcp.MethodInitialize) {
			b.initialized(data)
		}
		b.write(data)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if err := readEvents(resp.Body, onMessage); err != nil && ctx.Err() == nil {
			b.log.Warn("connect: a response stream broke", "method", m.Method, "err", err)
		}
		return
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
	if err != nil {
		b.fail(m, "read the answer: "+err.Error())
		return
	}
	if len(bytes.TrimSpace(data)) > 0 {
		onMessage(data)
	}
}

// headers sets the session and protocol headers of a POST.
func (b *Bridge) headers(req *http.Request, m message) {
	if b.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.Token)
	}
	b.mu.Lock()
	session, version := b.session, b.version
	b.mu.Unlock()
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	_ = json.Unmarshal(m.Params, &p)
	if v, ok := p.Meta[mcp.MetaKeyProtocolVersion].(string); ok && v != "" {
		version = v // a 2026-07-28 request says its version itself
	}
	if session != "" {
		req.Header.Set(mcp.HeaderSessionID, session)
	}
	if version != "" {
		req.Header.Set(mcp.HeaderProtocolVersion, version)
		if m.Method != "" {
			for k, v := range mcp.StandardHeaders(version, mcp.MCPMethod(m.Method), m.Params) {
				req.Header.Set(k, v)
			}
		}
	}
}

// initialized notes the version an initialize result negotiated and, in the 2025 era, opens
// the GET stream for the endpoint's notifications.
func (b *Bridge) initialized(data []byte) {
	var r struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if json.Unmarshal(data, &r) != nil || r.Result.ProtocolVersion == "" {
		return
	}
	b.mu.Lock()
	b.version = r.Result.ProtocolVersion
	start := b.session != "" && !b.listen
	b.listen = b.listen || start
	b.mu.Unlock()
	if start {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.notifications(b.life)
		}()
	}
}

// notifications holds the GET stream of the session, opening it again with backoff when it
// ends, until ctx ends.
func (b *Bridge) notifications(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		began := time.Now()
		err := b.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		var refused *refusal
		if errors.As(err, &refused) && (refused.status == http.StatusMethodNotAllowed || refused.status == http.StatusNotFound) {
			// The endpoint offers no GET stream (or forgot the session): nothing to hold.
			b.log.Info("connect: the endpoint offers no notification stream", "status", refused.status)
			return
		}
		if time.Since(began) > time.Minute {
			backoff = 250 * time.Millisecond
		}
		b.log.Debug("connect: the notification stream ended; opening it again", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(backoff)):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// refusal is a non-2xx answer to the GET stream.
type refusal struct{ status int }

func (r *refusal) Error() string { return fmt.Sprintf("HTTP %d", r.status) }

func (b *Bridge) listenOnce(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	b.headers(req, message{})
	resp, err := b.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return &refusal{status: resp.StatusCode}
	}
	return readEvents(resp.Body, b.write)
}

// cancelled ends the POST of a request the client cancelled, so that a 2026-07-28 endpoint
// (which ties a request to its stream) stops it too; the notification itself is relayed as well.
func (b *Bridge) cancelled(params json.RawMessage) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || len(p.RequestID) == 0 {
		return
	}
	b.mu.Lock()
	cancel := b.inFlight[string(p.RequestID)]
	b.mu.Unlock()
	if cancel != nil {
		// After a moment, so that the notification reaches the endpoint first where it can.
		time.AfterFunc(200*time.Millisecond, cancel)
	}
}

// write puts one message on stdout, on a line of its own.
func (b *Bridge) write(data []byte) {
	data = bytes.TrimSpace(data)
	if bytes.ContainsAny(data, "\n\r") {
		// Stdio messages are one line each: compact a pretty-printed body.
		var buf bytes.Buffer
		if json.Compact(&buf, data) == nil {
			data = buf.Bytes()
		}
	}
	b.outMu.Lock()
	defer b.outMu.Unlock()
	_, _ = b.out.Write(data)
	_ = b.out.WriteByte('\n')
	_ = b.out.Flush()
}

// unreachable answers request m, which could not be sent. When nothing listens at the URL
// (the mesh is down) the answer says so and what to do; the log says it once, at the first
// request that fails, not once for every request the client sends meanwhile.
func (b *Bridge) unreachable(m message, err error) {
	msg := fmt.Sprintf("cannot reach %s: %v", b.cfg.URL, err)
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		msg = fmt.Sprintf("cannot reach %s (%v)", b.cfg.URL, op.Err)
		if b.cfg.Unreachable != "" {
			msg += ": " + b.cfg.Unreachable
		}
	}
	b.mu.Lock()
	first := !b.down
	b.down = true
	b.mu.Unlock()
	if first {
		b.log.Warn("connect: "+msg, "method", m.Method)
	} else {
		b.log.Debug("connect: "+msg, "method", m.Method)
	}
	b.answer(m, msg)
}

// reached notes that a request got an answer, so that the next failure to reach the endpoint
// is logged again.
func (b *Bridge) reached() {
	b.mu.Lock()
	was := b.down
	b.down = false
	b.mu.Unlock()
	if was {
		b.log.Info("connect: the endpoint answers again", "url", b.cfg.URL)
	}
}

// fail answers request m with a JSON-RPC error saying msg (a notification gets only a log line).
func (b *Bridge) fail(m message, msg string) {
	b.log.Warn("connect: "+msg, "method", m.Method)
	b.answer(m, msg)
}

// answer answers request m with a JSON-RPC error saying msg; a notification gets no answer.
func (b *Bridge) answer(m message, msg string) {
	if len(m.ID) == 0 || m.Method == "" {
		return
	}
	data, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID,
		"error": map[string]any{"code": mcp.INTERNAL_ERROR, "message": "toolmesh connect: " + msg}})
	b.write(data)
}

// httpFailure says why the endpoint refused a request, with what to do about the usual ones.
func httpFailure(url string, resp *http.Response, body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	detail := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		detail = e.Message
	}
	msg := fmt.Sprintf("%s answered %s", url, resp.Status)
	if detail != "" {
		msg += ": " + detail
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		msg += " (set TOOLMESH_TOKEN to an API token of the mesh)"
	case http.StatusNotFound:
		msg += " (is --server a server of the mesh? `toolmesh tools` lists them)"
	}
	return msg
}

// readEvents calls fn with the data of each event of an SSE stream until it ends.
func readEvents(r io.Reader, fn func([]byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxMessage)
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if data.Len() > 0 {
				fn(bytes.Clone(data.Bytes()))
				data.Reset()
			}
		case bytes.HasPrefix(line, []byte("data:")):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" ")))
		}
	}
	if data.Len() > 0 {
		fn(data.Bytes())
	}
	return sc.Err()
}

// jitter is d give or take a half.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
