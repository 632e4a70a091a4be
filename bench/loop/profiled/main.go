//go:build unix

// Command profiled is cmd/toolmesh that can profile itself: `go run ./bench/loop -mode micro
// -cpuprofile PREFIX` runs it instead of the plain binary, so that each mesh process writes a
// CPU profile of exactly the bench's timed phases. It is the same program otherwise (cli.Main).
//
// With TOOLMESH_BENCH_PROFILE=PATH set, SIGUSR1 starts a CPU profile into PATH and SIGUSR2
// stops it and then creates PATH.done, which tells the bench the file is complete.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if path := os.Getenv("TOOLMESH_BENCH_PROFILE"); path != "" {
		go profileOnSignal(ctx, path)
	}
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func profileOnSignal(ctx context.Context, path string) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	var f *os.File
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sigs:
			switch {
			case s == syscall.SIGUSR1 && f == nil:
				var err error
				if f, err = os.Create(path); err != nil {
					fmt.Fprintln(os.Stderr, "profiled:", err)
					continue
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					fmt.Fprintln(os.Stderr, "profiled:", err)
					f.Close()
					f = nil
				}
			case s == syscall.SIGUSR2 && f != nil:
				pprof.StopCPUProfile()
				f.Close()
				f = nil
				if err := os.WriteFile(path+".done", nil, 0o644); err != nil {
					fmt.Fprintln(os.Stderr, "profiled:", err)
				}
			}
		}
	}
}
