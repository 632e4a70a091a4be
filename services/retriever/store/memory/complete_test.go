package memory

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/fdcheck"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// writeEarlierFormat writes docs as the version before the completion marker did: the same
// header and format version, a gob of the snapshot without the Complete field.
func writeEarlierFormat(t *testing.T, path string, docs []store.Doc) {
	t.Helper()
	s := New(quiet)
	if err := s.Upsert(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	p := s.snapshot()
	s.mu.Unlock()
	for i, tool := range p.tools {
		b, err := proto.Marshal(tool)
		if err != nil {
			t.Fatal(err)
		}
		p.snap.Docs[i].Tool = b
	}
	earlier := struct {
		Fingerprint string
		Docs        []snapDoc
		Vectors     map[string]snapVec
	}{p.snap.Fingerprint, p.snap.Docs, p.snap.Vectors}
	var payload bytes.Buffer
	if err := gob.NewEncoder(&payload).Encode(earlier); err != nil {
		t.Fatal(err)
	}
	out := append([]byte(magic), binary.LittleEndian.AppendUint32(nil, 1)...)
	out = binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(payload.Bytes()))
	out = binary.LittleEndian.AppendUint64(out, uint64(payload.Len()))
	out = append(out, payload.Bytes()...)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The completion marker is in the snapshot file with the docs: a restart finds the index
// complete only if MarkComplete succeeded on it; a file of the earlier format (no marker) loads
// whole, as partial; a MarkComplete whose write fails leaves the store and the file unmarked.
func TestCompletionMarkerPersisted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := store.Query{Sparse: map[string]store.SparseVector{"words": sv(1, 1, 4, 1)}, Limit: 10}
	want := search(t, func() *Store { s := New(quiet); _ = s.Upsert(ctx, corpus()); return s }(), q)
	for _, tc := range []struct {
		name string
		// run leaves the snapshot file at path.
		run func(t *testing.T, path string)
		// complete is what a restart on the file reports.
		complete bool
	}{
		{"written, never marked", func(t *testing.T, path string) {
			s := open(t, path)
			if err := s.Upsert(ctx, corpus()); err != nil {
				t.Fatal(err)
			}
			complete(t, s, false)
		}, false},
		{"marked, then written again", func(t *testing.T, path string) {
			s := open(t, path)
			if err := s.Upsert(ctx, corpus()[:2]); err != nil {
				t.Fatal(err)
			}
			if err := s.MarkComplete(ctx); err != nil {
				t.Fatal(err)
			}
			complete(t, s, true)
			if err := s.Upsert(ctx, corpus()[2:]); err != nil {
				t.Fatal(err)
			}
			// Marking a marked index writes nothing.
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s.write = func(*os.File, []byte) error { return errors.New("unexpected write") }
			if err := s.MarkComplete(ctx); err != nil {
				t.Errorf("MarkComplete on a marked index: %v, want no write", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Error("MarkComplete on a marked index changed the file")
			}
		}, true},
		{"mark fails to write, then succeeds", func(t *testing.T, path string) {
			s := open(t, path)
			if err := s.Upsert(ctx, corpus()); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s.write = func(f *os.File, b []byte) error {
				_, _ = f.Write(b[:len(b)/2])
				return errors.New("no space left on device")
			}
			err = s.MarkComplete(ctx)
			if err == nil || !strings.Contains(err.Error(), "persist "+path) || !strings.Contains(err.Error(), "no space left on device") {
				t.Errorf("MarkComplete with a failing write: got %v, want an error naming the file and the cause", err)
			}
			complete(t, s, false)
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Error("a failed MarkComplete changed the file")
			}
			if tmp := tempFiles(t, path); len(tmp) != 0 {
				t.Errorf("temp files left behind: %v", tmp)
			}
			r := open(t, path)
			complete(t, r, false)
			s.write = nil
			if err := s.MarkComplete(ctx); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"earlier format", func(t *testing.T, path string) {
			writeEarlierFormat(t, path, corpus())
		}, false},
		{"earlier format, then marked", func(t *testing.T, path string) {
			writeEarlierFormat(t, path, corpus())
			s := open(t, path)
			if err := s.MarkComplete(ctx); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fdcheck.Check(t, 0) // the store opens files only for its snapshot: no slack
			path := filepath.Join(t.TempDir(), "tools.index")
			tc.run(t, path)
			r := open(t, path)
			complete(t, r, tc.complete)
			if r.Len() != len(corpus()) {
				t.Errorf("restart: %d docs, want %d", r.Len(), len(corpus()))
			}
			if got := search(t, r, q); !slices.Equal(got, want) {
				t.Errorf("search after a restart: got %v, want %v", got, want)
			}
		})
	}
}

// open opens the store at path and fails the test unless its snapshot (if any) loaded.
func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LoadError(); err != nil {
		t.Fatalf("snapshot not loaded: %v", err)
	}
	return s
}

func complete(t *testing.T, s *Store, want bool) {
	t.Helper()
	if got, err := s.Complete(context.Background()); err != nil || got != want {
		t.Errorf("Complete: got %v, %v; want %v", got, err, want)
	}
}
