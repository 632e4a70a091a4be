// Command load sends mixed traffic at a fixed rate (open loop) to a toolmesh running every
// target in this process against the llama-server double, and prints a table per kind of
// request: sent, ok, errors, achieved rate, latency percentiles, and the process's resident
// memory and goroutines before and after.
//
// With -restarts N it then runs a rolling-restart phase on a second mesh: the executor as its
// own `toolmesh serve --target=executor` process (the binary built from cmd/toolmesh, or
// -binary), everything else in this process pointed at it; the same load runs for
// -restart-duration while the executor is stopped with SIGTERM (it drains and exits) and
// started again N times. It counts the requests sent before each stop that failed (the drain
// should finish them all), those sent while the executor was away (they should fail fast with
// 503) and those after, and times each stop until a tool call is served again. -duration 0
// runs that phase alone.
//
// With -sse-calls N it then runs a legacy SSE phase (issue 26) on a third mesh, with API tokens
// and the bench's slow MCP server: one token's calls of the slow tool are timed through REST at
// -sse-rate for -sse-duration alone, then again while another token keeps N calls of the same
// tool posted to one legacy SSE session (/sse/message), a refused one posted again after 100 ms.
// The target: the first token's p99 beside that flood stays within its own call time (p50
// alone) plus 100 ms. -duration 0 without -restarts runs that phase alone.
//
//	go run ./bench/load -duration 60s -rate 200 -mix search=1,direct=1,call=1,question=1 [-json FILE]
//	go run ./bench/load -duration 0 -restarts 2 -restart-duration 20s -rate 100
//	go run ./bench/load -duration 0 -sse-calls 48 -sse-duration 10s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
)

func main() {
	var o options
	flag.DurationVar(&o.Duration, "duration", 60*time.Second, "how long to send measured traffic (0: no load phase, only -restarts)")
	flag.DurationVar(&o.Warmup, "warmup", 3*time.Second, "traffic sent before measuring, at the same rate")
	flag.Float64Var(&o.Rate, "rate", 200, "requests per second, all kinds together, sent on schedule")
	mix := flag.String("mix", "search=1,direct=1,call=1,question=1", "weights of the kinds: search, direct, call, question")
	flag.DurationVar(&o.Settle, "settle", 0, "extra wait after the load before measuring memory and goroutines")
	flag.StringVar(&o.GoroutineDump, "goroutines", "", "write the goroutines left after the load to this file")
	var ro restartOptions
	flag.IntVar(&ro.Restarts, "restarts", 0, "rolling-restart phase: stop and start the executor this many times under the load (0: no such phase)")
	flag.DurationVar(&ro.Duration, "restart-duration", 20*time.Second, "rolling-restart phase: how long the load runs while the executor restarts")
	flag.StringVar(&ro.Binary, "binary", "", "rolling-restart phase: the toolmesh executable the executor runs as (empty: go build ./cmd/toolmesh into a temporary folder)")
	var so sseOptions
	flag.IntVar(&so.Calls, "sse-calls", 0, "legacy SSE phase: calls one token keeps posted to one /sse session while another token's calls are timed (0: no such phase)")
	flag.DurationVar(&so.Duration, "sse-duration", 10*time.Second, "legacy SSE phase: how long the other token's calls are timed, alone and then beside the flood")
	flag.Float64Var(&so.Rate, "sse-rate", 8, "legacy SSE phase: the other token's calls per second")
	jsonPath := flag.String("json", "", "also write the table's figures as JSON to this file (errors included), for bench/report")
	flag.Parse()
	var err error
	if o.Mix, err = parseMix(*mix); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	if o.Duration == 0 && ro.Restarts == 0 && so.Calls == 0 {
		fmt.Fprintln(os.Stderr, "load: -duration 0, no -restarts and no -sse-calls: nothing to run")
		os.Exit(2)
	}
	ro.Rate, ro.Mix, ro.Warmup = o.Rate, o.Mix, o.Warmup
	fig, failed, err := runAll(context.Background(), o, ro, so)
	if err == nil && *jsonPath != "" {
		err = figures.Write(*jsonPath, fig)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// runAll runs the phases asked for, prints them and returns their figures; failed says
// whether a request of the load phase failed, one sent before a restart's stop did, or a call
// of the SSE phase failed.
func runAll(ctx context.Context, o options, ro restartOptions, so sseOptions) (figures.Load, bool, error) {
	var fig figures.Load
	failed := false
	if o.Duration > 0 {
		r, err := run(ctx, o)
		if err != nil {
			return fig, false, err
		}
		fmt.Print(r.table())
		fig = r.headline()
		if r.errors() > 0 {
			failed = true
			fmt.Println()
			for _, e := range r.sampleErrors {
				fmt.Println("error:", e)
			}
		}
	}
	if ro.Restarts > 0 {
		if o.Duration > 0 {
			fmt.Println()
		}
		r, err := restartPhase(ctx, ro)
		if r != nil {
			fmt.Print(r.table())
		}
		if err != nil {
			return fig, failed, fmt.Errorf("rolling restart: %w", err)
		}
		fig.Restart = r.figures()
		failed = failed || fig.Restart.BeforeFailed > 0
	}
	if so.Calls > 0 {
		if o.Duration > 0 || ro.Restarts > 0 {
			fmt.Println()
		}
		r, err := ssePhase(ctx, so)
		if r != nil {
			fmt.Print(r.table())
		}
		if err != nil {
			return fig, failed, fmt.Errorf("legacy SSE: %w", err)
		}
		fig.SSE = r.figures()
		failed = failed || r.errors() > 0
	}
	return fig, failed, nil
}
