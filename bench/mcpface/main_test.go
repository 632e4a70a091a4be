package main

import (
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the benchmark at its smallest: every path calls (direct, /mcp on both meshes),
// direct and /mcp list every tool.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a mesh; skipped with -short")
	}
	figs := &figures.MCPFace{}
	if err := run(figs, 2, 300*time.Millisecond, 1, 30, 1, mcp.LATEST_PROTOCOL_VERSION, ""); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"direct", "face", "face-grpc"} {
		for _, n := range []int{1, 2} {
			if c, ok := figs.Find(path, n); !ok || c.Calls == 0 || c.P50 <= 0 || c.CPUPerCall <= 0 {
				t.Errorf("figures of %s at %d callers: %+v (found %v)", path, n, c, ok)
			}
		}
	}
	if l := figs.List; l == nil || l.Tools != 30 || l.Pages < 1 || l.FaceP50Ms <= 0 || l.DirectP50Ms <= 0 {
		t.Errorf("list figures: %+v", figs.List)
	}
}
