package app

import (
	"context"
	"fmt"
	"maps"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/mcpservers"
	"github.com/toolmesh/toolmesh/mcpservers/serve"
)

// initDemo starts the shipped calculator and converter on loopback and adds them to the
// executor's servers over SSE, the transport the source tutorial used.
func initDemo(a *App) ([]runner, error) {
	var runners []runner
	servers := maps.Clone(a.cfg.Executor.Servers)
	if servers == nil {
		servers = map[string]mcpconfig.Server{}
	}
	for _, d := range []struct{ name, addr string }{
		{"calculator", a.cfg.Demo.CalculatorAddr},
		{"converter", a.cfg.Demo.ConverterAddr},
	} {
		if _, taken := servers[d.name]; taken {
			return nil, fmt.Errorf("demo server %q: an MCP server of that name is configured; run with --demo=false", d.name)
		}
		newServer, _ := mcpservers.Lookup(d.name)
		logger := a.logger.With("target", "demo", "mcp_server", d.name)
		h := serve.Handler(newServer(), serve.Options{Logger: logger})
		hs, err := server.NewHTTP(d.addr, h, logger, a.cfg.DrainTimeout)
		if err != nil {
			return nil, fmt.Errorf("demo server %s: %w", d.name, err)
		}
		servers[d.name] = mcpconfig.Server{
			Name:      d.name,
			Transport: mcpconfig.TransportSSE,
			URL:       "http://" + hs.Addr() + "/sse",
		}
		a.endpoint(d.name+" MCP", "http://"+hs.Addr()+"/sse")
		runners = append(runners, func(ctx context.Context) error { return hs.Run(ctx) })
	}
	a.cfg.Executor.Servers = servers
	return runners, nil
}
