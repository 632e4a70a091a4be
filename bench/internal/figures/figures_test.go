package figures

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWriteRead checks that what a program writes is what the report reads, and that a write
// leaves no temporary file behind.
func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "loop.json")
	want := Loop{DurationSeconds: 8, Rows: []LoopRow{{Mode: "inproc", Via: "rest", Clients: 1, Queries: 10, IterP50: 835.5, Target: 1000}}}
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	var got Loop
	if err := Read(path, &got); err != nil {
		t.Fatal(err)
	}
	if r, ok := got.Find("inproc", "rest", 1); !ok || r != want.Rows[0] || got.DurationSeconds != 8 {
		t.Errorf("read back %+v, want %+v", got, want)
	}
	if _, ok := got.Find("micro", "rest", 1); ok {
		t.Error("found a row that was never written")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the folder after one write, want 1", len(entries))
	}
	if err := os.WriteFile(path, []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Read(path, &got); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("reading a broken file: err = %v; want one naming %s", err, path)
	}
}
