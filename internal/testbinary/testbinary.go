// Package testbinary builds the programs a test runs as processes of their own (toolmesh
// itself, the health check), the way the test itself was built: under `go test -race` the
// program is built with -race too. It then shares the race detector's build of every
// dependency with the tests instead of compiling them all a second time (the most of a cold
// run's compiling after the tests' own), and a data race in the program fails the test.
package testbinary

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// Build builds the main package pkg (an import path, or a folder such as ".") into a file
// named name in a temporary folder of t's and returns its path.
func Build(t testing.TB, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	args := []string{"build", "-o", bin}
	if Race() {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", cmd.Args[1:], err, out)
	}
	return bin
}

// Race reports whether the running test binary was built with -race.
func Race() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
