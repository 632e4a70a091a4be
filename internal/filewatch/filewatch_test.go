package filewatch

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatcher: writing a watched file, or swapping the ..data symlink as the kubelet does,
// wakes the reader; another file in the directory does not; the poll ticks with no change.
func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tls.crt")
	if err := os.WriteFile(file, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := New([]string{file}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	woke := func() bool {
		select {
		case <-w.C:
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}
	quiet := func() bool {
		select {
		case <-w.C:
			return false
		case <-time.After(200 * time.Millisecond):
			return true
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".tls.crt.swp"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !quiet() {
		t.Error("another file of the directory woke the reader")
	}
	if err := os.WriteFile(file, []byte("b"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !woke() {
		t.Fatal("writing the file did not wake the reader")
	}
	for !quiet() { // drain what the write's events left
	}
	if err := os.Symlink("..2026_12_07", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if !woke() {
		t.Fatal("swapping ..data did not wake the reader")
	}

	p, err := New([]string{file}, 20*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	select {
	case <-p.C:
	case <-time.After(2 * time.Second):
		t.Fatal("the poll did not tick")
	}
}

func TestConcerns(t *testing.T) {
	files := []string{"/etc/toolmesh/config/toolmesh.yaml", "/etc/toolmesh/config/mcp.json"}
	for name, want := range map[string]bool{
		"/etc/toolmesh/config/mcp.json":                        true,
		"/etc/toolmesh/config/toolmesh.yaml":                   true,
		"/etc/toolmesh/config/..data":                          true,
		"/etc/toolmesh/config/..data_tmp":                      true,
		"/etc/toolmesh/config/..2026_12_03_20_00_01.123456789": true,
		"/etc/toolmesh/config/.mcp.json.swp":                   false,
		"/etc/toolmesh/config/notes.txt":                       false,
	} {
		if got := concerns(files, name); got != want {
			t.Errorf("concerns(%s) = %v, want %v", name, got, want)
		}
	}
}
