// Command load sends mixed traffic at a fixed rate (open loop) to a toolmesh running every
// target in this process against the llama-server double, and prints a table per kind of
// request: sent, ok, errors, achieved rate, latency percentiles, and the process's resident
// memory and goroutines before and after.
//
//	go run ./bench/load -duration 60s -rate 200 -mix search=1,direct=1,call=1,question=1 [-json FILE]
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
	flag.DurationVar(&o.Duration, "duration", 60*time.Second, "how long to send measured traffic")
	flag.DurationVar(&o.Warmup, "warmup", 3*time.Second, "traffic sent before measuring, at the same rate")
	flag.Float64Var(&o.Rate, "rate", 200, "requests per second, all kinds together, sent on schedule")
	mix := flag.String("mix", "search=1,direct=1,call=1,question=1", "weights of the kinds: search, direct, call, question")
	flag.DurationVar(&o.Settle, "settle", 0, "extra wait after the load before measuring memory and goroutines")
	flag.StringVar(&o.GoroutineDump, "goroutines", "", "write the goroutines left after the load to this file")
	jsonPath := flag.String("json", "", "also write the table's figures as JSON to this file (errors included), for bench/report")
	flag.Parse()
	var err error
	if o.Mix, err = parseMix(*mix); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	r, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	fmt.Print(r.table())
	if *jsonPath != "" {
		if err := figures.Write(*jsonPath, r.headline()); err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(1)
		}
	}
	if r.errors() > 0 {
		fmt.Println()
		for _, e := range r.sampleErrors {
			fmt.Println("error:", e)
		}
		os.Exit(1)
	}
}
