package main

import (
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the benchmark at its smallest: both paths call, both list every tool.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a mesh; skipped with -short")
	}
	if err := run(2, 300*time.Millisecond, 1, 30, 1, mcp.LATEST_PROTOCOL_VERSION, ""); err != nil {
		t.Fatal(err)
	}
}
