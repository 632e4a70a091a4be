package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/internal/gobuild"
)

type options struct {
	Phase   time.Duration
	Workers int
}

// report is what one run measured.
type report struct {
	// Spread is the tools/call count of each executor while both ran.
	Spread [2]int
	// Sent and Failed count the requests of each phase; FailedAfterStop are the failed requests
	// sent after the drain of executor 1 began.
	Sent, Failed    [3]int
	FailedAfterStop int
	// Window is from the stop to the last failed request (0 when none failed).
	Window time.Duration
	// DrainExit is how long executor 1 took to exit after SIGTERM.
	DrainExit time.Duration
	// Rejoin is from executor 1's restart to its first call.
	Rejoin time.Duration
	// RejoinSpread is the tools/call count of each executor in the last phase.
	RejoinSpread [2]int
	Errors       []string
}

func (r *report) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| phase | requests | failed | executor 1 calls | executor 2 calls |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| both running | %d | %d | %d | %d |\n", r.Sent[0], r.Failed[0], r.Spread[0], r.Spread[1])
	fmt.Fprintf(&b, "| executor 1 drained and stopped (SIGTERM) | %d | %d (%d sent after the stop began) | — | — |\n", r.Sent[1], r.Failed[1], r.FailedAfterStop)
	fmt.Fprintf(&b, "| executor 1 restarted | %d | %d | %d | %d |\n", r.Sent[2], r.Failed[2], r.RejoinSpread[0], r.RejoinSpread[1])
	fmt.Fprintf(&b, "\nexecutor 1 exited %s after SIGTERM; failures within %s of the stop; it took calls again %s after its restart\n",
		r.DrainExit.Round(time.Millisecond), r.Window.Round(time.Millisecond), r.Rejoin.Round(time.Millisecond))
	for i, e := range r.Errors {
		if i == 5 {
			fmt.Fprintf(&b, "... %d more errors\n", len(r.Errors)-5)
			break
		}
		fmt.Fprintln(&b, "error:", e)
	}
	return b.String()
}

func (r *report) figures() figures.Replicas {
	return figures.Replicas{
		Executor1: r.Spread[0], Executor2: r.Spread[1],
		Requests: r.Sent[0] + r.Sent[1] + r.Sent[2], Failed: r.Failed[0] + r.Failed[1] + r.Failed[2],
		FailedAfterStop: r.FailedAfterStop, WindowMs: ms(r.Window), DrainExitMs: ms(r.DrainExit), RejoinMs: ms(r.Rejoin),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// proc is one toolmesh process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (p *proc) stop(sig syscall.Signal, within time.Duration) error {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.err
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit within %s of %s", p.name, within, sig)
	}
}

// mesh is the processes of one run.
type mesh struct {
	bin, dir  string
	procs     []*proc
	exe       [2]string // executor gRPC addresses
	metrics   [2]string // executor metrics addresses
	rest      [2]string // the apis' REST base URLs
	exeArgs   [2][]string
	startedAt map[string]int
}

func (m *mesh) start(name string, args ...string) (*proc, error) {
	logPath := filepath.Join(m.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(m.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	m.procs = append(m.procs, p)
	return p, nil
}

func (m *mesh) close() {
	for i := len(m.procs) - 1; i >= 0; i-- {
		select {
		case <-m.procs[i].done:
		default:
			_ = m.procs[i].stop(syscall.SIGTERM, 10*time.Second)
		}
	}
}

func freeAddrs(n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

func startMesh(ctx context.Context) (*mesh, error) {
	dir, err := os.MkdirTemp("", "toolmesh-replicas-")
	if err != nil {
		return nil, err
	}
	m := &mesh{dir: dir, bin: filepath.Join(dir, "toolmesh")}
	if err := gobuild.Build(ctx, repoRoot(), m.bin, "./cmd/toolmesh"); err != nil {
		return nil, err
	}
	a, err := freeAddrs(12)
	if err != nil {
		return nil, err
	}
	calc, inf := a[0], a[1]
	m.exe, m.metrics = [2]string{a[2], a[3]}, [2]string{a[4], a[5]}
	ret := [2]string{a[6], a[7]}
	apiG, apiH := [2]string{a[8], a[9]}, [2]string{a[10], a[11]}
	cfg := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `{"mcpServers": {"calculator": {"url": "http://%s/mcp", "transport": "streamable-http"}}}`, calc), 0o600); err != nil {
		return nil, err
	}
	exes := "ipv4:" + m.exe[0] + "," + m.exe[1]
	rets := "ipv4:" + ret[0] + "," + ret[1]
	steps := [][]string{
		{"calculator", "mcp", "calculator", "--transport", "streamable-http", "--addr", calc, "--log.level", "warn"},
	}
	for i := range 2 {
		m.exeArgs[i] = []string{"serve", "--target=executor", "--executor.grpc-addr=" + m.exe[i], "--mcp-config=" + cfg,
			"--metrics-addr=" + m.metrics[i], "--drain-timeout=5s", "--log.level=warn"}
		steps = append(steps, append([]string{"executor" + strconv.Itoa(i+1)}, m.exeArgs[i]...))
	}
	for i := range 2 {
		steps = append(steps, []string{"retriever" + strconv.Itoa(i+1), "serve", "--target=retriever", "--retriever.grpc-addr=" + ret[i],
			"--retriever.executor-addr=" + exes, "--drain-timeout=5s", "--log.level=warn"})
	}
	// No model: the load is tool calls, direct queries and searches, which need none.
	steps = append(steps, []string{"inference", "serve", "--target=inference", "--inference.grpc-addr=" + inf,
		"--inference.llm.url=http://127.0.0.1:1", "--log.level=warn"})
	for i := range 2 {
		m.rest[i] = "http://" + apiH[i]
		steps = append(steps, []string{"api" + strconv.Itoa(i+1), "serve", "--target=api", "--api.http-addr=" + apiH[i], "--api.grpc-addr=" + apiG[i],
			"--api.executor-addr=" + exes, "--api.retriever-addr=" + rets, "--api.inference-addr=" + inf, "--drain-timeout=5s",
			"--api.rate-limit=0", "--log.level=warn"})
	}
	for _, s := range steps {
		if _, err := m.start(s[0], s[1:]...); err != nil {
			m.close()
			return nil, err
		}
	}
	for _, base := range m.rest {
		if err := waitReady(ctx, m, base, 60*time.Second); err != nil {
			m.close()
			return nil, err
		}
	}
	// An api's /readyz asks one retriever; each one must have synced before the load, as a
	// readiness probe on its gRPC health ensures in Kubernetes and compose.
	for _, addr := range ret {
		if err := waitServing(ctx, addr, "toolmesh.v1.RetrieverService", 60*time.Second); err != nil {
			m.close()
			return nil, err
		}
	}
	return m, nil
}

// waitServing waits until the gRPC server at addr reports service SERVING.
func waitServing(ctx context.Context, addr, service string, timeout time.Duration) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: service})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last = fmt.Sprint(resp.GetStatus(), err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s at %s not serving within %s: %s", service, addr, timeout, last)
}

// repoRoot is the module root, found from the working directory up.
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if b, _ := os.ReadFile(filepath.Join(d, "go.mod")); strings.Contains(string(b), "module github.com/toolmesh/toolmesh\n") {
				return d
			}
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func waitReady(ctx context.Context, m *mesh, base string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		for _, p := range m.procs {
			select {
			case <-p.done:
				b, _ := os.ReadFile(p.log)
				return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, b)
			default:
			}
		}
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = string(b)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready within %s: %s", base, timeout, last)
}

// toolCalls is an executor's count of tools/call sent to MCP servers, from its /metrics.
func toolCalls(addr string) (int, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "mcp_client_operation_duration_seconds_count{") || !strings.Contains(line, `mcp_method_name="tools/call"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			n += v
		}
	}
	return int(n), sc.Err()
}

// result is one request of the load.
type result struct {
	sent time.Time
	err  error
}

// load sends requests from o.Workers clients over both apis until ctx ends.
func load(ctx context.Context, m *mesh, workers int) []result {
	var mu sync.Mutex
	var out []result
	var seq atomic.Int64
	hc := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n := seq.Add(1)
				base := m.rest[n%2]
				start := time.Now()
				err := request(hc, base, int(n%5))
				if ctx.Err() != nil && err != nil {
					return // cut by the end of the phase, not a failure
				}
				mu.Lock()
				out = append(out, result{sent: start, err: err})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// request is one of a mix: tool calls (3 in 5), a direct query, a search.
func request(hc *http.Client, base string, kind int) error {
	var resp *http.Response
	var err error
	switch kind {
	case 0, 1, 2:
		resp, err = hc.Post(base+"/v1/tools/calculator/add:call", "application/json", strings.NewReader(`{"arguments":{"a":2,"b":3}}`))
	case 3:
		resp, err = hc.Post(base+"/v1/query", "application/json", strings.NewReader(`{"query":"@calculator.add({\"a\":2,\"b\":3})"}`))
	default:
		resp, err = hc.Get(base + "/v1/tools:search?k=2&q=" + url.QueryEscape("add two numbers"))
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %.200s", resp.Request.URL.Path, resp.StatusCode, b)
	}
	if kind == 3 {
		var q struct {
			Answer string `json:"answer"`
		}
		if json.Unmarshal(b, &q) != nil || q.Answer != "5" {
			return fmt.Errorf("direct query answered %.200s", b)
		}
	}
	return nil
}

func counts(m *mesh) ([2]int, error) {
	var out [2]int
	for i, a := range m.metrics {
		n, err := toolCalls(a)
		if err != nil {
			return out, fmt.Errorf("executor %d metrics: %w", i+1, err)
		}
		out[i] = n
	}
	return out, nil
}

func run(ctx context.Context, o options) (*report, error) {
	if o.Workers <= 0 || o.Phase <= 0 {
		return nil, errors.New("-workers and -phase must be positive")
	}
	m, err := startMesh(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { m.close(); _ = os.RemoveAll(m.dir) }()
	r := &report{}
	record := func(phase int, res []result, stop time.Time) {
		r.Sent[phase] += len(res)
		for _, x := range res {
			if x.err == nil {
				continue
			}
			r.Failed[phase]++
			r.Errors = append(r.Errors, x.err.Error())
			if phase == 1 && !x.sent.Before(stop) {
				r.FailedAfterStop++
				if w := x.sent.Sub(stop); w > r.Window {
					r.Window = w
				}
			}
		}
	}

	// 1. Both executors up.
	before, err := counts(m)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, o.Phase)
	res := load(pctx, m, o.Workers)
	cancel()
	after, err := counts(m)
	if err != nil {
		return nil, err
	}
	r.Spread = [2]int{after[0] - before[0], after[1] - before[1]}
	record(0, res, time.Time{})

	// 2. Executor 1 drains and stops while the load goes on.
	exe1 := m.procs[1]
	pctx, cancel = context.WithTimeout(ctx, o.Phase)
	done := make(chan []result, 1)
	go func() { done <- load(pctx, m, o.Workers) }()
	time.Sleep(o.Phase / 5)
	stop := time.Now()
	if err := exe1.stop(syscall.SIGTERM, 15*time.Second); err != nil {
		cancel()
		return nil, fmt.Errorf("executor 1: %w", err)
	}
	r.DrainExit = time.Since(stop)
	res = <-done
	cancel()
	record(1, res, stop)

	// 3. Executor 1 back at the same address: how soon does it take calls again?
	before2, err := toolCalls(m.metrics[1])
	if err != nil {
		return nil, fmt.Errorf("executor 2 metrics: %w", err)
	}
	restarted := time.Now()
	if _, err := m.start("executor1-again", m.exeArgs[0]...); err != nil {
		return nil, err
	}
	// The phase lasts o.Phase, and at least o.Phase/2 past the rejoin: the api's next try of
	// the address may come up to its reconnect backoff's 3.6 s after the loss, and the phase
	// is to show the two sharing again. It waits for the rejoin at most rejoinWait.
	const rejoinWait = 15 * time.Second
	pctx, cancel = context.WithCancel(ctx)
	defer cancel()
	go func() { done <- load(pctx, m, o.Workers) }()
	for r.Rejoin == 0 && time.Since(restarted) < rejoinWait && ctx.Err() == nil {
		if n, err := toolCalls(m.metrics[0]); err == nil && n > 0 {
			r.Rejoin = time.Since(restarted)
		}
		time.Sleep(20 * time.Millisecond)
	}
	end := max(o.Phase, r.Rejoin+o.Phase/2)
	select {
	case <-ctx.Done():
	case <-time.After(end - time.Since(restarted)):
	}
	cancel()
	res = <-done
	after, err = counts(m)
	if err != nil {
		return nil, err
	}
	r.RejoinSpread = [2]int{after[0], after[1] - before2}
	record(2, res, time.Time{})
	if r.Rejoin == 0 {
		return r, fmt.Errorf("executor 1 took no call within %s of its restart", rejoinWait)
	}
	return r, nil
}
