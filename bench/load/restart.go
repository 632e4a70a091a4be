package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/internal/gobuild"
)

// restartOptions configure the rolling-restart phase.
type restartOptions struct {
	// Binary is the toolmesh executable the executor runs as; empty: go build ./cmd/toolmesh
	// into a temporary folder.
	Binary   string
	Duration time.Duration // the load sent while the executor is stopped and started
	Restarts int
	Rate     float64
	Mix      map[string]int
	Warmup   time.Duration
}

// cycle is one stop and start of the executor.
type cycle struct {
	stop    time.Time // SIGTERM sent
	exited  time.Time // the process ended
	started time.Time // the new process started
	served  time.Time // a tool call was answered through the api again
}

// restartReport is what the phase measured.
type restartReport struct {
	opts    restartOptions
	start   time.Time // of the measured load
	cycles  []cycle
	results []result
}

// executorProc is the executor as its own `toolmesh serve --target=executor` process.
type executorProc struct {
	bin  string
	args []string
	log  string // its output, appended by every start
	cmd  *exec.Cmd
	done chan struct{}
}

func (e *executorProc) start() error {
	f, err := os.OpenFile(e.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(e.bin, e.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The executor must not outlive the bench, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting the executor: %w", err)
	}
	e.cmd, e.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(e.done) }()
	return nil
}

// stop sends SIGTERM and waits for the exit; after within it kills the process.
func (e *executorProc) stop(within time.Duration) error {
	if e.cmd == nil {
		return nil
	}
	select {
	case <-e.done:
		return fmt.Errorf("the executor had exited before its stop (%v)", e.cmd.ProcessState)
	default:
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
		return nil
	case <-time.After(within):
		_ = e.cmd.Process.Kill()
		<-e.done
		return fmt.Errorf("the executor did not exit within %s of SIGTERM; killed", within)
	}
}

// tail is the end of the executor's log, for errors.
func (e *executorProc) tail() string {
	b, _ := os.ReadFile(e.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// restartPhase runs the executor as its own process and everything else in this process
// pointed at it (the demo MCP servers, retriever, inference and api, as in the load phase,
// and the slow MCP server), sends the load and the slow calls for o.Duration, and stops the
// executor (SIGTERM: it drains and exits) and starts it again o.Restarts times, evenly spread
// over the load.
func restartPhase(ctx context.Context, o restartOptions) (*restartReport, error) {
	if o.Rate <= 0 || o.Duration <= 0 || o.Restarts <= 0 {
		return nil, errors.New("restarts: rate, duration and restarts must be positive")
	}
	dir, err := os.MkdirTemp("", "toolmesh-load-restart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := o.Binary
	if bin == "" {
		bin = filepath.Join(dir, "toolmesh")
		if err := gobuild.Build(ctx, "", bin, "github.com/toolmesh/toolmesh/cmd/toolmesh"); err != nil {
			return nil, err
		}
	}
	calc, exeAddr, err := freeAddr2()
	if err != nil {
		return nil, err
	}
	slow := serveSlow()
	defer slow.Close()
	cfgPath := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, `{"mcpServers": {"calculator": {"url": "http://%s/sse", "transport": "sse"},
		"slow": {"url": "%s/mcp", "transport": "streamable-http"}}}`, calc, slow.URL), 0o600); err != nil {
		return nil, err
	}
	m, err := startModel()
	if err != nil {
		return nil, err
	}
	defer m.close()
	base, stopMesh, err := startMesh(m.URL, []string{"demo", "retriever", "inference", "api"},
		"--demo.calculator-addr="+calc, "--api.executor-addr="+exeAddr, "--retriever.executor-addr="+exeAddr)
	if err != nil {
		return nil, err
	}
	exe := &executorProc{bin: bin, log: filepath.Join(dir, "executor.log"), args: []string{"serve", "--target=executor",
		"--executor.grpc-addr=" + exeAddr, "--mcp-config=" + cfgPath, "--drain-timeout=5s", "--log.level=warn"}}
	rep, err := func() (*restartReport, error) {
		if err := exe.start(); err != nil {
			return nil, err
		}
		defer exe.stop(10 * time.Second)
		rep, err := restartLoad(ctx, base, exe, o)
		if err != nil {
			err = fmt.Errorf("%w\nexecutor log:\n%s", err, exe.tail())
		}
		return rep, err
	}()
	return rep, errors.Join(err, stopMesh())
}

// restartLoad is the phase once the executor has started.
func restartLoad(ctx context.Context, base string, exe *executorProc, o restartOptions) (*restartReport, error) {
	if err := waitReady(ctx, base, time.Minute); err != nil {
		return nil, err
	}
	hc, tr := loadClient()
	defer tr.CloseIdleConnections()
	if _, err := waitServed(ctx, hc, base, time.Minute); err != nil {
		return nil, err
	}
	seq := schedule(o.Mix)
	if err := warmUp(ctx, hc, base, seq, o.Rate, o.Warmup); err != nil {
		return nil, err
	}
	rep := &restartReport{opts: o, start: time.Now()}
	loaded := make(chan []result, 1)
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go func() { res, _ := send(lctx, hc, base, seq, o.Rate, o.Duration); loaded <- res }()
	// Beside the mix, calls that take slowWait, so that some are in flight at every stop.
	slowLoaded := make(chan []result, 1)
	go func() {
		res, _ := send(lctx, hc, base, []string{"slow"}, slowRate(o.Rate), o.Duration)
		slowLoaded <- res
	}()
	var cerr error
	for i := range o.Restarts {
		// Stops spread evenly over the load, each at least a second after the executor
		// served again, so every stop finds it up and under load.
		at := rep.start.Add(o.Duration * time.Duration(i+1) / time.Duration(o.Restarts+1))
		if n := len(rep.cycles); n > 0 {
			at = later(at, rep.cycles[n-1].served.Add(time.Second))
		}
		if !sleepUntil(ctx, at) {
			break
		}
		c := cycle{stop: time.Now()}
		if cerr = exe.stop(15 * time.Second); cerr != nil {
			break
		}
		c.exited = time.Now()
		if cerr = exe.start(); cerr != nil {
			break
		}
		c.started = time.Now()
		if c.served, cerr = waitServed(ctx, hc, base, 30*time.Second); cerr != nil {
			cerr = fmt.Errorf("restart %d: %w", i+1, cerr)
			break
		}
		rep.cycles = append(rep.cycles, c)
	}
	if cerr != nil {
		stopLoad()
	}
	rep.results = append(<-loaded, <-slowLoaded...)
	if cerr == nil && len(rep.cycles) > 0 && rep.cycles[len(rep.cycles)-1].served.After(rep.start.Add(o.Duration)) {
		cerr = fmt.Errorf("the last restart served again %s after the load ended: give a longer -restart-duration",
			rep.cycles[len(rep.cycles)-1].served.Sub(rep.start.Add(o.Duration)).Round(time.Millisecond))
	}
	return rep, errors.Join(cerr, ctx.Err())
}

// slowRate is the rate of the slow calls sent beside a mix at rate: a fifth of it, so that
// about rate/5 × slowWait of them are in flight at any moment.
func slowRate(rate float64) float64 { return max(rate/5, 2) }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sleepUntil waits until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Until(t)):
		return true
	}
}

// waitServed sends a tool call through the api every 10 ms until one is answered right, and
// says when.
func waitServed(ctx context.Context, hc *http.Client, base string, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := do(cctx, hc, base, "call")
		cancel()
		if err == nil {
			return time.Now(), nil
		}
		last = err
		if !sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return time.Time{}, ctx.Err()
		}
	}
	return time.Time{}, fmt.Errorf("no tool call served within %s: %w", within, last)
}

// freeAddr2 is two free loopback addresses (a port picked free can be taken before it is bound,
// which the start then reports).
func freeAddr2() (string, string, error) {
	var addrs [2]string
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", err
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs[0], addrs[1], nil
}

// restartTally sorts the phase's requests by when they were sent against the stops.
type restartTally struct {
	// before: sent before a stop began, since the executor last served (the tail after the
	// last restart is after); inFlight: those answered after the stop began.
	before, beforeFailed, inFlight, inFlightFailed int
	// before503: those that failed with 503 because the api could not connect to the executor
	// (refused): their call reached it only after the stop began, when it had stopped listening
	// (a call it had taken would have been finished by the drain). Not counted in beforeFailed.
	before503 int
	// gap: sent from a stop until the executor served again.
	gap, gapFailed, gap503 int
	gapFailLatency         []time.Duration // sorted
	after, afterFailed     int
	samples                []string // failures outside the gaps, then inside, a few each
}

func (r *restartReport) tally() restartTally {
	var t restartTally
	var gapSamples []string
	for _, res := range r.results {
		failed := res.err != nil
		end := res.at.Add(res.latency)
		i := slices.IndexFunc(r.cycles, func(c cycle) bool { return res.at.Before(c.served) })
		switch {
		case i >= 0 && !res.at.Before(r.cycles[i].stop):
			t.gap++
			if failed {
				t.gapFailed++
				if res.code == http.StatusServiceUnavailable {
					t.gap503++
				}
				t.gapFailLatency = append(t.gapFailLatency, res.latency)
				if len(gapSamples) < 3 {
					gapSamples = append(gapSamples, fmt.Sprintf("in a gap: %s: %v", res.kind, res.err))
				}
			}
		case i >= 0:
			t.before++
			inFlight := end.After(r.cycles[i].stop)
			if inFlight {
				t.inFlight++
			}
			if failed && refused(res) {
				// Scheduled before the stop, its call reached the executor after it: the stop
				// lost nothing it had accepted, and the call failed fast as one in the gap does.
				t.before503++
				failed = false
			}
			if failed {
				t.beforeFailed++
				if inFlight {
					t.inFlightFailed++
				}
				if len(t.samples) < 5 {
					t.samples = append(t.samples, fmt.Sprintf("sent %s before stop %d: %s: %v", r.cycles[i].stop.Sub(res.at).Round(time.Millisecond), i+1, res.kind, res.err))
				}
			}
		default:
			t.after++
			if failed {
				t.afterFailed++
				if len(t.samples) < 5 {
					t.samples = append(t.samples, fmt.Sprintf("after the last restart: %s: %v", res.kind, res.err))
				}
			}
		}
	}
	slices.Sort(t.gapFailLatency)
	t.samples = append(t.samples, gapSamples...)
	return t
}

// refused reports whether res failed with 503 because the api could not open a connection to
// the executor: gRPC's dial error, which only a call that had not reached the executor gets.
func refused(res result) bool {
	if res.code != http.StatusServiceUnavailable || res.err == nil {
		return false
	}
	msg := res.err.Error()
	return strings.Contains(msg, "Error while dialing") || strings.Contains(msg, "connection refused")
}

func (r *restartReport) table() string {
	t := r.tally()
	var b strings.Builder
	fmt.Fprintf(&b, "rolling restart: the executor (its own `toolmesh serve --target=executor` process) stopped with SIGTERM and started again %d times during %s of load at %.0f req/s, with %.0f tool calls/s taking %s beside it\n\n",
		len(r.cycles), r.opts.Duration, r.opts.Rate, slowRate(r.opts.Rate), slowWait)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "restart\tSIGTERM to exit ms\tstart to served ms\tstop to served ms\t")
	for i, c := range r.cycles {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t\n", i+1, ms(c.exited.Sub(c.stop)), ms(c.served.Sub(c.started)), ms(c.served.Sub(c.stop)))
	}
	w.Flush()
	fmt.Fprintf(&b, "\nsent before a stop began: %d, failed %d (in flight when it began: %d, failed %d); besides, %d refused with 503 whose call reached the executor after the stop\n",
		t.before, t.beforeFailed, t.inFlight, t.inFlightFailed, t.before503)
	fmt.Fprintf(&b, "sent while the executor was away (stop to served again): %d, failed %d (503: %d)", t.gap, t.gapFailed, t.gap503)
	if n := len(t.gapFailLatency); n > 0 {
		fmt.Fprintf(&b, "; the failures answered in p50 %s ms, max %s ms", ms(percentile(t.gapFailLatency, 0.5)), ms(t.gapFailLatency[n-1]))
	}
	fmt.Fprintf(&b, "\nsent after the last restart served: %d, failed %d\n", t.after, t.afterFailed)
	for _, s := range t.samples {
		fmt.Fprintln(&b, "  failure:", s)
	}
	return b.String()
}

// figures are the phase's figures for bench/report.
func (r *restartReport) figures() *figures.LoadRestart {
	t := r.tally()
	msf := func(d time.Duration) float64 { return float64(d) / 1e6 }
	out := &figures.LoadRestart{Rate: r.opts.Rate, DurationSeconds: r.opts.Duration.Seconds(), Restarts: r.opts.Restarts,
		Before: t.before, BeforeFailed: t.beforeFailed, Before503: t.before503, InFlight: t.inFlight, InFlightFailed: t.inFlightFailed,
		Gap: t.gap, GapFailed: t.gapFailed, Gap503: t.gap503, After: t.after, AfterFailed: t.afterFailed}
	if n := len(t.gapFailLatency); n > 0 {
		out.GapFailP50Ms, out.GapFailMaxMs = msf(percentile(t.gapFailLatency, 0.5)), msf(t.gapFailLatency[n-1])
	}
	for _, c := range r.cycles {
		out.Cycles = append(out.Cycles, figures.LoadRestartCycle{DrainExitMs: msf(c.exited.Sub(c.stop)),
			StartToServedMs: msf(c.served.Sub(c.started)), StopToServedMs: msf(c.served.Sub(c.stop))})
	}
	return out
}
