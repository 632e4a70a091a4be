package main

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
)

// Issue 16's targets: the policy decision and the Host/Origin checks together cost at most
// this much per call (p50); mutual TLS has no target, its cost is reported.
const securityMaxCheckNS = 5000.0

// goBenchLine is one line of `go test -bench` output: the name (without the GOMAXPROCS suffix)
// and what follows the iteration count, value-unit pairs.
var goBenchLine = regexp.MustCompile(`(?m)^(Benchmark[^\s]+?)(?:-\d+)?\s+\d+\s+(.+)$`)

// goBench holds the runs of each benchmark of an output: per run, each unit's value.
type goBench map[string][]map[string]float64

func parseGoBench(out string) goBench {
	b := goBench{}
	for _, m := range goBenchLine.FindAllStringSubmatch(out, -1) {
		f := strings.Fields(m[2])
		run := map[string]float64{}
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				run[f[i+1]] = v
			}
		}
		b[m[1]] = append(b[m[1]], run)
	}
	return b
}

// median is the median over the runs of name's unit; NaN when there are none.
func (b goBench) median(name, unit string) float64 {
	var vs []float64
	for _, run := range b[name] {
		if v, ok := run[unit]; ok {
			vs = append(vs, v)
		}
	}
	return median(vs)
}

// median is the median of vs (sorted in place); NaN when vs is empty.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

// securityBenches are the Go benchmarks of issue 16's costs, by package.
var securityBenches = []struct{ pkg, bench string }{
	{"./internal/policy", "^BenchmarkDecide"},
	{"./internal/webguard", "^BenchmarkCheck$"},
	{"./internal/server", "^BenchmarkCallMutualTLS$"},
}

// tlsPair is one alternated pair of agent-loop runs in microservices mode, mTLS off and on.
type tlsPair struct{ Off, On figures.Loop }

func runSecurity(ctx context.Context, r *runner, s *section) {
	pairs, loopArgs := 3, []string{"-mode", "micro", "-clients", "1", "-via", "rest,grpc", "-duration", "8s", "-markdown"}
	benchArgs, shownBench := []string{"-test.benchtime", "1s", "-test.count", "3"}, []string{"-benchtime", "1s", "-count", "3"}
	if r.quick {
		pairs, loopArgs = 1, []string{"-mode", "micro", "-clients", "1", "-via", "rest,grpc", "-duration", "1s", "-warmup", "200ms", "-markdown"}
		benchArgs, shownBench = []string{"-test.benchtime", "20x", "-test.count", "1"}, []string{"-benchtime", "20x", "-count", "1"}
	}
	s.Intro = []string{
		"What closed-by-default costs a call (Go benchmarks): the policy's decision before a call at the " +
			"issue's scale (1,000 tools on 50 servers, a token scope of 100 patterns, servers' allowed and " +
			"excluded globs), the REST port's Host/Origin/Content-Type checks, and one gRPC call between " +
			"services on a kept connection with mutual TLS against plaintext (medians of the runs). Then the " +
			"agent-loop benchmark in microservices mode (one `toolmesh serve` per target), 1 client, with " +
			"mutual TLS between the services off and on (`-tls`), alternated " + strconv.Itoa(pairs) + " time(s). " +
			"Targets: policy decision + checks ≤ 5 µs p50 per call; the mTLS ratio is reported.",
	}
	bench := goBench{}
	for _, sb := range securityBenches {
		dir := strings.TrimPrefix(sb.pkg, "./")
		c := r.exec(ctx, spec{
			shown: "go test", bin: r.testBinary(sb.pkg), dir: dir, timeout: r.timeout(5 * time.Minute),
			args:     append([]string{"-test.run", "^$", "-test.bench", sb.bench, "-test.benchmem"}, benchArgs...),
			shownArg: append(append([]string{"-run", "^$", "-bench", sb.bench, "-benchmem"}, shownBench...), sb.pkg),
		})
		s.Cmds = append(s.Cmds, c)
		if c.Err != "" {
			s.Err = sb.bench + ": " + c.Err
			return
		}
		for name, runs := range parseGoBench(c.Output) {
			bench[name] = runs
		}
	}
	var runs []tlsPair
	for i := range pairs {
		var p tlsPair
		for _, on := range []bool{false, true} {
			args := append(append([]string(nil), loopArgs...), "-binary", r.program("./cmd/toolmesh"))
			file := fmt.Sprintf("tls-%d-off.json", i)
			if on {
				args = append(args, "-tls")
				file = fmt.Sprintf("tls-%d-on.json", i)
			}
			var f figures.Loop
			c, err := r.runJSON(ctx, spec{shown: "go run ./bench/loop", bin: r.program("./bench/loop"), markdown: true,
				timeout: r.timeout(5 * time.Minute), args: args}, file, &f)
			s.Cmds = append(s.Cmds, c)
			if err != nil {
				s.Err = err.Error()
				return
			}
			if on {
				p.On = f
			} else {
				p.Off = f
			}
		}
		runs = append(runs, p)
	}
	s.Rows = securityRows(bench, runs)
}

func securityRows(b goBench, pairs []tlsPair) []row {
	issue := "16 security"
	decide := b.median("BenchmarkDecideCall", "p50-ns")
	var check float64
	for _, name := range []string{"BenchmarkCheck/console-post", "BenchmarkCheck/named-get", "BenchmarkCheck/cors-post"} {
		if v := b.median(name, "p50-ns"); v > check {
			check = v
		}
	}
	both := decide + check
	plain, mtls := b.median("BenchmarkCallMutualTLS/plaintext", "ns/op"), b.median("BenchmarkCallMutualTLS/mutual-tls", "ns/op")
	rows := []row{
		{issue, "policy decision before a call + Host/Origin checks (the slowest request kind), p50", ns(both),
			"—", math.NaN(), "≤ " + ns(securityMaxCheckNS), judge(both <= securityMaxCheckNS)},
		{issue, "one gRPC call between services on a kept connection, mutual TLS vs plaintext", ns(mtls), ns(plain),
			ratio(mtls, plain), "reported", info},
	}
	for _, via := range []string{"rest", "grpc"} {
		var ratios []float64
		errs := 0
		for _, p := range pairs {
			off, okOff := p.Off.Find("micro", via, 1)
			on, okOn := p.On.Find("micro", via, 1)
			if okOff && okOn {
				ratios = append(ratios, ratio(on.IterP50, off.IterP50))
				errs += off.Errors + on.Errors
			}
		}
		if len(ratios) == 0 {
			rows = append(rows, row{issue, "agent loop, microservices, mTLS on vs off, " + via, "not measured", "", math.NaN(), "", failed})
			continue
		}
		med := median(ratios)
		v := info
		if errs > 0 {
			v = failed
		}
		rows = append(rows, row{issue, fmt.Sprintf("agent loop overhead per iteration p50, microservices, %s, 1 client: mTLS on ÷ off (median of %d pair(s); %d failed queries)", via, len(ratios), errs),
			fmt.Sprintf("%.2f×", med), "1.00×", med, "reported", v})
	}
	return rows
}

// ns is a duration in nanoseconds, in µs from 1 µs.
func ns(v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case v >= 10_000:
		return us(v / 1000)
	case v >= 1000:
		return fmt.Sprintf("%.1f µs", v/1000)
	}
	return thousands(v, 0) + " ns"
}
