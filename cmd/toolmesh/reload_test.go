package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/eventually"
)

// TestServeExecutorReload runs `serve --target=executor` as a process: a config file saved
// anew adds a server without a restart, and SIGHUP (which must not end the process) reloads
// an edit that no watch of the file's directory sees, here the file a symlink points to in
// another directory.
func TestServeExecutorReload(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinary(t)
	watched, elsewhere := t.TempDir(), t.TempDir()
	real := filepath.Join(elsewhere, "servers.json")
	cfg := filepath.Join(watched, "mcp.json")
	server := func(name string) string {
		return fmt.Sprintf(`%q: {"command": %q, "args": ["mcp", %q, "--transport", "stdio"]}`, name, bin, name)
	}
	write := func(path string, names ...string) {
		t.Helper()
		var entries []string
		for _, n := range names {
			entries = append(entries, server(n))
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(`{"mcpServers": {`+strings.Join(entries, ", ")+`}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(real, "calculator")
	if err := os.Symlink(real, cfg); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := start(t, bin, "serve", "--target=executor", "--executor.grpc-addr="+addr, "--mcp-config="+cfg, "--drain-timeout=5s")
	exe := toolmeshv1.NewExecutorServiceClient(dial(t, addr))
	servers := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		list, err := exe.ListTools(ctx, &toolmeshv1.ExecutorServiceListToolsRequest{})
		if err != nil {
			return err.Error()
		}
		var names []string
		for _, tl := range list.GetTools() {
			if !slices.Contains(names, tl.GetServer()) {
				names = append(names, tl.GetServer())
			}
		}
		slices.Sort(names)
		return fmt.Sprint(names)
	}
	want := func(what, servers0 string) {
		t.Helper()
		eventually.Check(t, 30*time.Second, what, func() string {
			if got := servers(); got != servers0 {
				return "servers with tools: " + got + ", want " + servers0
			}
			return ""
		})
	}
	want("the calculator's tools", "[calculator]")

	// The symlink replaced by a file of its own: a change in the watched directory.
	if err := os.Remove(cfg); err != nil {
		t.Fatal(err)
	}
	write(cfg, "calculator", "converter")
	want("the converter added by a new file", "[calculator converter]")

	// Back to the symlink (a change it sees), then an edit of its target (one it does not).
	write(real, "converter")
	tmp := cfg + ".link"
	if err := os.Symlink(real, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, cfg); err != nil {
		t.Fatal(err)
	}
	want("the calculator removed by the symlink's swap", "[converter]")
	write(real, "calculator")
	time.Sleep(time.Second)
	if got := servers(); got != "[converter]" {
		t.Fatalf("an edit in another directory was seen (%s): the test no longer tests SIGHUP", got)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// Answered by the same process: SIGHUP did not end it.
	want("the converter replaced by the calculator on SIGHUP", "[calculator]")
}
