// Package gobuild builds a program that a test or a benchmark runs as a process of its own
// (toolmesh itself, the health check) the way the running binary was built: under
// `go test -race` the program is built with -race too. It then shares the race detector's
// build of every dependency with the tests instead of compiling them all a second time (the
// most of a cold `make test`'s compiling after the tests' own), and a data race in the program
// fails the test. A benchmark, built without -race, builds its programs without it.
package gobuild

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/toolmesh/toolmesh/internal/buildinfo"
)

// Build builds the main package pkg (an import path, or a folder relative to dir: "" is the
// working directory) into the file out.
func Build(ctx context.Context, dir, out, pkg string) error {
	args := []string{"build", "-o", out}
	if Race() {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", cmd.Args[1:], err, b)
	}
	return nil
}

// Race reports whether the running binary was built with -race.
func Race() bool { return buildinfo.Read().Race }
