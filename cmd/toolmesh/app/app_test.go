package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRunStopsCleanlyAndReportsBindErrors starts the executor and api targets (no MCP
// servers), stops them, and checks that a port in use fails the start with its address.
func TestRunStopsCleanlyAndReportsBindErrors(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg Config
	cfg.RegisterFlags(fs)
	if err := cfg.Load(fs, []string{"--executor.grpc-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0",
		"--api.http-addr=127.0.0.1:0", "--drain-timeout=2s"}); err != nil {
		t.Fatal(err)
	}
	cfg.Targets = []string{"executor", "api"}
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
	if len(a.Endpoints) != 5 {
		t.Errorf("endpoints = %v, want executor gRPC, REST, console, OpenAI API and api gRPC", a.Endpoints)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after stop = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of stop")
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg.Executor.GRPCAddr = busy.Addr().String()
	a, err = New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), busy.Addr().String()) {
		t.Errorf("Run with the executor's port in use = %v, want an error naming %s", err, busy.Addr())
	}
}

// TestBannerNamesConfiguredServers: `up` prints every MCP server it connects to, those of
// --mcp-config included, with credentials in their URLs masked.
func TestBannerNamesConfiguredServers(t *testing.T) {
	cfgFile := t.TempDir() + "/mcp.json"
	doc := `{"mcpServers": {"remote": {"url": "http://127.0.0.1:1/mcp?api_key=SECRET-123"}, "local": {"command": "/bin/cat"}}}`
	if err := os.WriteFile(cfgFile, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	a, stop := runApp(t, []string{"--executor.grpc-addr=127.0.0.1:0", "--drain-timeout=1s", "--mcp-config=" + cfgFile}, "executor")
	stop()
	got := map[string]string{}
	for _, e := range a.Endpoints {
		got[e.Name] = e.Addr
	}
	if !strings.Contains(got["remote MCP"], "127.0.0.1:1/mcp") || !strings.Contains(got["local MCP"], "stdio cat") {
		t.Errorf("endpoints %v; want remote and local MCP servers listed", got)
	}
	if strings.Contains(got["remote MCP"], "SECRET-123") {
		t.Errorf("the banner shows a URL credential: %q", got["remote MCP"])
	}
}
