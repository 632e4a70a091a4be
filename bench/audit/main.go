// Command audit measures what the audit trail (issue 27) costs a tool call, side by side in
// one run:
//
//   - REST tool calls (POST /v1/tools/calculator/add:call: gateway, gRPC, executor, the demo
//     calculator over SSE) on two meshes in this process, one without an audit trail and one
//     writing it to a file (--audit.file; --audit.arguments as -arguments), at 1 and at
//     -callers concurrent callers, in alternating rounds so that a busy machine weighs on both
//     alike: p50, p90, p99, calls/s and the CPU time this process spends per call
//   - the Recorder alone: what Record costs its caller (p50), and how many records a second
//     its writer turns into the file when one caller records as fast as it can
//   - the trail the audited mesh wrote, verified (audit.Verify), its records counted against
//     the calls made
//
// Usage:
//
//	go run ./bench/audit [-callers 16] [-duration 4s] [-rounds 4] [-arguments digest|full] [-markdown] [-json FILE] [-cpuprofile FILE]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/bench/internal/callstats"
	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/bench/internal/inproc"
	"github.com/toolmesh/toolmesh/bench/internal/loadavg"
	"github.com/toolmesh/toolmesh/internal/audit"
)

// Targets of issue 27: what the trail may add to a call's p50, and what it may take off calls/s.
const (
	targetAddedP50US = 10.0
	targetMinRate    = 0.95
)

func main() {
	callers := flag.Int("callers", 16, "concurrent callers of the second row (the first is 1)")
	duration := flag.Duration("duration", 4*time.Second, "length of one measured round")
	rounds := flag.Int("rounds", 4, "rounds of each mesh, alternating")
	arguments := flag.String("arguments", audit.ArgumentsDigest, "--audit.arguments of the audited mesh: digest or full")
	markdown := flag.Bool("markdown", false, "print Markdown tables (always; kept for bench/report)")
	jsonPath := flag.String("json", "", "also write the figures as JSON to this file, for bench/report")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (both meshes are in this process) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "audit:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	_ = markdown
	figs := &figures.Audit{Callers: *callers, Arguments: *arguments}
	if err := run(figs, *callers, *duration, *rounds, *arguments); err != nil {
		fmt.Fprintln(os.Stderr, "audit:", err)
		os.Exit(1)
	}
	if *jsonPath != "" {
		if err := figures.Write(*jsonPath, figs); err != nil {
			fmt.Fprintln(os.Stderr, "audit:", err)
			os.Exit(1)
		}
	}
}

func run(figs *figures.Audit, callers int, duration time.Duration, rounds int, arguments string) error {
	if callers < 1 || rounds < 1 || duration <= 0 {
		return errors.New("-callers, -rounds and -duration must be positive")
	}
	dir, err := os.MkdirTemp("", "audit-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	trail := filepath.Join(dir, "audit.jsonl")
	off, stopOff, err := startMesh()
	if err != nil {
		return fmt.Errorf("mesh without a trail: %w", err)
	}
	defer stopOff()
	on, stopOn, err := startMesh("--audit.file="+trail, "--audit.arguments="+arguments)
	if err != nil {
		return fmt.Errorf("mesh with a trail: %w", err)
	}
	load0 := loadavg.Now()
	start := time.Now()
	fmt.Printf("REST tool calls, audit trail off vs on (a file, --audit.arguments=%s), %s, GOMAXPROCS %d, %d rounds of %s each, alternating\n\n",
		arguments, runtime.Version(), runtime.GOMAXPROCS(0), rounds, duration)
	fmt.Println("| audit | callers | calls | calls/s | p50 | p90 | p99 | CPU/call |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	var onCalls atomic.Int64
	type cmp struct{ addedP50, rate, cpu float64 }
	cmps := map[int]cmp{}
	for _, n := range []int{1, callers} {
		var o, a callstats.Stats
		for r := range rounds {
			// Alternate which goes first, so neither always follows the other's garbage.
			order := []bool{false, true}
			if r%2 == 1 {
				order = []bool{true, false}
			}
			for _, audited := range order {
				s, base, count := &o, off, (*atomic.Int64)(nil)
				if audited {
					s, base, count = &a, on, &onCalls
				}
				call, closeIdle := restCall(base, n, count)
				err := s.Round(n, duration, call)
				closeIdle()
				if err != nil {
					return fmt.Errorf("audit %v, %d callers: %w", audited, n, err)
				}
			}
		}
		fmt.Println(o.Row("off", n))
		fmt.Println(a.Row("on", n))
		figs.Calls = append(figs.Calls, callFigures(&o, false, n), callFigures(&a, true, n))
		cmps[n] = cmp{callstats.Micro(a.P(50) - o.P(50)), a.Rate() / o.Rate(), callstats.Micro(a.CPUPerCall() - o.CPUPerCall())}
	}
	fmt.Println()
	for _, n := range []int{1, callers} {
		c := cmps[n]
		fmt.Printf("at %d caller(s): the trail adds %+.1f µs to p50 and %+.1f µs of CPU per call; calls/s %.3f× off\n", n, c.addedP50, c.cpu, c.rate)
	}

	// Rounds seconds apart see different moments of a shared machine; one caller alternating a
	// call on each mesh sees the same ones: the p50 the target is judged by.
	callOff, closeOff := restCall(off, 1, nil)
	callOn, closeOn := restCall(on, 1, &onCalls)
	offP50, onP50, pairs, err := paired(time.Duration(rounds)*duration, callOff, callOn)
	closeOff()
	closeOn()
	if err != nil {
		return fmt.Errorf("paired calls: %w", err)
	}
	figs.PairedOffP50, figs.PairedOnP50, figs.Pairs = callstats.Micro(offP50), callstats.Micro(onP50), pairs
	fmt.Printf("one caller alternating a call on each mesh, %d pairs: p50 off %.1f µs, on %.1f µs: the trail adds %+.1f µs\n",
		pairs, figs.PairedOffP50, figs.PairedOnP50, figs.PairedOnP50-figs.PairedOffP50)
	fmt.Printf("targets: p50 ≤ +%.0f µs (paired), calls/s ≥ %.2f× off at %d callers\n\n", targetAddedP50US, targetMinRate, callers)

	// Every call of the audited mesh is in its trail, which holds.
	stopOn()
	files, err := audit.Files(trail)
	if err != nil {
		return err
	}
	rep, err := audit.Verify(files, nil)
	if err != nil {
		return fmt.Errorf("the audited mesh's trail: %w", err)
	}
	calls, events, err := countRecords(files)
	if err != nil {
		return err
	}
	figs.Verified, figs.TrailRecords, figs.Calls0 = true, calls, int(onCalls.Load())
	fmt.Printf("the audited mesh's trail: %d files, %d call records for %d calls made (warm-ups included), %d declared dropped, %d other records (the pins of the demo servers' tools); audit verify: ok\n\n",
		rep.Files, calls, onCalls.Load(), rep.Dropped, events)
	if int64(calls)+rep.Dropped != onCalls.Load() {
		return fmt.Errorf("the trail holds %d call records and declares %d dropped for %d calls", calls, rep.Dropped, onCalls.Load())
	}

	if err := recorderAlone(figs, dir, arguments); err != nil {
		return err
	}
	load1 := loadavg.Now()
	fmt.Printf("\ntook %s; load average %s → %s: %s\n", time.Since(start).Round(time.Second), load0, load1, loadavg.Verdict(load0, load1, runtime.NumCPU()))
	return nil
}

// recorderAlone measures Record from its caller's side, and the writer's pace when one caller
// records as fast as it can.
func recorderAlone(figs *figures.Audit, dir, arguments string) error {
	file := filepath.Join(dir, "alone.jsonl")
	r, err := audit.New(audit.Config{File: file, Arguments: arguments}, audit.Options{})
	if err != nil {
		return err
	}
	args, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	rec := audit.Record{Token: "bench", Client: "127.0.0.1:50000", Via: "rest", Origin: audit.OriginCall, Tool: "calculator.add",
		Arguments: args, ResultBytes: 40, Duration: 300 * time.Microsecond, Decision: audit.Allowed}
	const n = 200_000
	lat := make([]time.Duration, 0, n)
	ctx := context.Background()
	start := time.Now()
	for range n {
		t0 := time.Now()
		r.Record(ctx, rec)
		lat = append(lat, time.Since(t0))
	}
	if err := r.Close(); err != nil && !strings.Contains(err.Error(), "dropped") {
		return err
	}
	elapsed := time.Since(start)
	rep, err := audit.Verify([]string{file}, nil)
	if err != nil {
		return fmt.Errorf("the Recorder's own trail: %w", err)
	}
	slices.Sort(lat)
	written := rep.Records - 1
	figs.RecordNs = float64(lat[len(lat)/2].Nanoseconds())
	figs.WriterPerSec = float64(written) / elapsed.Seconds()
	fmt.Println("| the Recorder alone | figure |")
	fmt.Println("|---|---:|")
	fmt.Printf("| Record, the caller's cost, p50 (p99) | %d ns (%d ns) |\n", lat[len(lat)/2].Nanoseconds(), lat[len(lat)*99/100].Nanoseconds())
	fmt.Printf("| records written a second, one caller recording %d as fast as it can | %.0f |\n", n, figs.WriterPerSec)
	fmt.Printf("| of which dropped (the queue of 8,192 full; declared in the trail) | %d |\n", rep.Dropped)
	return nil
}

// restCall is one REST call of calculator.add on the mesh at base, checked; count, when set,
// counts every call made (warm-ups included).
func restCall(base string, n int, count *atomic.Int64) (func() error, func()) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}, Timeout: 10 * time.Second}
	url := base + "/v1/tools/calculator/add:call"
	return func() error {
		if count != nil {
			count.Add(1)
		}
		resp, err := client.Post(url, "application/json", strings.NewReader(`{"arguments":{"a":2,"b":3}}`))
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && (resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"text":"5"`)) {
			err = fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		return err
	}, client.CloseIdleConnections
}

// paired makes calls for d, one at a time, alternating a call of each (which goes first
// alternates too), and returns the p50 of each and the pairs made.
func paired(d time.Duration, a, b func() error) (time.Duration, time.Duration, int, error) {
	var la, lb []time.Duration
	timed := func(call func() error, lat *[]time.Duration) error {
		t0 := time.Now()
		err := call()
		*lat = append(*lat, time.Since(t0))
		return err
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
		first, second, lf, ls := a, b, &la, &lb
		if len(la)%2 == 1 {
			first, second, lf, ls = b, a, &lb, &la
		}
		if err := errors.Join(timed(first, lf), timed(second, ls)); err != nil {
			return 0, 0, 0, err
		}
	}
	p50 := func(l []time.Duration) time.Duration { slices.Sort(l); return l[len(l)/2] }
	return p50(la), p50(lb), len(la), nil
}

func callFigures(s *callstats.Stats, on bool, n int) figures.AuditCalls {
	return figures.AuditCalls{Audit: on, Callers: n, Calls: s.Calls(), CallsPerSec: s.Rate(), P50: callstats.Micro(s.P(50)),
		P90: callstats.Micro(s.P(90)), P99: callstats.Micro(s.P(99)), CPUPerCall: callstats.Micro(s.CPUPerCall())}
}

// startMesh runs the demo MCP servers, the executor and the api in this process, as `toolmesh
// up` does but without a model or a retriever (direct calls need neither), with extra flags, and
// returns the REST base URL once ready.
func startMesh(extra ...string) (string, func(), error) {
	return inproc.Start("audit", append([]string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--api.retriever-addr=", "--api.inference-addr=", "--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0",
		"--demo.sqlite-addr=127.0.0.1:0", "--drain-timeout=2s"}, extra...), []string{"demo", "executor", "api"}, time.Minute)
}

// countRecords counts the trail's call records and its other records but the files' start
// records (the pin events the mesh records when it first sees its tools, for one).
func countRecords(files []string) (calls, events int, err error) {
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return 0, 0, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				f.Close()
				return 0, 0, fmt.Errorf("%s: %w", name, err)
			}
			switch r.Type {
			case "", "call":
				calls++
			case "start":
			default:
				events++
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return 0, 0, err
		}
	}
	return calls, events, nil
}
