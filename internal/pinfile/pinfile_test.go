package pinfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

func TestReadMissingIsEmpty(t *testing.T) {
	f, err := Read(filepath.Join(t.TempDir(), "pins.json"))
	if err != nil || len(f.Pins) != 0 {
		t.Fatalf("Read(missing) = %v, %v; want no pins, no error", f, err)
	}
}

func TestUpdateAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pins.json")
	tool := &toolmeshv1.Tool{Id: "calc.add", Server: "calc", Name: "add", Description: "Add two numbers", Hash: "h1"}
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	got, err := Update(path, func(f *File) bool {
		f.Pins["calc.add"] = Pin{Hash: "h1", PinnedAt: at, PinnedBy: "first seen", Tool: Encode(tool)}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Pins["calc.add"].Hash != "h1" {
		t.Errorf("Update returned %v", got)
	}
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	p := f.Pins["calc.add"]
	if p.Hash != "h1" || !p.PinnedAt.Equal(at) || p.PinnedBy != "first seen" {
		t.Errorf("read back %+v", p)
	}
	if back, err := Decode(p.Tool); err != nil || back.GetDescription() != "Add two numbers" {
		t.Errorf("tool read back as %v, %v", back, err)
	}
	// An update that changes nothing writes nothing.
	st, _ := os.Stat(path)
	time.Sleep(10 * time.Millisecond)
	if _, err := Update(path, func(*File) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(path); !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("an update without changes rewrote the file")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestUpdatesDoNotLoseEachOther: replicas sharing the file each add their pins; none is lost.
func TestUpdatesDoNotLoseEachOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pins.json")
	var wg sync.WaitGroup
	const n = 16
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("s.t%d", i)
			if _, err := Update(path, func(f *File) bool {
				f.Pins[id] = Pin{Hash: id}
				return true
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Pins) != n {
		t.Errorf("%d pins, want %d", len(f.Pins), n)
	}
}

func TestReadRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"not json":         `{"pins":`,
		"unknown version":  `{"version":2,"pins":{}}`,
		"pin without hash": `{"version":1,"pins":{"a.b":{"pinned_by":"x"}}}`,
		"bad tool id":      `{"version":1,"pins":{"nodot":{"hash":"h"}}}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".json")
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Read(path); err == nil {
				t.Errorf("Read(%s) took it", body)
			}
			// An update never replaces a file it cannot read: the pins in it would be lost.
			if _, err := Update(path, func(f *File) bool { f.Pins["a.b"] = Pin{Hash: "h"}; return true }); err == nil {
				t.Errorf("Update over %s succeeded", body)
			}
			if b, _ := os.ReadFile(path); string(b) != body {
				t.Errorf("the bad file was rewritten: %s", b)
			}
		})
	}
	if _, err := Read(dir); err == nil {
		t.Errorf("Read(a directory) took it")
	}
}

func TestUpdateReadOnly(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "pins.json")
	if err := os.WriteFile(path, []byte(`{"version":1,"pins":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	_, err := Update(path, func(f *File) bool { f.Pins["a.b"] = Pin{Hash: "h"}; return true })
	if !errors.Is(err, ErrReadOnly) {
		t.Errorf("Update in a read-only directory: %v, want ErrReadOnly", err)
	}
}

func TestChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pins.json")
	var w Watch
	if w.Changed(path) {
		t.Errorf("a missing file changed")
	}
	if _, err := Update(path, func(f *File) bool { f.Pins["a.b"] = Pin{Hash: "h"}; return true }); err != nil {
		t.Fatal(err)
	}
	if !w.Changed(path) {
		t.Errorf("a new file did not change")
	}
	if w.Changed(path) {
		t.Errorf("an untouched file changed")
	}
	if _, err := Update(path, func(f *File) bool { f.Pins["a.c"] = Pin{Hash: "h2"}; return true }); err != nil {
		t.Fatal(err)
	}
	if !w.Changed(path) {
		t.Errorf("a rewritten file did not change")
	}
}
