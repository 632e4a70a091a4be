// Command toolmesh-conformance is the client command of the MCP conformance
// suite (@modelcontextprotocol/conformance):
//
//	conformance client --command toolmesh-conformance --suite all --spec-version 2026-07-28
//
// runs it once per scenario with the scenario server's URL as its argument
// and the scenario in MCP_CONFORMANCE_SCENARIO. It connects toolmesh's
// executor to that URL and does what the scenario asks of a tools-only
// client; see package conformance. `make test` runs the suite this way.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolmesh/toolmesh/conformance"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := conformance.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
