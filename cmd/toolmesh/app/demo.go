package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/mcpservers"
	"github.com/toolmesh/toolmesh/mcpservers/calculator"
	"github.com/toolmesh/toolmesh/mcpservers/converter"
	"github.com/toolmesh/toolmesh/mcpservers/serve"
	"github.com/toolmesh/toolmesh/mcpservers/sqlite"
)

// initDemo starts the shipped calculator, converter and sqlite (serving its demo database)
// on loopback and offers them to the executor (in the address book) over SSE, the transport
// the source tutorial used. Each stops taking requests before what it holds is released: the
// sqlite demo database file is removed when its runner ends.
func initDemo(a *App, env targetEnv) (_ []runner, err error) {
	// A failed start leaves nothing behind: the listeners bound so far are closed and the
	// servers' resources released, newest first.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	var runners []runner
	for _, d := range []struct{ name, addr string }{
		{calculator.Name, a.cfg.Demo.CalculatorAddr},
		{converter.Name, a.cfg.Demo.ConverterAddr},
		{sqlite.Name, a.cfg.Demo.SQLiteAddr},
	} {
		if _, taken := a.cfg.Executor.Servers[d.name]; taken {
			return nil, fmt.Errorf("demo server %q: an MCP server of that name is configured; run with --demo=false", d.name)
		}
		newServer, _ := mcpservers.Lookup(d.name)
		srv, err := newServer(mcpservers.Options{})
		if err != nil {
			return nil, fmt.Errorf("demo server %s: %w", d.name, err)
		}
		undo = append(undo, func() { _ = srv.Close() })
		logger := env.logger.With("mcp_server", d.name)
		tel, err := a.tel.Service(context.Background(), "mcp-"+d.name)
		if err != nil {
			return nil, err
		}
		h := serve.Handler(srv.MCP, serve.Options{Logger: logger, Telemetry: tel})
		hs, err := server.NewHTTP(d.addr, h, logger, a.cfg.DrainTimeout)
		if err != nil {
			return nil, fmt.Errorf("demo server %s: %w", d.name, err)
		}
		hs.ForceOn(a.force)
		undo = append(undo, func() { closeUnstarted(hs) })
		a.book.mcpServers[d.name] = mcpconfig.Server{
			Name:      d.name,
			Transport: mcpconfig.TransportSSE,
			URL:       "http://" + hs.Addr() + "/sse",
		}
		a.endpoint(d.name+" MCP", "http://"+hs.Addr()+"/sse")
		runners = append(runners, func(ctx context.Context) error {
			return errors.Join(hs.Run(ctx), srv.Close())
		})
	}
	return runners, nil
}

// closeUnstarted closes the listener of an HTTP server that never ran: Run on an ended
// context serves nothing and shuts down at once.
func closeUnstarted(hs *server.HTTP) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = hs.Run(ctx)
}
