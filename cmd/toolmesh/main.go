// Command toolmesh runs any toolmesh service, all of them in one process, a shipped MCP server,
// or a client command against a running api.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
