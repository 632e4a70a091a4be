package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
	"github.com/toolmesh/toolmesh/internal/redact"
)

func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("up", stderr, "Usage: toolmesh up [flags]\n\nRuns every service in one process, plus the demo MCP servers, on loopback.")
	var cfg app.Config
	cfg.RegisterFlags(fs)
	cfg.RegisterDemoFlags(fs)
	if err := parseFlags(fs, func() error { return cfg.Load(fs, args) }); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("toolmesh up: unexpected argument %q", fs.Arg(0))
	}
	cfg.Targets = []string{"executor", "retriever", "inference", "api"}
	if cfg.Demo.Enabled {
		cfg.Targets = append([]string{"demo"}, cfg.Targets...)
	}
	return bindHint(fs, run(ctx, cfg, stdout, stderr))
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr, "Usage: toolmesh serve --target=api,executor [flags]\n\nRuns the chosen services (microservices mode).")
	var cfg app.Config
	cfg.RegisterFlags(fs)
	target := fs.String("target", "", "comma-separated targets to run: "+strings.Join(app.ServeTargets(), ", ")+", or all")
	if err := parseFlags(fs, func() error { return cfg.Load(fs, args) }); err != nil {
		return err
	}
	if *target == "" {
		return usageError("toolmesh serve: --target is required (%s, or all)", strings.Join(app.ServeTargets(), ", "))
	}
	for _, t := range strings.Split(*target, ",") {
		t = strings.TrimSpace(t)
		if t == "all" {
			cfg.Targets = append(cfg.Targets, app.ServeTargets()...)
			continue
		}
		cfg.Targets = append(cfg.Targets, t)
	}
	return bindHint(fs, run(ctx, cfg, stdout, stderr))
}

// bindHint adds to a start that failed because an address is in use what to do about it: the
// flag of fs that sets that address (the one whose value is it, or else names its port), so
// that "address already in use" says which of the many addresses of `up` to move.
func bindHint(fs *flag.FlagSet, err error) error {
	var op *net.OpError
	if !errors.Is(err, syscall.EADDRINUSE) || !errors.As(err, &op) || op.Addr == nil {
		return err
	}
	addr := op.Addr.String()
	_, port, _ := net.SplitHostPort(addr)
	var exact, samePort string
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		if exact == "" && v == addr {
			exact = f.Name
		}
		if _, p, perr := net.SplitHostPort(v); samePort == "" && perr == nil && p == port && port != "0" {
			samePort = f.Name
		}
	})
	name := cmp.Or(exact, samePort)
	if name == "" {
		return fmt.Errorf("%w (another process holds %s: perhaps another toolmesh; stop it, or move this one's address)", err, addr)
	}
	return fmt.Errorf("%w (another process holds %s: perhaps another toolmesh; stop it, or give --%s another address, e.g. --%s=127.0.0.1:0 for any free port)", err, addr, name, name)
}

func run(ctx context.Context, cfg app.Config, stdout, stderr io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	a, err := app.New(cfg, logger)
	if err != nil {
		return err
	}
	// The first signal (ctx) starts a graceful stop; a second one while it drains stops at once.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sig)
		logger.Info("stopping: finishing calls in flight (up to --drain-timeout); signal again to stop at once", "drain_timeout", cfg.DrainTimeout)
		select {
		case <-sig:
			logger.Warn("second signal: stopping at once")
			a.ForceStop()
		case <-done:
		}
	}()
	return a.Run(ctx, func() {
		fmt.Fprintln(stdout, "toolmesh is running:")
		for _, e := range a.Endpoints {
			// The one place the banner is printed: no address shows a URL's credentials.
			fmt.Fprintf(stdout, "  %-16s %s\n", e.Name, redact.Text(e.Addr))
		}
		fmt.Fprintln(stdout, "Press Ctrl-C to stop.")
	})
}
