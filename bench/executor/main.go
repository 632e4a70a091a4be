// Command executor measures what the executor's gRPC API costs on top of a direct mcp-go call.
//
// One process, one run, interleaved: the shipped calculator MCP server is served on loopback
// over SSE (/sse) and streamable HTTP (/mcp) by mcp-go's own HTTP servers, and for each
// transport three callers call add(2,3) on that same server:
//
//   - direct-held:   one mcp-go client, started and initialized once, CallTool repeatedly;
//   - executor-grpc: toolmesh's executor service in-process with that server configured,
//     served on a loopback gRPC listener and called through the generated client;
//   - new-session:   a new mcp-go client per call (start, initialize, call, close), the way
//     the tutorials do it.
//
// Others isolate where the executor's overhead goes:
//
//   - executor-grpc-struct: the executor-grpc scenario with the arguments as a
//     google.protobuf.Struct, as callers sent them before arguments_json (issue 28);
//   - executor-inproc:     the executor-grpc scenario's own Service.CallTool called in-process,
//     the same request built the same way: everything the executor does except the gRPC hop;
//   - executor-inproc-otel, executor-grpc-otel (with -telemetry): the same with a second
//     executor that has telemetry, unsampled as toolmesh runs without an OTLP endpoint, or
//     sampled; the difference is what the executor's tracing and metrics cost;
//   - executor-grpc-tuned: a second executor behind a gRPC server and client configured the
//     way internal/server does not (yet): grpc.NumStreamWorkers(GOMAXPROCS) and static 1 MiB
//     windows (which turn off the BDP estimator's PING/ACK per call).
//
// A bare grpc.health.v1 Check on the executor's gRPC server is the floor of a gRPC hop.
//
// Each scenario is warmed up, then timed with 1 caller (N sequential calls: p50, p99) and with
// C concurrent callers for D (calls/s, p50, p99 under load). Everything is repeated R times,
// scenarios in a rotating order, and the median of the runs is reported.
//
//	go run ./bench/executor [-calls N] [-duration D] [-runs R] [-concurrency C] [-markdown] [-json FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/bench/internal/loadavg"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/mcpservers/calculator"
)

type options struct {
	calls       int
	duration    time.Duration
	runs        int
	concurrency int
	warmup      int
	markdown    bool
	protocol    string
	transports  string
	cpuprofile  string
	scenarios   string
	workers     uint
	telemetry   string
	jsonPath    string

	loadBefore, loadAfter string // /proc/loadavg around the measurement, for the report
	callTimeout           time.Duration
}

func main() {
	var o options
	fs := flag.NewFlagSet("executor", flag.ExitOnError)
	fs.IntVar(&o.calls, "calls", 2000, "timed sequential calls per scenario and run (1 caller)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of the concurrent phase per scenario and run")
	fs.IntVar(&o.runs, "runs", 3, "runs; the median of the runs is reported")
	fs.IntVar(&o.concurrency, "concurrency", 64, "concurrent callers in the throughput phase")
	fs.IntVar(&o.warmup, "warmup", 200, "untimed calls before each scenario's timed phases")
	fs.BoolVar(&o.markdown, "markdown", false, "print Markdown tables")
	fs.StringVar(&o.protocol, "protocol", "", "MCP protocol version for the direct client and the executor alike; empty: mcp-go's default negotiation")
	fs.StringVar(&o.transports, "transports", "sse,streamable-http", "comma-separated transports to measure")
	fs.StringVar(&o.scenarios, "scenarios", "grpc-health,direct-held,executor-inproc,executor-grpc,executor-grpc-struct,new-session", "comma-separated scenarios to measure (also executor-grpc-tuned: plain grpc.NewServer with -grpc-stream-workers and static windows)")
	fs.UintVar(&o.workers, "grpc-stream-workers", 0, "grpc.NumStreamWorkers for the executor's gRPC server; 0: grpc's default (a new goroutine per RPC), as toolmesh ships")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the timed phases to this file")
	fs.DurationVar(&o.callTimeout, "call-timeout", 10*time.Second, "bound of one call; a call that exceeds it counts as an error")
	fs.StringVar(&o.telemetry, "telemetry", "", "also measure a second executor with telemetry, as executor-inproc-otel and executor-grpc-otel: "+
		"unsampled (as toolmesh runs without an OTLP endpoint: spans never sampled, metrics kept; unset OTEL_EXPORTER_OTLP_* first) or sampled (every span recorded, then dropped)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the headline figures (each scenario's medians) as JSON to this file, for bench/report")
	_ = fs.Parse(os.Args[1:])
	if o.calls < 1 || o.runs < 1 || o.concurrency < 1 || o.duration <= 0 {
		fmt.Fprintln(os.Stderr, "executor: -calls, -runs, -concurrency and -duration must be positive")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "executor:", err)
		os.Exit(1)
	}
}

// scenario is one way of calling add(2,3).
type scenario struct {
	transport string // "sse", "streamable-http"; "" for the gRPC baseline
	name      string // "grpc-health", "direct-held", "executor-grpc", "new-session"
	protocol  string // the negotiated MCP protocol version, "" when not MCP
	note      string
	call      func(ctx context.Context) error
	// warmup overrides options.warmup (new sessions are expensive).
	warmup int
}

func (s *scenario) key() string { return s.transport + "/" + s.name }

// measurement is one run of one scenario.
type measurement struct {
	p50, p99         time.Duration // 1 caller
	loadP50, loadP99 time.Duration // C callers
	callsPerSec      float64       // C callers
	cpuPerCall       time.Duration // C callers: process CPU (user+sys) per call
	calls, errors    int
	firstErr         string
}

func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }

	var (
		scenarios []*scenario
		cleanups  []func()
	)
	defer func() {
		for _, c := range slices.Backward(cleanups) {
			c()
		}
	}()

	// One MCP server, both transports, on one loopback port.
	mcpURL, closeMCP, err := serveCalculator()
	if err != nil {
		return err
	}
	cleanups = append(cleanups, closeMCP)
	logf("calculator MCP server on %s (SSE /sse, streamable HTTP /mcp)", mcpURL)

	// The direct clients get a sized pool: mcp-go's default http.Client keeps 2 idle
	// connections per host, which would make the direct path, not the executor, the bottleneck.
	pooled := &http.Client{Transport: pooledTransport(2 * o.concurrency)}
	cleanups = append(cleanups, pooled.CloseIdleConnections)

	want := map[string]bool{}
	for _, n := range strings.Split(o.scenarios, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var baseline *scenario
	for _, tr := range strings.Split(o.transports, ",") {
		tr = strings.TrimSpace(tr)
		var url string
		switch tr {
		case "sse":
			url = mcpURL + "/sse"
		case "streamable-http":
			url = mcpURL + "/mcp"
		default:
			return fmt.Errorf("unknown transport %q; want sse or streamable-http", tr)
		}

		direct, err := newDirect(ctx, tr, url, pooled, o)
		if err != nil {
			return fmt.Errorf("%s direct-held: %w", tr, err)
		}
		cleanups = append(cleanups, direct.close)
		scenarios = append(scenarios, direct.scenario)

		ex, err := newExecutorScenario(ctx, tr, url, o)
		if err != nil {
			return fmt.Errorf("%s executor-grpc: %w", tr, err)
		}
		cleanups = append(cleanups, ex.close)
		scenarios = append(scenarios, ex.inproc, ex.scenario, ex.structs)
		if o.telemetry != "" {
			tel, err := benchTelemetry(ctx, o.telemetry)
			if err != nil {
				return err
			}
			otel, err := newExecutorScenarioTuned(ctx, tr, url, o, "executor-grpc-otel", grpcTuning{shipped: o.workers == 0, workers: uint32(o.workers)}, tel)
			if err != nil {
				return fmt.Errorf("%s executor-grpc-otel: %w", tr, err)
			}
			cleanups = append(cleanups, otel.close)
			scenarios = append(scenarios, otel.inproc, otel.scenario)
			want["executor-inproc-otel"] = want["executor-inproc"]
			want["executor-grpc-otel"] = want["executor-grpc"]
		}
		if want["executor-grpc-tuned"] {
			tuned, err := newExecutorScenarioTuned(ctx, tr, url, o, "executor-grpc-tuned",
				grpcTuning{workers: uint32(runtime.GOMAXPROCS(0)), staticWindow: true}, nil)
			if err != nil {
				return fmt.Errorf("%s executor-grpc-tuned: %w", tr, err)
			}
			cleanups = append(cleanups, tuned.close)
			scenarios = append(scenarios, tuned.scenario)
		}
		if baseline == nil {
			baseline = ex.health
			scenarios = append([]*scenario{baseline}, scenarios...)
		}
		if ex.scenario.protocol != direct.scenario.protocol {
			logf("WARNING %s: direct client negotiated %q, executor %q: the comparison is not like for like",
				tr, direct.scenario.protocol, ex.scenario.protocol)
		}

		scenarios = append(scenarios, newSessionScenario(tr, url, o))
	}

	scenarios = slices.DeleteFunc(scenarios, func(s *scenario) bool { return !want[s.name] })
	if len(scenarios) == 0 {
		return fmt.Errorf("no scenario left after -scenarios %q", o.scenarios)
	}

	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	results := map[string][]measurement{}
	o.loadBefore = loadavg.Now()
	start := time.Now()
	for r := range o.runs {
		// Rotate the order so no scenario always runs first or right after the heaviest one.
		order := slices.Clone(scenarios)
		k := r % len(order)
		order = append(order[k:], order[:k]...)
		for _, s := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			m := measure(ctx, s, o)
			results[s.key()] = append(results[s.key()], m)
			logf("run %d/%d %-16s %-14s p50 %6.0fµs p99 %6.0fµs | @%d %8.0f calls/s p50 %6.0fµs p99 %6.0fµs cpu %4.0fµs/call | errors %d",
				r+1, o.runs, s.transport, s.name, us(m.p50), us(m.p99), o.concurrency, m.callsPerSec, us(m.loadP50), us(m.loadP99), us(m.cpuPerCall), m.errors)
		}
	}
	logf("measured in %s", time.Since(start).Round(time.Second))
	o.loadAfter = loadavg.Now()

	report(stdout, o, scenarios, results)
	if o.jsonPath != "" {
		return figures.Write(o.jsonPath, headline(o, scenarios, results))
	}
	return nil
}

// headline is every scenario's medians, as the table shows them.
func headline(o options, scenarios []*scenario, results map[string][]measurement) figures.Executor {
	out := figures.Executor{Runs: o.runs, Calls: o.calls, Concurrency: o.concurrency}
	for _, s := range scenarios {
		sm := summarize(results[s.key()])
		out.Scenarios = append(out.Scenarios, figures.ExecutorScenario{
			Transport: s.transport, Name: s.name, Protocol: s.protocol,
			P50: sm.p50, P99: sm.p99, CallsPerSec: sm.callsPerSec, LoadP50: sm.loadP50, LoadP99: sm.loadP99,
			CPUPerCall: sm.cpuPerCall, Calls: sm.calls, Errors: sm.errors,
		})
	}
	return out
}

// benchTelemetry is the executor's telemetry for -telemetry mode.
func benchTelemetry(ctx context.Context, mode string) (*telemetry.Service, error) {
	switch mode {
	case "unsampled":
		t, err := telemetry.New(telemetry.Config{PayloadLimit: 1024})
		if err != nil {
			return nil, err
		}
		if t.Exporting() {
			return nil, errors.New("-telemetry unsampled: an OTEL_EXPORTER_OTLP_* endpoint is set; unset it to measure the unsampled path")
		}
		return t.Service(ctx, "toolmesh-executor")
	case "sampled":
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		return telemetry.NewForTest("toolmesh-executor", tp, mp, telemetry.PayloadPolicy{Limit: 1024}), nil
	}
	return nil, fmt.Errorf("-telemetry %q: want unsampled or sampled", mode)
}

// serveCalculator serves one calculator MCP server over SSE (/sse, /message) and streamable
// HTTP (/mcp) on one loopback port, with mcp-go's own HTTP servers and their defaults.
func serveCalculator() (baseURL string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mcpServer := calculator.New()
	sse := server.NewSSEServer(mcpServer)
	streamable := server.NewStreamableHTTPServer(mcpServer,
		server.WithStreamableHTTPLogger(slog.New(slog.DiscardHandler)))
	mux := http.NewServeMux()
	mux.Handle("/sse", sse)
	mux.Handle("/message", sse)
	mux.Handle("/mcp", streamable)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	go func() { _ = hs.Serve(lis) }()
	return "http://" + lis.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		sse.CloseSessions()
		streamable.CloseSessions(ctx)
		_ = hs.Shutdown(ctx)
		_ = hs.Close()
	}, nil
}

// pooledTransport is http.DefaultTransport with room for n idle connections to one host.
func pooledTransport(n int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = n
	t.MaxIdleConnsPerHost = n
	t.IdleConnTimeout = 90 * time.Second
	return t
}

var clientInfo = mcp.Implementation{Name: "toolmesh-bench", Version: "0.0.0"}

// newMCPClient builds an mcp-go client for tr; hc nil means mcp-go's default http.Client.
func newMCPClient(tr, url string, hc *http.Client, protocol string) (*client.Client, error) {
	var opts []client.ClientOption
	if protocol != "" {
		opts = append(opts, client.WithProtocolVersion(protocol))
	}
	quiet := slog.New(slog.DiscardHandler)
	switch tr {
	case "sse":
		topts := []transport.ClientOption{transport.WithSSELogger(quiet)}
		if hc != nil {
			topts = append(topts, transport.WithHTTPClient(hc))
		}
		t, err := transport.NewSSE(url, topts...)
		if err != nil {
			return nil, err
		}
		return client.NewClient(t, opts...), nil
	case "streamable-http":
		topts := []transport.StreamableHTTPCOption{transport.WithHTTPLogger(quiet)}
		if hc != nil {
			topts = append(topts, transport.WithHTTPBasicClient(hc))
		}
		t, err := transport.NewStreamableHTTP(url, topts...)
		if err != nil {
			return nil, err
		}
		return client.NewClient(t, opts...), nil
	}
	return nil, fmt.Errorf("unknown transport %q", tr)
}

func initRequest() mcp.InitializeRequest {
	var req mcp.InitializeRequest
	req.Params.ClientInfo = clientInfo
	return req
}

func addRequest() mcp.CallToolRequest {
	var req mcp.CallToolRequest
	req.Params.Name = "add"
	req.Params.Arguments = map[string]any{"a": 2, "b": 3}
	return req
}

// checkMCPResult accepts exactly the calculator's answer to add(2,3).
func checkMCPResult(res *mcp.CallToolResult) error {
	if res.IsError {
		return fmt.Errorf("tool error: %v", res.Content)
	}
	if len(res.Content) == 0 {
		return errors.New("empty result")
	}
	if tc, ok := res.Content[0].(mcp.TextContent); !ok || tc.Text != "5" {
		return fmt.Errorf("unexpected result %#v", res.Content[0])
	}
	return nil
}

type directScenario struct {
	scenario *scenario
	close    func()
}

// newDirect starts and initializes one client, held for the whole benchmark.
func newDirect(ctx context.Context, tr, url string, hc *http.Client, o options) (*directScenario, error) {
	c, err := newMCPClient(tr, url, hc, o.protocol)
	if err != nil {
		return nil, err
	}
	// The SSE stream lives as long as Start's context: use the benchmark's.
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Initialize(ictx, initRequest()); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	// List the tools once, as any real client (and the executor) does before calling: on
	// 2026-07-28 mcp-go caches the definitions and then mirrors x-mcp-header parameters on
	// every tools/call, which costs CPU; a client that skipped tools/list would not pay it.
	if _, err := c.ListTools(ictx, mcp.ListToolsRequest{}); err != nil {
		c.Close()
		return nil, fmt.Errorf("tools/list: %w", err)
	}
	s := &scenario{
		transport: tr,
		name:      "direct-held",
		protocol:  c.ProtocolVersion(),
		note:      fmt.Sprintf("one mcp-go client, initialized and tools listed once; HTTP pool MaxIdleConnsPerHost %d", hc.Transport.(*http.Transport).MaxIdleConnsPerHost),
		call: func(ctx context.Context) error {
			res, err := c.CallTool(ctx, addRequest())
			if err != nil {
				return err
			}
			return checkMCPResult(res)
		},
	}
	return &directScenario{scenario: s, close: func() { c.Close() }}, nil
}

// newSessionScenario opens a session per call with mcp-go's defaults, as the tutorials do.
func newSessionScenario(tr, url string, o options) *scenario {
	var protocol atomic.Value
	protocol.Store("")
	s := &scenario{
		transport: tr,
		name:      "new-session",
		note:      "new mcp-go client per call, mcp-go's default http.Client",
		warmup:    max(o.warmup/4, 10),
	}
	s.call = func(ctx context.Context) error {
		c, err := newMCPClient(tr, url, nil, o.protocol)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		if _, err := c.Initialize(ctx, initRequest()); err != nil {
			return fmt.Errorf("initialize: %w", err)
		}
		protocol.CompareAndSwap("", c.ProtocolVersion())
		res, err := c.CallTool(ctx, addRequest())
		if err != nil {
			return err
		}
		return checkMCPResult(res)
	}
	// Learn the negotiated version now, so the report can show it.
	probe := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.call(ctx); err == nil {
			s.protocol = protocol.Load().(string)
		}
	}
	probe()
	return s
}

// measure runs one scenario once: warm-up, 1 caller, then C callers.
func measure(ctx context.Context, s *scenario, o options) measurement {
	var m measurement
	var errCount atomic.Int64
	var firstErr atomic.Value
	do := func(ctx context.Context) (time.Duration, bool) {
		cctx, cancel := context.WithTimeout(ctx, o.callTimeout)
		t0 := time.Now()
		err := s.call(cctx)
		d := time.Since(t0)
		cancel()
		if err != nil {
			if ctx.Err() == nil { // not our own shutdown
				errCount.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			return d, false
		}
		return d, true
	}

	warm := o.warmup
	if s.warmup > 0 {
		warm = s.warmup
	}
	for range warm {
		do(ctx)
	}
	// Grow connection pools to C before the timed phases.
	var wg sync.WaitGroup
	for range o.concurrency {
		wg.Go(func() {
			for range 3 {
				do(ctx)
			}
		})
	}
	wg.Wait()
	errCount.Store(0)
	firstErr = atomic.Value{}
	runtime.GC()

	// 1 caller.
	lat := make([]time.Duration, 0, o.calls)
	for range o.calls {
		if d, ok := do(ctx); ok {
			lat = append(lat, d)
		}
	}
	m.p50, m.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	m.calls = len(lat)
	runtime.GC()

	// C callers for D.
	per := make([][]time.Duration, o.concurrency)
	cpu0 := processCPU()
	deadline := time.Now().Add(o.duration)
	t0 := time.Now()
	for i := range o.concurrency {
		wg.Go(func() {
			l := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if d, ok := do(ctx); ok {
					l = append(l, d)
				}
			}
			per[i] = l
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	cpu := processCPU() - cpu0
	all := slices.Concat(per...)
	if len(all) > 0 {
		m.cpuPerCall = cpu / time.Duration(len(all))
	}
	m.callsPerSec = float64(len(all)) / elapsed.Seconds()
	m.loadP50, m.loadP99 = percentile(all, 0.50), percentile(all, 0.99)
	m.calls += len(all)
	m.errors = int(errCount.Load())
	if v, ok := firstErr.Load().(string); ok {
		m.firstErr = v
	}
	runtime.GC()
	return m
}

// percentile sorts d in place and returns the nearest-rank q-quantile.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// summary is the median over runs of one scenario.
type summary struct {
	p50, p99, loadP50, loadP99, callsPerSec, cpuPerCall float64
	calls, errors                                       int
	firstErr                                            string
}

func summarize(ms []measurement) summary {
	pick := func(f func(measurement) float64) float64 {
		xs := make([]float64, len(ms))
		for i, m := range ms {
			xs[i] = f(m)
		}
		return median(xs)
	}
	s := summary{
		p50:         pick(func(m measurement) float64 { return us(m.p50) }),
		p99:         pick(func(m measurement) float64 { return us(m.p99) }),
		loadP50:     pick(func(m measurement) float64 { return us(m.loadP50) }),
		loadP99:     pick(func(m measurement) float64 { return us(m.loadP99) }),
		callsPerSec: pick(func(m measurement) float64 { return m.callsPerSec }),
		cpuPerCall:  pick(func(m measurement) float64 { return us(m.cpuPerCall) }),
	}
	for _, m := range ms {
		s.calls += m.calls
		s.errors += m.errors
		if s.firstErr == "" {
			s.firstErr = m.firstErr
		}
	}
	return s
}

func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Version + " => " + d.Replace.Path + " " + d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}

// table prints rows as aligned plain text or as Markdown.
type table struct {
	header []string
	right  []bool
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) print(w io.Writer, markdown bool) {
	if markdown {
		fmt.Fprintf(w, "| %s |\n", strings.Join(t.header, " | "))
		seps := make([]string, len(t.header))
		for i := range seps {
			seps[i] = "---"
			if t.right[i] {
				seps[i] = "---:"
			}
		}
		fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
		for _, r := range t.rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		}
		return
	}
	width := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(r []string) {
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if t.right[i] {
				fmt.Fprint(w, pad+c)
			} else {
				fmt.Fprint(w, c+pad)
			}
			if i < len(r)-1 {
				fmt.Fprint(w, "  ")
			}
		}
		fmt.Fprintln(w)
	}
	line(t.header)
	for _, r := range t.rows {
		line(r)
	}
}

func num(f float64) string {
	s := fmt.Sprintf("%.0f", f)
	// thousands separators
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// Targets from the issue.
const (
	maxOverheadUS    = 80.0
	minThroughputRat = 0.85
	minNewSessionRat = 2.5
)

func report(w io.Writer, o options, scenarios []*scenario, results map[string][]measurement) {
	md := o.markdown
	info := []string{
		fmt.Sprintf("Go %s, mcp-go %s, grpc %s, GOOS/GOARCH %s/%s, GOMAXPROCS %d, NumCPU %d",
			runtime.Version(), moduleVersion("github.com/mark3labs/mcp-go"), moduleVersion("google.golang.org/grpc"),
			runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU()),
		fmt.Sprintf("median of %d runs; per run and scenario: %d sequential calls (1 caller), then %d callers for %s; tool calculator add(2,3); everything on 127.0.0.1",
			o.runs, o.calls, o.concurrency, o.duration),
		fmt.Sprintf("load average (1/5/15 min) before %s, after %s: other processes on this machine share the %d CPUs", o.loadBefore, o.loadAfter, runtime.NumCPU()),
		fmt.Sprintf("direct-held: one mcp-go client, initialized and tools/list'ed once (as the executor does), http.Transport with MaxIdleConnsPerHost %d; "+
			"executor-grpc: the arguments as JSON text (arguments_json, as the api sends them), services/executor in-process (its own pooled mcp-go client, per-server limit %d) behind the gRPC server toolmesh ships (internal/server: interceptors, stream workers, static windows) on a loopback listener, one grpc.ClientConn with internal/server's DialOptions shared by all callers; "+
			"new-session: start, initialize, call, close per call with mcp-go's default http.Client; "+
			"executor-inproc: the executor-grpc scenario's Service.CallTool called in-process (no gRPC); "+
			"executor-grpc-struct: executor-grpc with the arguments as a google.protobuf.Struct (callers before arguments_json); "+
			"executor-grpc-tuned (only with -scenarios): plain grpc.NewServer with -grpc-stream-workers and static 1 MiB windows", 2*o.concurrency, o.concurrency),
	}
	if o.telemetry != "" {
		info = append(info, fmt.Sprintf("executor-inproc-otel, executor-grpc-otel: a second executor, the same but with telemetry %s (-telemetry); its gRPC server is the same as executor-grpc's (no otelgrpc), so the difference is the executor's own MCP spans, metrics and traced HTTP client", o.telemetry))
	}
	if md {
		for _, l := range info {
			fmt.Fprintf(w, "- %s\n", l)
		}
		fmt.Fprintln(w)
	} else {
		for _, l := range info {
			fmt.Fprintln(w, l)
		}
		fmt.Fprintln(w)
	}

	t := &table{
		header: []string{"transport", "scenario", "protocol", "p50 µs", "p99 µs",
			fmt.Sprintf("calls/s @%d", o.concurrency), fmt.Sprintf("p50 µs @%d", o.concurrency), fmt.Sprintf("p99 µs @%d", o.concurrency),
			fmt.Sprintf("CPU µs/call @%d", o.concurrency), "errors"},
		right: []bool{false, false, false, true, true, true, true, true, true, true},
	}
	sums := map[string]summary{}
	var errNotes []string
	for _, s := range scenarios {
		sm := summarize(results[s.key()])
		sums[s.key()] = sm
		tr, proto := s.transport, s.protocol
		if tr == "" {
			tr = "gRPC"
		}
		if proto == "" {
			proto = "—"
		}
		t.add(tr, s.name, proto, num(sm.p50), num(sm.p99), num(sm.callsPerSec), num(sm.loadP50), num(sm.loadP99), num(sm.cpuPerCall),
			fmt.Sprintf("%d/%d", sm.errors, sm.calls+sm.errors))
		if sm.errors > 0 {
			errNotes = append(errNotes, fmt.Sprintf("%s: %d errors, first: %s", s.key(), sm.errors, sm.firstErr))
		}
	}
	t.print(w, md)
	fmt.Fprintln(w)
	for _, n := range errNotes {
		fmt.Fprintln(w, "errors:", n)
	}
	if len(errNotes) > 0 {
		fmt.Fprintln(w)
	}

	c := &table{
		header: []string{"transport", "target", "measured", "want", "result"},
		right:  []bool{false, false, true, true, false},
	}
	seen := map[string]bool{}
	for _, s := range scenarios {
		tr := s.transport
		if tr == "" || seen[tr] {
			continue
		}
		seen[tr] = true
		d, okD := sums[tr+"/direct-held"]
		e, okE := sums[tr+"/executor-grpc"]
		n, okN := sums[tr+"/new-session"]
		if !okD || !okE || !okN {
			continue
		}
		over := e.p50 - d.p50
		c.add(tr, "executor p50 − direct p50", fmt.Sprintf("%.0f µs", over), fmt.Sprintf("≤ %.0f µs", maxOverheadUS), passFail(over <= maxOverheadUS))
		rat := e.callsPerSec / d.callsPerSec
		c.add(tr, fmt.Sprintf("executor ÷ direct calls/s @%d", o.concurrency), fmt.Sprintf("%.2f×", rat), fmt.Sprintf("≥ %.2f×", minThroughputRat), passFail(rat >= minThroughputRat))
		ns := n.p50 / e.p50
		c.add(tr, "new-session p50 ÷ executor p50", fmt.Sprintf("%.2f×", ns), fmt.Sprintf("≥ %.1f×", minNewSessionRat), passFail(ns >= minNewSessionRat))
		c.add(tr, fmt.Sprintf("executor CPU − direct CPU per call @%d", o.concurrency), fmt.Sprintf("%.0f µs", e.cpuPerCall-d.cpuPerCall), "—", "info")
		if st, ok := sums[tr+"/executor-grpc-struct"]; ok {
			c.add(tr, fmt.Sprintf("executor-grpc-struct CPU − executor-grpc CPU per call @%d (arguments as a Struct vs JSON text)", o.concurrency), fmt.Sprintf("%.0f µs", st.cpuPerCall-e.cpuPerCall), "—", "info")
		}
		if i, ok := sums[tr+"/executor-inproc"]; ok {
			c.add(tr, "executor-inproc p50 − direct p50 (executor without gRPC)", fmt.Sprintf("%.0f µs", i.p50-d.p50), "—", "info")
			c.add(tr, fmt.Sprintf("executor-inproc CPU − direct CPU per call @%d", o.concurrency), fmt.Sprintf("%.0f µs", i.cpuPerCall-d.cpuPerCall), "—", "info")
		}
		for _, pair := range [][2]string{{"executor-inproc", "executor-inproc-otel"}, {"executor-grpc", "executor-grpc-otel"}} {
			a, okA := sums[tr+"/"+pair[0]]
			b, okB := sums[tr+"/"+pair[1]]
			if !okA || !okB {
				continue
			}
			c.add(tr, fmt.Sprintf("%s p50 − %s p50 (telemetry %s)", pair[1], pair[0], o.telemetry), fmt.Sprintf("%.0f µs", b.p50-a.p50), "—", "info")
			c.add(tr, fmt.Sprintf("%s CPU − %s CPU per call @%d", pair[1], pair[0], o.concurrency), fmt.Sprintf("%.1f µs", b.cpuPerCall-a.cpuPerCall), "—", "info")
		}
		if t, ok := sums[tr+"/executor-grpc-tuned"]; ok {
			c.add(tr, "executor-grpc-tuned p50 − direct p50", fmt.Sprintf("%.0f µs", t.p50-d.p50), "—", "info")
			c.add(tr, fmt.Sprintf("executor-grpc-tuned ÷ direct calls/s @%d", o.concurrency), fmt.Sprintf("%.2f×", t.callsPerSec/d.callsPerSec), "—", "info")
		}
		errs := d.errors + e.errors + n.errors
		c.add(tr, "errors", fmt.Sprintf("%d", errs), "0", passFail(errs == 0))
	}
	c.print(w, md)
}
