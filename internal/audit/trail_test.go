package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// readLines is a file's records, each decoded.
func readLines(t *testing.T, file string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for l := range bytes.Lines(data) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("%s: %q: %v", file, l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRotation: past max-bytes the file is rotated; each file begins with its start record,
// which carries the hash of the file before it, so the files verify one by one and together;
// max-files keeps that many rotated files.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "audit.jsonl")
	files := writeTrail(t, Config{File: file, Arguments: ArgumentsDigest, MaxBytes: 8 << 10}, 300)
	if len(files) < 4 || files[len(files)-1] != file {
		t.Fatalf("files %v: want several, the live file last", files)
	}
	var records int
	for i, f := range files {
		lines := readLines(t, f)
		if lines[0]["type"] != "start" || lines[0]["seq"] != 0.0 {
			t.Errorf("%s begins with %v, want its start record", f, lines[0])
		}
		if i > 0 && lines[0]["previous_file"] != filepath.Base(files[i-1]) {
			t.Errorf("%s's start record names previous file %v, want %s", f, lines[0]["previous_file"], filepath.Base(files[i-1]))
		}
		if _, err := Verify([]string{f}, nil); err != nil {
			t.Errorf("Verify(%s) alone: %v", f, err)
		}
		if st, _ := os.Stat(f); st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
		records += len(lines) - 1
	}
	if records != 300 {
		t.Errorf("%d records over the files, want 300", records)
	}
	if _, err := Verify(files, nil); err != nil {
		t.Errorf("Verify of every file in order: %v", err)
	}
	// Out of order, the join breaks and is named.
	if _, err := Verify([]string{files[1], files[0]}, nil); err == nil || !strings.Contains(err.Error(), "does not follow") {
		t.Errorf("Verify of two files out of order: %v, want a join that does not follow", err)
	}

	dir2 := t.TempDir()
	kept := writeTrail(t, Config{File: filepath.Join(dir2, "audit.jsonl"), Arguments: ArgumentsDigest, MaxBytes: 8 << 10, MaxFiles: 2}, 300)
	if len(kept) != 3 {
		t.Errorf("with max-files 2: files %v, want 2 rotated and the live one", kept)
	}
	if _, err := Verify(kept, nil); err != nil {
		t.Errorf("Verify of the kept files: %v", err)
	}
}

// TestRestart: a process that starts on an existing trail moves that file aside and begins a
// new one chained to it.
func TestRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	writeTrail(t, Config{File: file, Arguments: ArgumentsDigest}, 5)
	files := writeTrail(t, Config{File: file, Arguments: ArgumentsDigest}, 5)
	if len(files) != 2 {
		t.Fatalf("files %v, want the first run's and the second's", files)
	}
	if _, err := Verify(files, nil); err != nil {
		t.Errorf("Verify across the restart: %v", err)
	}
	if got := readLines(t, files[1])[0]; got["reason"] != "restart" {
		t.Errorf("the second file's start record %v, want reason restart", got)
	}
}

// flakySink fails its writes while failing is set, after writing half of what it is given
// (as a full disk does); block holds every write until it is closed.
type flakySink struct {
	mu      sync.Mutex
	failing bool
	block   chan struct{}
	buf     bytes.Buffer
}

func (s *flakySink) Write(p []byte) (int, error) {
	if s.block != nil {
		<-s.block
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		s.buf.Write(p[:len(p)/2])
		return len(p) / 2, errors.New("no space left on device")
	}
	return s.buf.Write(p)
}

func (s *flakySink) Truncate(size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Truncate(int(size))
	return nil
}

func (s *flakySink) Sync() error  { return nil }
func (s *flakySink) Close() error { return nil }

func (s *flakySink) set(failing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = failing
}

// count is how many whole lines the sink holds.
func (s *flakySink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Count(s.buf.Bytes(), []byte("\n"))
}

func (s *flakySink) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	data := bytes.Clone(s.buf.Bytes())
	s.mu.Unlock()
	f := filepath.Join(t.TempDir(), "sink.jsonl")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify([]string{f}, nil); err != nil {
		t.Errorf("Verify of what reached the sink: %v", err)
	}
	return readLines(t, f)
}

// newTestRecorder is a Recorder writing to sink, with its log in the returned buffer.
func newTestRecorder(t *testing.T, cfg Config, sink *flakySink) (*Recorder, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg.File = "test-sink"
	r, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	return r, logs
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestDiskFull: while writes fail (a full disk), calls go on (fail-open, the default): the
// records are kept to be written again, a half-written line is cut off, the failure is logged,
// and once writes work the trail goes on unbroken. Under fail-closed, Ready refuses meanwhile.
func TestDiskFull(t *testing.T) {
	for _, mode := range []string{FailOpen, FailClosed} {
		t.Run(mode, func(t *testing.T) {
			sink := &flakySink{}
			r, logs := newTestRecorder(t, Config{Arguments: ArgumentsDigest, OnFailure: mode, SyncInterval: 10 * time.Millisecond}, sink)
			ctx := context.Background()
			r.Record(ctx, mixedRecord(0))
			eventually.True(t, 2*time.Second, "the first record written", func() bool { return sink.count() == 2 })
			if err := r.Ready(); err != nil {
				t.Errorf("Ready while writes work: %v", err)
			}
			sink.set(true)
			r.Record(ctx, mixedRecord(1))
			eventually.True(t, 2*time.Second, "the failure logged", func() bool { return strings.Contains(logs.String(), "no space left on device") })
			ready := r.Ready()
			if mode == FailClosed && (ready == nil || !strings.Contains(ready.Error(), "no space left on device")) {
				t.Errorf("Ready while failing, closed: %v, want the write's error", ready)
			}
			if mode == FailOpen && ready != nil {
				t.Errorf("Ready while failing, open: %v, want nil", ready)
			}
			r.Record(ctx, mixedRecord(2))
			sink.set(false)
			eventually.True(t, 2*time.Second, "the kept records written once the disk has room", func() bool { return sink.count() == 4 })
			if err := r.Ready(); err != nil {
				t.Errorf("Ready after recovery: %v", err)
			}
			if err := r.Close(); err != nil {
				t.Error(err)
			}
			sink.lines(t) // verifies
		})
	}
}

// TestQueueFull: a writer that does not keep up (a disk that hangs) never holds a call: Record
// returns at once, the records it cannot keep are counted, logged and declared in the next
// record written; under fail-closed Ready refuses until the trail has caught up.
func TestQueueFull(t *testing.T) {
	sink := &flakySink{block: make(chan struct{})}
	r, logs := newTestRecorder(t, Config{Arguments: ArgumentsDigest, OnFailure: FailClosed, SyncInterval: 10 * time.Millisecond}, sink)
	ctx := context.Background()
	start := time.Now()
	n := 3 * queueSize
	for i := range n {
		r.Record(ctx, mixedRecord(i))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d records took %s with the writer stuck", n, d)
	}
	if err := r.Ready(); err == nil || !strings.Contains(err.Error(), "dropped") {
		t.Errorf("Ready with records dropped: %v, want an error saying so", err)
	}
	eventually.True(t, 2*time.Second, "the drops logged", func() bool { return strings.Contains(logs.String(), "audit records dropped") })
	close(sink.block)
	r.Record(ctx, mixedRecord(0))
	if err := r.Close(); err != nil {
		t.Error(err)
	}
	lines := sink.lines(t)
	var written, declared int
	for _, l := range lines[1:] {
		written++
		if d, ok := l["dropped"].(float64); ok {
			declared += int(d)
		}
	}
	if written+declared != n+1 || declared == 0 {
		t.Errorf("%d records written and %d declared dropped, want %d in all with some dropped", written, declared, n+1)
	}
}
