package conformance

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/cli"
)

// envRole makes the test binary act as one of the programs the suite runs,
// so the tests need no separately built binary and run those programs' code
// with the test's build flags (-race included):
//   - "client": the suite's client command (what cmd/toolmesh-conformance does);
//   - "toolmesh": the toolmesh command, for `toolmesh mcp NAME ...`.
const envRole = "TOOLMESH_CONFORMANCE_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case "client":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	case "toolmesh":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
