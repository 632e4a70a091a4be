package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/addscript"
	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
	"github.com/toolmesh/toolmesh/internal/llamatest"
)

// options configure one run.
type options struct {
	Duration time.Duration
	Warmup   time.Duration
	Rate     float64
	Mix      map[string]int
	// Settle is an extra wait before measuring after the load (idle connections time out).
	Settle time.Duration
	// GoroutineDump, when set, is where the goroutines left after the load are written.
	GoroutineDump string
}

// kinds are the requests the load is made of, in table order.
var kinds = []string{"search", "direct", "call", "question"}

// parseMix reads "search=1,direct=2": the weight of each kind; kinds not named get 0.
func parseMix(s string) (map[string]int, error) {
	out := map[string]int{}
	total := 0
	for part := range strings.SplitSeq(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(w)
		if !ok || err != nil || n < 0 || !slices.Contains(kinds, name) {
			return nil, fmt.Errorf("bad -mix entry %q: want KIND=WEIGHT with KIND one of %v", part, kinds)
		}
		out[name] = n
		total += n
	}
	if total == 0 {
		return nil, errors.New("-mix has no weight")
	}
	return out, nil
}

// schedule is the mix as a repeating sequence of kinds, spread evenly.
func schedule(mix map[string]int) []string {
	var seq []string
	maxW := 0
	for _, w := range mix {
		maxW = max(maxW, w)
	}
	for round := range maxW {
		for _, k := range kinds {
			if mix[k] > round {
				seq = append(seq, k)
			}
		}
	}
	return seq
}

// result is one request's outcome.
type result struct {
	kind    string
	at      time.Time // when it was scheduled to be sent
	latency time.Duration
	code    int // the HTTP status (0: no answer)
	err     error
}

// report is what a run measured.
type report struct {
	opts                      options
	elapsed                   time.Duration // from the first scheduled send to the last answer
	results                   []result
	rssBefore, rssAfter       int64  // bytes
	heapBefore, heapAfter     uint64 // bytes of heap in use
	goroutBefore, goroutAfter int
	sampleErrors              []string
}

func (r *report) errors() int {
	n := 0
	for _, x := range r.results {
		if x.err != nil {
			n++
		}
	}
	return n
}

// row is one line of the table.
type row struct {
	kind           string
	sent, ok, errs int
	rate           float64
	p50, p99, p999 time.Duration
}

func (r *report) rows() []row {
	var out []row
	for _, k := range append(slices.Clone(kinds), "all") {
		var of []result
		for _, res := range r.results {
			if k == "all" || res.kind == k {
				of = append(of, res)
			}
		}
		if len(of) > 0 {
			out = append(out, tally(k, of, r.elapsed))
		}
	}
	return out
}

// tally is the row of results under the name kind: how many were sent, answered right and
// failed, the answers' latency percentiles and their rate over elapsed.
func tally(kind string, results []result, elapsed time.Duration) row {
	x := row{kind: kind}
	var lat []time.Duration
	for _, res := range results {
		x.sent++
		if res.err != nil {
			x.errs++
			continue
		}
		x.ok++
		lat = append(lat, res.latency)
	}
	slices.Sort(lat)
	x.p50, x.p99, x.p999 = percentile(lat, 0.50), percentile(lat, 0.99), percentile(lat, 0.999)
	x.rate = float64(x.ok) / elapsed.Seconds()
	return x
}

// percentile of sorted durations: the smallest value at or above the fraction p of them.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

func (r *report) table() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "rate %.0f req/s for %s (after %s warm-up), open loop\n\n", r.opts.Rate, r.opts.Duration, r.opts.Warmup)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "kind\tsent\tok\terrors\tok/s\tp50 ms\tp99 ms\tp99.9 ms\t")
	for _, x := range r.rows() {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.1f\t%s\t%s\t%s\t\n", x.kind, x.sent, x.ok, x.errs, x.rate, ms(x.p50), ms(x.p99), ms(x.p999))
	}
	w.Flush()
	fmt.Fprintf(&b, "\nresident memory (VmRSS): %.1f MiB before, %.1f MiB after\n", float64(r.rssBefore)/(1<<20), float64(r.rssAfter)/(1<<20))
	fmt.Fprintf(&b, "heap in use: %.1f MiB before, %.1f MiB after\n", float64(r.heapBefore)/(1<<20), float64(r.heapAfter)/(1<<20))
	fmt.Fprintf(&b, "goroutines: %d before, %d after\n", r.goroutBefore, r.goroutAfter)
	return b.String()
}

// headline is the table's figures for bench/report.
func (r *report) headline() figures.Load {
	out := figures.Load{Rate: r.opts.Rate, DurationSeconds: r.opts.Duration.Seconds(), SettleSeconds: r.opts.Settle.Seconds(),
		RSSBefore: r.rssBefore, RSSAfter: r.rssAfter, HeapBefore: r.heapBefore, HeapAfter: r.heapAfter,
		GoroutinesBefore: r.goroutBefore, GoroutinesAfter: r.goroutAfter}
	msf := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for _, x := range r.rows() {
		out.Kinds = append(out.Kinds, figures.LoadRow{Kind: x.kind, Sent: x.sent, OK: x.ok, Errors: x.errs, OKRate: x.rate,
			P50: msf(x.p50), P99: msf(x.p99), P999: msf(x.p999)})
	}
	return out
}

// run starts the mesh, sends the warm-up and the measured load, and stops the mesh.
func run(ctx context.Context, o options) (*report, error) {
	if o.Rate <= 0 || o.Duration <= 0 {
		return nil, errors.New("rate and duration must be positive")
	}
	m, err := startModel()
	if err != nil {
		return nil, err
	}
	defer m.close()
	base, stop, err := startMesh(m.URL, allTargets)
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, base, 30*time.Second); err != nil {
		return nil, errors.Join(err, stop())
	}
	rep, err := load(ctx, base, m, o)
	return rep, errors.Join(err, stop())
}

// loadClient is the HTTP client of the load, with room for the connections of an open loop.
func loadClient() (*http.Client, *http.Transport) {
	tr := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr
}

// warmUp sends the mix for d (nothing when d is 0); every answer must be right.
func warmUp(ctx context.Context, hc *http.Client, base string, seq []string, rate float64, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	res, _ := send(ctx, hc, base, seq, rate, d)
	for _, r := range res {
		if r.err != nil {
			return fmt.Errorf("warm-up: %s: %w", r.kind, r.err)
		}
	}
	return nil
}

func load(ctx context.Context, base string, m *model, o options) (*report, error) {
	hc, tr := loadClient()
	defer tr.CloseIdleConnections()
	seq := schedule(o.Mix)
	if err := warmUp(ctx, hc, base, seq, o.Rate, o.Warmup); err != nil {
		return nil, err
	}
	rep := &report{opts: o}
	settle := func() {
		m.swap()
		tr.CloseIdleConnections()
		time.Sleep(500 * time.Millisecond)
		debug.FreeOSMemory()
	}
	settle()
	rep.rssBefore, rep.goroutBefore, rep.heapBefore = rss(), runtime.NumGoroutine(), heapInuse()
	rep.results, rep.elapsed = send(ctx, hc, base, seq, o.Rate, o.Duration)
	settle()
	time.Sleep(o.Settle)
	settle()
	rep.rssAfter, rep.goroutAfter, rep.heapAfter = rss(), runtime.NumGoroutine(), heapInuse()
	if o.GoroutineDump != "" {
		f, err := os.Create(o.GoroutineDump)
		if err != nil {
			return nil, err
		}
		err = pprof.Lookup("goroutine").WriteTo(f, 1)
		if err := errors.Join(err, f.Close()); err != nil {
			return nil, err
		}
	}
	for _, r := range rep.results {
		if r.err != nil && len(rep.sampleErrors) < 10 {
			rep.sampleErrors = append(rep.sampleErrors, r.kind+": "+r.err.Error())
		}
	}
	return rep, nil
}

// send sends requests on schedule, one every 1/rate seconds, whether or not earlier ones have
// answered, for d; it waits for every answer. A request's latency counts from its scheduled
// time, so a slow send does not hide a queue.
func send(ctx context.Context, hc *http.Client, base string, seq []string, rate float64, d time.Duration) ([]result, time.Duration) {
	interval := time.Duration(float64(time.Second) / rate)
	n := int(d / interval)
	results := make([]result, n)
	sent := n
	var wg sync.WaitGroup
	start := time.Now()
	var last atomic.Int64
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		if ctx.Err() != nil {
			sent = i
			break
		}
		kind := seq[i%len(seq)]
		wg.Go(func() {
			code, err := do(ctx, hc, base, kind)
			end := time.Now()
			results[i] = result{kind: kind, at: at, latency: end.Sub(at), code: code, err: err}
			for {
				old := last.Load()
				if int64(end.Sub(start)) <= old || last.CompareAndSwap(old, int64(end.Sub(start))) {
					break
				}
			}
		})
	}
	wg.Wait()
	return results[:sent], time.Duration(last.Load())
}

// do sends one request of kind and checks its answer; it returns the HTTP status (0 when
// none came).
func do(ctx context.Context, hc *http.Client, base, kind string) (int, error) {
	switch kind {
	case "search":
		var got struct {
			Results []struct{ Tool struct{ ID string } }
		}
		code, err := call(ctx, hc, http.MethodGet, base+"/v1/tools:search?k=4&q="+url.QueryEscape("add two numbers"), "", &got)
		if err != nil {
			return code, err
		}
		for _, r := range got.Results {
			if r.Tool.ID == "calculator.add" {
				return code, nil
			}
		}
		return code, fmt.Errorf("calculator.add not among the results %+v", got.Results)
	case "call":
		var got struct {
			Content []struct{ Text string }
			IsError bool `json:"is_error"`
		}
		code, err := call(ctx, hc, http.MethodPost, base+"/v1/tools/calculator/add:call", `{"arguments":{"a":2,"b":3}}`, &got)
		if err != nil {
			return code, err
		}
		if got.IsError || len(got.Content) != 1 || got.Content[0].Text != "5" {
			return code, fmt.Errorf("got %+v, want the text 5", got)
		}
		return code, nil
	case "slow":
		var got struct {
			Content []struct{ Text string }
			IsError bool `json:"is_error"`
		}
		code, err := call(ctx, hc, http.MethodPost, base+"/v1/tools/slow/wait:call", `{"arguments":{}}`, &got)
		if err != nil {
			return code, err
		}
		if got.IsError || len(got.Content) != 1 || got.Content[0].Text != "waited" {
			return code, fmt.Errorf("got %+v, want the text waited", got)
		}
		return code, nil
	case "direct", "question":
		body, want := `{"query":"@calculator.add({\"a\":2,\"b\":3})"}`, "5"
		if kind == "question" {
			body, want = `{"query":"`+addscript.Question+`"}`, addscript.Answer
		}
		var got struct {
			Answer     string
			StopReason string `json:"stop_reason"`
			ToolCalls  []struct {
				Output  string
				IsError bool `json:"is_error"`
			} `json:"tool_calls"`
		}
		code, err := call(ctx, hc, http.MethodPost, base+"/v1/query", body, &got)
		if err != nil {
			return code, err
		}
		if got.Answer != want || got.StopReason != "STOP_REASON_ANSWERED" || len(got.ToolCalls) != 1 ||
			got.ToolCalls[0].Output != "5" || got.ToolCalls[0].IsError {
			return code, fmt.Errorf("got %+v, want the answer %q from one call that output 5", got, want)
		}
		return code, nil
	}
	return 0, fmt.Errorf("unknown kind %q", kind)
}

// call sends one request and decodes a 200 answer into out; it returns the HTTP status (0
// when none came).
func call(ctx context.Context, hc *http.Client, method, u, body string, out any) (int, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return resp.StatusCode, fmt.Errorf("%w: %s", err, b)
	}
	return resp.StatusCode, nil
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// rss is this process's resident memory (VmRSS), or -1 where /proc is missing.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

// model is the llama-server double behind a proxy, so the double can be swapped for a fresh
// one: a double keeps every request it received, which would otherwise grow this process's
// memory with the load and hide whether toolmesh's own memory stays flat.
type model struct {
	URL   string
	srv   *http.Server
	mu    sync.Mutex
	cur   *llamatest.Double
	close func()
}

func startModel() (*model, error) {
	m := &model{cur: newDouble()}
	// A plain forwarder, not httputil.ReverseProxy: the inference service closes its side right
	// after a stream's last event, and ReverseProxy then aborted the upstream copy and left a
	// closed connection in its pool that failed a later request mid-answer (about 1 in 100).
	// This one always reads the double's answer to its end, whatever the mesh does.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		m.mu.Lock()
		upstream := m.cur.URL
		m.mu.Unlock()
		out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, upstream+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := hc.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		flusher, _ := w.(http.Flusher)
		buf := make([]byte, 4<<10)
		var werr error
		for {
			n, rerr := resp.Body.Read(buf)
			if n > 0 && werr == nil {
				if _, werr = w.Write(buf[:n]); werr == nil && flusher != nil {
					flusher.Flush()
				}
			}
			if rerr != nil {
				return
			}
		}
	})
	ts := httptest.NewServer(proxy)
	m.URL = ts.URL
	m.close = func() {
		ts.Close()
		m.mu.Lock()
		m.cur.Close()
		m.mu.Unlock()
	}
	return m, nil
}

func newDouble() *llamatest.Double {
	d := llamatest.StartDouble(llamatest.DoubleOptions{Parallel: 64, CtxSize: 64 * 4096})
	d.ScriptFunc(addscript.Reply)
	return d
}

// swap puts a fresh double behind the proxy and closes the old one once idle.
func (m *model) swap() {
	m.mu.Lock()
	old := m.cur
	m.cur = newDouble()
	m.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	old.Close()
}

// allTargets are the targets of `toolmesh up`.
var allTargets = []string{"demo", "executor", "retriever", "inference", "api"}

// startMesh runs targets in this process on loopback :0 ports, as `toolmesh up` does, with
// the demo MCP servers; extra flags come last and win. It returns the REST base URL as soon as
// the targets have started (waitReady waits for /readyz).
func startMesh(modelURL string, targets []string, extra ...string) (string, func() error, error) {
	args := append([]string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=" + modelURL,
	}, extra...)
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg app.Config
	cfg.RegisterFlags(fs)
	cfg.RegisterDemoFlags(fs)
	if err := cfg.Load(fs, args); err != nil {
		return "", nil, err
	}
	cfg.Targets = targets
	if err := cfg.Validate(); err != nil {
		return "", nil, err
	}
	a, err := app.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() { done <- a.Run(ctx, func() { close(started) }) }()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			return errors.New("the mesh did not stop within 15s")
		}
	}
	select {
	case <-started:
	case err := <-done:
		cancel()
		return "", nil, fmt.Errorf("mesh: %w", err)
	}
	var base string
	for _, e := range a.Endpoints {
		if e.Name == "REST" {
			base = e.Addr
		}
	}
	if base == "" {
		return "", nil, errors.Join(errors.New("mesh: no REST endpoint"), stop())
	}
	return base, stop, nil
}

// waitReady waits until the api at base says /readyz 200.
func waitReady(ctx context.Context, base string, within time.Duration) error {
	return waitReadyAs(ctx, base, "", within)
}

// waitReadyAs is waitReady for an api with API tokens, asking with token.
func waitReadyAs(ctx context.Context, base, token string, within time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(within)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mesh: /readyz not ready within %s", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
