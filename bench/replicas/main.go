// Command replicas shows that replicas share the load, without a cluster: it starts two
// executors, two retrievers, one inference and two apis as separate `toolmesh serve` processes
// (the callers given every replica's address as an "ipv4:A,B" target, as a headless Service's
// DNS name would), runs a mixed load through both apis, and prints how the calls spread over
// the executors, what a drain of one executor costs (it is stopped mid-load), and how soon it
// takes calls again once restarted.
//
//	go run ./bench/replicas [-phase 5s] [-workers 8] [-json FILE]
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
	flag.DurationVar(&o.Phase, "phase", 5*time.Second, "how long each phase (both up, one draining, rejoined) runs the load; the rejoined phase runs at least half of it past the restarted executor's first call")
	flag.IntVar(&o.Workers, "workers", 8, "concurrent clients, each sending its next request when the last is answered")
	jsonPath := flag.String("json", "", "also write the figures as JSON to this file, for bench/report")
	flag.Parse()
	r, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replicas:", err)
		os.Exit(1)
	}
	fmt.Print(r.table())
	if *jsonPath != "" {
		if err := figures.Write(*jsonPath, r.figures()); err != nil {
			fmt.Fprintln(os.Stderr, "replicas:", err)
			os.Exit(1)
		}
	}
}
