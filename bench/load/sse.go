package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
)

// sseOptions configure the legacy SSE phase (issue 26).
type sseOptions struct {
	Calls    int           // the flood's calls kept posted at once
	Duration time.Duration // each timed run of the other token's calls: alone, then beside the flood
	Rate     float64       // the other token's calls per second
}

// sseRetry is how long a flood worker waits before it posts a refused call again: a client
// that ignores Retry-After (1 s) and keeps pushing, without spending the machine's 2 cores on
// refusals alone.
const sseRetry = 100 * time.Millisecond

// sseTarget is the bound on the other token's calls beside the flood: p99 within its
// own call time (p50 alone) plus this.
const sseTarget = 100 * time.Millisecond

// The phase's two tokens, in a tokens file of its own.
const (
	floodToken = "flood-0123456789abcdef0123456789"
	otherToken = "other-0123456789abcdef0123456789"
)

// sseReport is what the phase measured.
type sseReport struct {
	opts          sseOptions
	alone, beside []result // the other token's calls
	posted        int
	accepted      int // results read from the stream
	refused       int // 429
	failed        int
	sampleErrors  []string
}

// ssePhase runs every target in this process with API tokens (the defaults: 8 requests in flight
// per token, 16 calls at once per MCP server) and the bench's slow MCP server, and times the
// other token's calls of slow.wait through REST at o.Rate for o.Duration alone; then one token
// opens a legacy SSE session and keeps o.Calls calls of the same tool posted to it (a refused
// one posted again after sseRetry), and the other token's calls are timed again beside it.
func ssePhase(ctx context.Context, o sseOptions) (*sseReport, error) {
	if o.Calls <= 0 || o.Rate <= 0 || o.Duration <= 0 {
		return nil, errors.New("sse: calls, rate and duration must be positive")
	}
	dir, err := os.MkdirTemp("", "toolmesh-load-sse-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	slow := serveSlow()
	defer slow.Close()
	cfgPath, tokensPath := filepath.Join(dir, "mcp.json"), filepath.Join(dir, "tokens")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, `{"mcpServers": {"slow": {"url": "%s/mcp", "transport": "streamable-http"}}}`, slow.URL), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(tokensPath, []byte("flood:"+floodToken+"\nother:"+otherToken+"\n"), 0o600); err != nil {
		return nil, err
	}
	m, err := startModel()
	if err != nil {
		return nil, err
	}
	defer m.close()
	base, stop, err := startMesh(m.URL, allTargets, "--mcp-config="+cfgPath, "--api.tokens-file="+tokensPath)
	if err != nil {
		return nil, err
	}
	rep, err := sseLoad(ctx, base, o)
	return rep, errors.Join(err, stop())
}

// sseLoad is the phase once the mesh has started.
func sseLoad(ctx context.Context, base string, o sseOptions) (*sseReport, error) {
	if err := waitReadyAs(ctx, base, otherToken, 30*time.Second); err != nil {
		return nil, err
	}
	hc, tr := loadClient()
	defer tr.CloseIdleConnections()
	hc.Transport = bearer{token: otherToken, next: tr}
	// The slow server is in the catalog once a call of it is answered.
	if err := serveSlowWait(ctx, hc, base); err != nil {
		return nil, err
	}
	rep := &sseReport{opts: o}
	rep.alone, _ = send(ctx, hc, base, []string{"slow"}, o.Rate, o.Duration)

	fctx, stopFlood := context.WithCancel(ctx)
	defer stopFlood()
	f, err := startFlood(fctx, base, o.Calls)
	if err != nil {
		return nil, fmt.Errorf("sse flood: %w", err)
	}
	// Let the flood fill its places before timing beside it.
	time.Sleep(time.Second)
	rep.beside, _ = send(ctx, hc, base, []string{"slow"}, o.Rate, o.Duration)
	stopFlood()
	f.wait()
	rep.posted, rep.accepted, rep.refused, rep.failed = int(f.posted.Load()), int(f.accepted.Load()), int(f.refused.Load()), int(f.failed.Load())
	rep.sampleErrors = f.samples()
	for _, r := range append(append([]result(nil), rep.alone...), rep.beside...) {
		if r.err != nil && len(rep.sampleErrors) < 10 {
			rep.sampleErrors = append(rep.sampleErrors, "other token: "+r.err.Error())
		}
	}
	return rep, ctx.Err()
}

// serveSlowWait calls slow.wait until it is answered, for up to 30 s.
func serveSlowWait(ctx context.Context, hc *http.Client, base string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := do(ctx, hc, base, "slow")
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slow.wait not served within 30s: %w", err)
		}
		if !sleepUntil(ctx, time.Now().Add(50*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// bearer sends every request with an API token.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// flood is one client of the flood token on one legacy SSE session, with its workers.
type flood struct {
	c                                 *client.Client
	wg                                sync.WaitGroup
	posted, accepted, refused, failed atomic.Int64
	mu                                sync.Mutex
	errs                              []string
}

// startFlood opens the session and starts calls workers, each keeping one call of slow.wait
// posted until ctx ends.
func startFlood(ctx context.Context, base string, calls int) (*flood, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * calls, MaxIdleConnsPerHost: 2 * calls}}
	c, err := client.NewSSEMCPClient(base+"/sse", client.WithHeaders(map[string]string{"Authorization": "Bearer " + floodToken}),
		client.WithHTTPClient(hc))
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Initialize(ictx, mcp.InitializeRequest{}); err != nil {
		_ = c.Close()
		return nil, err
	}
	f := &flood{c: c}
	for range calls {
		f.wg.Go(func() { f.work(ctx) })
	}
	go func() {
		<-ctx.Done()
		_ = c.Close() // the stream ends; so do its calls
	}()
	return f, nil
}

func (f *flood) work(ctx context.Context) {
	for ctx.Err() == nil {
		req := mcp.CallToolRequest{}
		req.Params.Name = "slow__wait"
		f.posted.Add(1)
		_, err := f.c.CallTool(ctx, req)
		switch {
		case err == nil:
			f.accepted.Add(1)
		case ctx.Err() != nil:
			f.posted.Add(-1) // cut off by the end of the flood: not counted
			return
		case strings.Contains(err.Error(), "status 429"):
			f.refused.Add(1)
			sleepUntil(ctx, time.Now().Add(sseRetry))
		default:
			f.failed.Add(1)
			f.mu.Lock()
			if len(f.errs) < 3 {
				f.errs = append(f.errs, "flood: "+err.Error())
			}
			f.mu.Unlock()
			sleepUntil(ctx, time.Now().Add(sseRetry))
		}
	}
}

func (f *flood) wait() { f.wg.Wait() }

func (f *flood) samples() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.errs...)
}

// rows are the other token's calls alone and beside the flood.
func (r *sseReport) rows() (alone, beside row) {
	return tally("alone", r.alone, r.opts.Duration), tally("beside the flood", r.beside, r.opts.Duration)
}

// met reports whether the other token's p99 beside the flood stayed within its own call time
// (p50 alone) plus sseTarget, with none of its calls failed.
func (r *sseReport) met() bool {
	alone, beside := r.rows()
	return beside.sent > 0 && alone.errs == 0 && beside.errs == 0 && beside.p99 <= alone.p50+sseTarget
}

func (r *sseReport) errors() int {
	alone, beside := r.rows()
	return alone.errs + beside.errs + r.failed
}

func (r *sseReport) table() string {
	alone, beside := r.rows()
	var b strings.Builder
	fmt.Fprintf(&b, "legacy SSE: token flood keeps %d calls of slow.wait (%s) posted to one /sse session (a refused call posted again after %s); token other calls slow.wait through REST at %.0f/s for %s alone, then for %s beside the flood\n\n",
		r.opts.Calls, slowWait, sseRetry, r.opts.Rate, r.opts.Duration, r.opts.Duration)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "other token\tsent\tok\terrors\tp50 ms\tp99 ms\tp99.9 ms\t")
	for _, x := range []row{alone, beside} {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t\n", x.kind, x.sent, x.ok, x.errs, ms(x.p50), ms(x.p99), ms(x.p999))
	}
	w.Flush()
	fmt.Fprintf(&b, "\nflood: %d calls posted: %d accepted (results read from the stream), %d refused with 429, %d failed otherwise\n",
		r.posted, r.accepted, r.refused, r.failed)
	verdict := "met"
	if !r.met() {
		verdict = "missed"
	}
	fmt.Fprintf(&b, "other token's p99 beside the flood %s ms vs its own call time (p50 alone) %s ms + %s ms = %s ms: %s\n",
		ms(beside.p99), ms(alone.p50), ms(sseTarget), ms(alone.p50+sseTarget), verdict)
	for _, e := range r.sampleErrors {
		fmt.Fprintln(&b, "  error:", e)
	}
	return b.String()
}

// figures are the phase's figures for bench/report.
func (r *sseReport) figures() *figures.LoadSSE {
	alone, beside := r.rows()
	msf := func(d time.Duration) float64 { return float64(d) / 1e6 }
	lr := func(x row) figures.LoadRow {
		return figures.LoadRow{Kind: x.kind, Sent: x.sent, OK: x.ok, Errors: x.errs, OKRate: x.rate, P50: msf(x.p50), P99: msf(x.p99), P999: msf(x.p999)}
	}
	return &figures.LoadSSE{Calls: r.opts.Calls, CallMs: msf(slowWait), Rate: r.opts.Rate, DurationSeconds: r.opts.Duration.Seconds(),
		Alone: lr(alone), Beside: lr(beside), Posted: r.posted, Accepted: r.accepted, Refused: r.refused, Failed: r.failed}
}
