// Package inproc runs toolmesh targets in a bench program's own process, as `toolmesh up`
// does, so that a benchmark measures the mesh's code without a second process to schedule.
package inproc

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
)

// Start runs targets with the flags args (those of `toolmesh up`, the demo's included) and,
// once /readyz answers 200 (within readyWithin), returns the REST base URL and a stop function
// that is safe to call more than once. The mesh logs warnings only to stderr: the figures are of
// the calls, not of the log. name prefixes its messages.
func Start(name string, args, targets []string, readyWithin time.Duration) (string, func(), error) {
	fs := flag.NewFlagSet("mesh", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c app.Config
	c.RegisterFlags(fs)
	c.RegisterDemoFlags(fs)
	if err := c.Load(fs, args); err != nil {
		return "", nil, err
	}
	c.Targets = targets
	if err := c.Validate(); err != nil {
		return "", nil, err
	}
	a, err := app.New(c, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, started := make(chan error, 1), make(chan struct{})
	go func() { done <- a.Run(ctx, func() { close(started) }) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				fmt.Fprintln(os.Stderr, name+": the mesh did not stop within 15 s")
			}
		})
	}
	select {
	case <-started:
	case err := <-done:
		cancel()
		return "", nil, fmt.Errorf("mesh: %w", err)
	}
	i := slices.IndexFunc(a.Endpoints, func(e app.Endpoint) bool { return e.Name == "REST" })
	if i < 0 {
		stop()
		return "", nil, fmt.Errorf("mesh: no REST endpoint in %v", a.Endpoints)
	}
	rest := a.Endpoints[i].Addr
	for deadline := time.Now().Add(readyWithin); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(rest + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return rest, stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("mesh: /readyz not 200 within %s (%v)", readyWithin, err)
		}
	}
}
