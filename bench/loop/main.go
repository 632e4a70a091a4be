// Command loop measures the agent loop's own overhead: what toolmesh spends on a question when
// the model costs (almost) nothing.
//
// The workload is the standard question "What is 2 plus 3?" against a llama-server double
// (llamatest) that answers at once: step 1 calls calculator.add(a=2, b=3), step 2 answers in
// text, then the answer is composed — 2 iterations and a compose request per query, each
// answer checked (the answer, one call with output 5, stop reason answered, 2 iterations;
// anything else counts as an error). Clients send POST /v1/query (what users call), with
// -via grpc the api's gRPC Query, or with -via chat POST /v1/chat/completions in OpenAI's wire
// format (one user message, the model GET /v1/models lists, read once at the start; the
// answer's text, finish_reason stop and the toolmesh extension's calls, stop reason and
// iterations checked the same way), each client one question at a time, for -duration after
// a -warmup.
//
// Three ways to run the mesh, each with the MCP servers `toolmesh up` runs as its demo
// (calculator, converter, sqlite):
//   - inproc: every target in this process (cmd/toolmesh/app, as `toolmesh up`): the api and the
//     retriever call the executor, retriever and inference in the process, without gRPC; the
//     demo MCP servers over SSE on loopback;
//   - inproc-grpc: the same with the executor's, retriever's and inference's addresses given
//     (Unix sockets), so the targets talk gRPC to each other, as `up` did before issue 28;
//   - micro: `go build ./cmd/toolmesh`, then one `toolmesh serve --target=X` process per
//     target and one `toolmesh mcp NAME --transport sse` process per demo MCP server, on free
//     loopback ports. The double stays in this process.
//
// Model time is measured at the double (see model): the query's time minus its model time,
// divided by its iterations, is the loop's overhead per iteration. With one client each query's
// own model time is subtracted; with more, queries overlap at the double, so the mean model
// time per query is subtracted instead (marked ~).
//
// With -tls, micro mode's services talk mutual TLS (certificates from `toolmesh tls init`'s
// code, made in the run's folder) and the gRPC clients speak TLS to the api; REST stays plain.
//
//	go run ./bench/loop [-duration 10s] [-clients 1,32] [-mode inproc,inproc-grpc,micro] [-via rest,grpc,chat] [-tls] [-markdown] [-json FILE]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/bench/internal/loadavg"
)

type options struct {
	duration   time.Duration
	warmup     time.Duration
	clients    []int
	modes      []string
	vias       []string
	binary     string
	cpuprofile string
	memprofile string
	markdown   bool
	timeout    time.Duration
	logs       string
	noProxy    bool
	childEnv   []string
	jsonPath   string
	tls        bool
}

// Targets of the issue: the loop's own overhead per iteration at p50.
var targets = map[string]time.Duration{"inproc": time.Millisecond, "inproc-grpc": time.Millisecond, "micro": 1500 * time.Microsecond}

func main() {
	var o options
	var clients, modes, vias string
	fs := flag.NewFlagSet("loop", flag.ExitOnError)
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "timed phase per mode, API and client count")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "untimed phase before each timed one")
	fs.StringVar(&clients, "clients", "1,32", "comma-separated numbers of concurrent clients")
	fs.StringVar(&modes, "mode", "inproc,micro", "comma-separated modes: inproc (one process, as `toolmesh up`: the targets call each other in the process), inproc-grpc (one process, the targets talking gRPC over Unix sockets, as `up` before issue 28), micro (a process per target)")
	fs.StringVar(&vias, "via", "rest", "comma-separated APIs the clients call: rest (POST /v1/query), grpc (AgentService.Query), chat (POST /v1/chat/completions)")
	fs.StringVar(&o.binary, "binary", "", "toolmesh binary for micro mode; empty: go build ./cmd/toolmesh into a temporary folder")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of this process per timed phase to PREFIX-MODE-VIA-cN.pprof (in micro mode the mesh is in the child processes, not in it)")
	fs.StringVar(&o.memprofile, "memprofile", "", "write this process's allocation profile (whole run) to this file at the end; in inproc mode it holds the mesh's allocations")
	fs.BoolVar(&o.markdown, "markdown", false, "print a Markdown table")
	fs.StringVar(&o.logs, "logs", "", "folder for the mesh's logs (and micro mode's mcp.json and binary); empty: a temporary folder, removed at the end")
	fs.Func("child-env", "KEY=VALUE added to the environment of micro mode's processes (repeatable), e.g. GOMAXPROCS=1", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", v)
		}
		o.childEnv = append(o.childEnv, v)
		return nil
	})
	fs.BoolVar(&o.tls, "tls", false, "micro mode only: mutual TLS between the services (--tls.*) and TLS from the gRPC clients to the api")
	fs.BoolVar(&o.noProxy, "no-model-time", false, "point the mesh at the double directly, without the timing proxy: no model time (overhead/iter is then the whole query ÷ iterations), to see what the proxy costs")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound of one query; a query that exceeds it counts as an error")
	fs.StringVar(&o.jsonPath, "json", "", "also write every row's headline figures as JSON to this file, for bench/report")
	_ = fs.Parse(os.Args[1:])
	var err error
	if o.clients, err = parseInts(clients); err != nil {
		fmt.Fprintln(os.Stderr, "loop: -clients:", err)
		os.Exit(2)
	}
	o.modes, o.vias = splitList(modes), splitList(vias)
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "loop:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("go run ./bench/loop %s\n", strings.Join(os.Args[1:], " "))
	results, err := run(ctx, o, os.Stderr)
	if len(results) > 0 {
		report(os.Stdout, o, results)
	}
	if o.jsonPath != "" && err == nil {
		err = figures.Write(o.jsonPath, headline(o, results))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loop:", err)
		stop()
		os.Exit(1)
	}
}

func (o options) check() error {
	if o.duration <= 0 || o.warmup < 0 || o.timeout <= 0 {
		return fmt.Errorf("-duration and -timeout must be positive, -warmup not negative")
	}
	if len(o.clients) == 0 || len(o.modes) == 0 || len(o.vias) == 0 {
		return fmt.Errorf("-clients, -mode and -via need at least one value each")
	}
	for _, c := range o.clients {
		if c < 1 {
			return fmt.Errorf("-clients: %d is not positive", c)
		}
	}
	for _, m := range o.modes {
		if _, ok := targets[m]; !ok {
			return fmt.Errorf("-mode: %q is not inproc, inproc-grpc or micro", m)
		}
	}
	if o.tls && !slices.Equal(o.modes, []string{"micro"}) {
		return fmt.Errorf("-tls: micro mode only (give -mode micro)")
	}
	for _, v := range o.vias {
		if v != "rest" && v != "grpc" && v != "chat" {
			return fmt.Errorf("-via: %q is not rest, grpc or chat", v)
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// run measures every mode, API and client count, in that nesting, and returns what it
// measured (also when it stops on an error).
func run(ctx context.Context, o options, progress io.Writer) ([]result, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	dir := o.logs
	if dir == "" {
		tmp, err := os.MkdirTemp("", "toolmesh-bench-loop-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}

	m, err := startModel(!o.noProxy)
	if err != nil {
		return nil, err
	}
	defer m.close()

	if o.memprofile != "" {
		// Sample every allocation's bytes at the usual rate from the start; written at the end.
		defer func() {
			if f, err := os.Create(o.memprofile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	var results []result
	for _, mode := range o.modes {
		rs, err := runMode(ctx, o, mode, dir, m, logf)
		results = append(results, rs...)
		if err != nil {
			return results, fmt.Errorf("%s: %w", mode, err)
		}
	}
	return results, nil
}

func runMode(ctx context.Context, o options, mode, dir string, m *model, logf func(string, ...any)) (results []result, err error) {
	var ms *mesh
	start := time.Now()
	switch mode {
	case "inproc", "inproc-grpc":
		ms, err = startInproc(m.URL, dir+"/"+mode+".log", dir, mode == "inproc-grpc")
	case "micro":
		// Profiles of the mesh's processes need the self-profiling build of the same program.
		profiled := o.cpuprofile != "" && o.binary == "" && runtime.GOOS == "linux"
		bin := o.binary
		if bin == "" {
			logf("building ./cmd/toolmesh (profiled: %v)", profiled)
			if bin, err = buildBinary(ctx, dir, profiled); err != nil {
				return nil, err
			}
		}
		ms, err = startMicro(ctx, bin, dir, m.URL, profiled, o.childEnv, o.tls)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := ms.stop(); serr != nil {
			logf("%s: stopping the mesh: %v", mode, serr)
		}
	}()
	if err := waitReady(ctx, ms, 60*time.Second); err != nil {
		return nil, err
	}
	logf("%s: mesh ready in %s (REST %s, api gRPC %s)", mode, time.Since(start).Round(time.Millisecond), ms.rest, ms.grpc)

	for _, via := range o.vias {
		ask, closeAsker, err := newAsker(ctx, via, ms, slices.Max(o.clients), o.timeout)
		if err != nil {
			return results, err
		}
		for _, c := range o.clients {
			if err := ctx.Err(); err != nil {
				closeAsker()
				return results, err
			}
			r, err := measure(ctx, o, mode, via, c, ms, m, ask)
			if err != nil {
				closeAsker()
				return results, err
			}
			results = append(results, r)
			logf("%-6s %-4s clients %-3d %6d queries %7.1f q/s  p50 %6.2f ms  p99 %6.2f ms  overhead/iter p50 %5.0f µs p99 %6.0f µs  model %4.1f%%  cpu %5.0f µs/query  errors %d%s",
				mode, via, c, r.queries, r.qps, ms2(r.p50), ms2(r.p99), us(r.iterP50), us(r.iterP99),
				100*r.modelShare, us(r.cpuPerQuery), r.errors, firstErr(r))
			logf("       alloc in this process %.0f KB/query; REST answer %d bytes", r.allocPerQuery/1024, restBytes.Load())
			if line := r.perProcess(); line != "" {
				logf("       per query by process: %s", line)
			}
			if err := ms.exited(); err != nil {
				closeAsker()
				return results, err
			}
		}
		closeAsker()
	}
	return results, nil
}

// perProcess lists a micro row's CPU µs and context switches per query by child process.
func (r result) perProcess() string {
	var parts []string
	for _, name := range []string{"api", "inference", "retriever", "executor", "calculator", "converter", "sqlite"} {
		if t, ok := r.childCPU[name]; ok && r.queries+r.errors > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f µs %.1f cs", name, us(t)/float64(r.queries+r.errors), r.switches[name]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(", bench process %.1f cs", r.switches[""])
}

// totalSwitches is the context switches per query of this process and every child.
func (r result) totalSwitches() float64 {
	var n float64
	for _, v := range r.switches {
		n += v
	}
	return n
}

func firstErr(r result) string {
	if r.firstErr == "" {
		return ""
	}
	return " (first: " + r.firstErr + ")"
}

// measure warms up, then runs clients concurrent clients for o.duration on a fresh double.
func measure(ctx context.Context, o options, mode, via string, clients int, ms *mesh, m *model, ask asker) (result, error) {
	m.swap()
	warm := drive(ctx, ask, clients, o.warmup, m)
	if warm.errors > 0 {
		// Counted in the table only if they go on in the timed phase.
		fmt.Fprintf(os.Stderr, "%s %s clients %d: %d errors while warming up (first: %s)\n", mode, via, clients, warm.errors, warm.firstErr)
	}

	r := result{mode: mode, via: via, clients: clients, load: loadavg.Now()}
	cpu0 := selfCPU()
	child0, err := ms.childCPU()
	if err != nil {
		return r, err
	}
	mc0 := m.counters()
	sw0 := ms.switches()
	name := fmt.Sprintf("%s-%s-c%d", mode, via, clients)
	stopProfile, err := startProfile(o.cpuprofile, name)
	if err != nil {
		return r, err
	}
	if err := ms.startProfiles(); err != nil {
		stopProfile()
		return r, err
	}
	var allocs runtime.MemStats
	runtime.ReadMemStats(&allocs)
	alloc0 := allocs.TotalAlloc
	d := drive(ctx, ask, clients, o.duration, m)
	runtime.ReadMemStats(&allocs)
	r.allocPerQuery = float64(allocs.TotalAlloc-alloc0) / float64(max(1, len(d.samples)+d.errors))
	stopProfile()
	if err := ms.stopProfiles(o.cpuprofile + "-" + name); err != nil {
		return r, err
	}
	mc := m.counters().sub(mc0)
	sw1 := ms.switches()
	cpu := selfCPU() - cpu0
	child1, err := ms.childCPU()
	if err != nil {
		return r, err
	}
	r.childCPU = map[string]time.Duration{}
	var children time.Duration
	for name, t := range child1 {
		r.childCPU[name] = t - child0[name]
		children += t - child0[name]
	}
	r.fill(d, mc, cpu, children, len(ms.children) > 0)
	r.switches = map[string]float64{}
	if n := len(d.samples) + d.errors; n > 0 {
		for name, v := range sw1 {
			r.switches[name] = float64(v-sw0[name]) / float64(n)
		}
	}
	return r, nil
}

func startProfile(prefix, name string) (stop func(), err error) {
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(prefix + "-" + name + ".pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// report prints the table, then each mode's verdict against its target.
func report(w io.Writer, o options, results []result) {
	fmt.Fprintf(w, "%s, GOOS/GOARCH %s/%s, GOMAXPROCS %d, NumCPU %d; %s timed after %s warm-up per row; started %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU(),
		o.duration, o.warmup, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	header := []string{"mode", "via", "clients", "queries", "q/s", "p50 ms", "p99 ms",
		"overhead/iter p50 µs", "overhead/iter p99 µs", "model share", "model µs/query", "llama req/query", "llama conns/query",
		"errors", "CPU µs/query", "of which mesh children", "context switches/query", "alloc KB/query in this process", "load avg at start"}
	var rows [][]string
	for _, r := range results {
		approx := ""
		if r.clients > 1 {
			approx = "~"
		}
		mesh := "—"
		if r.mode == "micro" {
			mesh = fmt.Sprintf("%.0f", us(r.meshCPUPerQuery))
		}
		model := []string{fmt.Sprintf("%.1f%%", 100*r.modelShare), fmt.Sprintf("%.0f", us(r.modelPerQuery)),
			fmt.Sprintf("%.2f", r.llamaPerQuery), fmt.Sprintf("%.2f", r.llamaConnsPerQ)}
		if o.noProxy {
			model = []string{"—", "—", "—", "—"} // nothing measured them
		}
		row := []string{r.mode, r.via, strconv.Itoa(r.clients), strconv.Itoa(r.queries),
			fmt.Sprintf("%.1f", r.qps), fmt.Sprintf("%.2f", ms2(r.p50)), fmt.Sprintf("%.2f", ms2(r.p99)),
			fmt.Sprintf("%s%.0f", approx, us(r.iterP50)), fmt.Sprintf("%s%.0f", approx, us(r.iterP99))}
		row = append(row, model...)
		row = append(row, fmt.Sprintf("%d/%d", r.errors, r.queries+r.errors),
			fmt.Sprintf("%.0f", us(r.cpuPerQuery)), mesh, fmt.Sprintf("%.0f", r.totalSwitches()),
			fmt.Sprintf("%.0f", r.allocPerQuery/1024), r.load)
		rows = append(rows, row)
	}
	printTable(w, o.markdown, header, rows)
	fmt.Fprintln(w, "overhead/iter = (query time − its model time) ÷ iterations (2); ~ = with more than one client the mean model time per query is subtracted;")
	fmt.Fprintln(w, "model time = time llama requests spend in the timing proxy in front of the double (see bench/loop/model.go); CPU = this process (clients, proxy, double, and in inproc the mesh) + mesh children, per query")
	for _, r := range results {
		if line := r.perProcess(); line != "" {
			fmt.Fprintf(w, "%s %s %d clients, per query by process (CPU, context switches): %s\n", r.mode, r.via, r.clients, line)
		}
	}

	fmt.Fprintln(w)
	if o.noProxy {
		fmt.Fprintln(w, "-no-model-time: nothing was subtracted, so overhead/iter is the whole query ÷ 2 and no target is judged")
		return
	}
	header = []string{"mode", "via", "target", "measured (1 client)", "result"}
	rows = nil
	for _, r := range results {
		if r.clients != 1 {
			continue
		}
		verdict := "PASS"
		if r.errors > 0 || r.queries == 0 {
			verdict = "FAIL (errors)"
		} else if r.iterP50 > targets[r.mode] {
			verdict = "FAIL"
		}
		rows = append(rows, []string{r.mode, r.via, fmt.Sprintf("overhead/iter p50 ≤ %.0f µs", us(targets[r.mode])),
			fmt.Sprintf("%.0f µs", us(r.iterP50)), verdict})
	}
	if len(rows) > 0 {
		printTable(w, o.markdown, header, rows)
	}
}

// headline is the table's figures for bench/report.
func headline(o options, results []result) figures.Loop {
	out := figures.Loop{DurationSeconds: o.duration.Seconds()}
	for _, r := range results {
		out.Rows = append(out.Rows, figures.LoopRow{
			Mode: r.mode, Via: r.via, Clients: r.clients, Queries: r.queries, Errors: r.errors,
			QPS: r.qps, P50: ms2(r.p50), P99: ms2(r.p99), IterP50: us(r.iterP50), IterP99: us(r.iterP99),
			CPUPerQuery: us(r.cpuPerQuery), AllocKB: r.allocPerQuery / 1024, Target: us(targets[r.mode]),
		})
	}
	return out
}

func printTable(w io.Writer, markdown bool, header []string, rows [][]string) {
	if markdown {
		fmt.Fprintln(w, "| "+strings.Join(header, " | ")+" |")
		sep := make([]string, len(header))
		for i := range sep {
			sep[i] = "---:"
			if i < 2 {
				sep[i] = "---"
			}
		}
		fmt.Fprintln(w, "|"+strings.Join(sep, "|")+"|")
		for _, r := range rows {
			fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
}

func us(d time.Duration) float64  { return float64(d) / float64(time.Microsecond) }
func ms2(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
