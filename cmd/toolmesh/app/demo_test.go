package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// demoConfig loads the flags of `up` with extra args and only the demo target.
func demoConfig(t *testing.T, args ...string) Config {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg Config
	cfg.RegisterFlags(fs)
	cfg.RegisterDemoFlags(fs)
	if err := cfg.Load(fs, append([]string{"--drain-timeout=2s"}, args...)); err != nil {
		t.Fatal(err)
	}
	cfg.Targets = []string{"demo"}
	return cfg
}

// demoDirs lists the sqlite demo database directories in dir.
func demoDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "toolmesh-sqlite-demo-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDemoServesSQLite runs the demo target: three servers, the sqlite one
// answering over SSE from its demo database, which is removed on stop.
func TestDemoServesSQLite(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the sqlite demo database goes
	cfg := demoConfig(t, "--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0")
	if cfg.Demo.SQLiteAddr != "127.0.0.1:0" {
		t.Fatalf("demo.sqlite-addr = %q, want the flag's value", cfg.Demo.SQLiteAddr)
	}
	a, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() { done <- a.Run(ctx, func() { close(started) }) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run returned before starting: %v", err)
	}

	var names []string
	for _, e := range a.Endpoints {
		names = append(names, e.Name)
	}
	if want := []string{"calculator MCP", "converter MCP", "sqlite MCP"}; !slices.Equal(names, want) {
		t.Errorf("endpoints = %v, want %v", names, want)
	}
	servers := a.book.mcpServers
	if got, want := slices.Sorted(maps.Keys(servers)), []string{"calculator", "converter", "sqlite"}; !slices.Equal(got, want) {
		t.Errorf("executor servers = %v, want %v", got, want)
	}
	if got := len(demoDirs(t, tmp)); got != 1 {
		t.Errorf("%d sqlite demo directories while running, want 1", got)
	}

	t.Run("query over SSE", func(t *testing.T) {
		c, err := client.NewSSEMCPClient(servers["sqlite"].URL)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := c.Start(cctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Initialize(cctx, mcp.InitializeRequest{}); err != nil {
			t.Fatal(err)
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = "query_database"
		req.Params.Arguments = map[string]any{"sql": "SELECT AVG(s.annual_salary_usd) AS avg_salary FROM salaries s " +
			"JOIN employees e ON e.id = s.employee_id JOIN departments d ON d.id = e.department_id WHERE d.name = 'Engineering'"}
		res, err := c.CallTool(cctx, req)
		if err != nil {
			t.Fatal(err)
		}
		text := ""
		if len(res.Content) > 0 {
			if tc, ok := mcp.AsTextContent(res.Content[0]); ok {
				text = tc.Text
			}
		}
		if res.IsError || !strings.Contains(text, `{"avg_salary":125200}`) {
			t.Errorf("query_database = %q (isError %v), want the Engineering average 125200", text, res.IsError)
		}
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after stop = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of stop")
	}
	if got := demoDirs(t, tmp); len(got) != 0 {
		t.Errorf("sqlite demo directories after stop = %v, want none", got)
	}
}

// TestDemoFailedStartLeavesNothing makes the sqlite server's port busy: the start fails
// naming it, the demo database is removed, and the servers started before it release their
// ports.
func TestDemoFailedStartLeavesNothing(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var free []string
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		free = append(free, l.Addr().String())
		l.Close()
	}
	cfg := demoConfig(t, "--demo.calculator-addr="+free[0], "--demo.converter-addr="+free[1], "--demo.sqlite-addr="+busy.Addr().String())
	a, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), busy.Addr().String()) {
		t.Errorf("Run with the sqlite port in use = %v, want an error naming %s", err, busy.Addr())
	}
	if got := demoDirs(t, tmp); len(got) != 0 {
		t.Errorf("sqlite demo directories after the failed start = %v, want none", got)
	}
	for _, addr := range free {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still bound after the failed start: %v", addr, err)
			continue
		}
		l.Close()
	}
	if entries, err := os.ReadDir(tmp); err != nil || len(entries) != 0 {
		t.Errorf("temp dir after the failed start holds %v (%v), want nothing", entries, err)
	}
}
