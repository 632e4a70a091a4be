package memory

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/fdcheck"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

func tempFiles(t *testing.T, path string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), filepath.Base(path)+tempInfix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// A write of the snapshot that fails (halfway through the file, or before the temp file can
// even be made) is a batch that did not happen: searches during and after it answer from the
// old index, the file on disk is the old one byte for byte, a restart loads it, no temp file is
// left, and the same batch written again once the fault is gone is applied whole.
func TestInterruptedWriteLeavesOldIndex(t *testing.T) {
	ctx := context.Background()
	// q touches calc.add (term 1, 2), calc.sub (1), conv.f2c (1) and the new tool (term 2).
	q := store.Query{Sparse: map[string]store.SparseVector{"words": sv(1, 1, 2, 1)}, Limit: 10}
	ops := []struct {
		name string
		run  func(*Store) error
		// want is q's result once the batch is applied.
		want []string
	}{
		{"upsert", func(s *Store) error {
			return s.Upsert(ctx, []store.Doc{doc("calc.add", "calc", sv(9, 1)), doc("new.tool", "x", sv(2, 1))})
		}, []string{"new.tool", "calc.sub", "conv.f2c"}},
		{"delete", func(s *Store) error { return s.Delete(ctx, []string{"calc.add", "conv.f2c"}) }, []string{"calc.sub"}},
	}
	faults := []struct {
		name string
		// set makes the next writes fail and returns what ends the fault; during is called
		// while a write is in flight, where the fault lets the test look.
		set     func(t *testing.T, s *Store, during func()) (heal func())
		wantErr string
	}{
		{"write fails halfway", func(t *testing.T, s *Store, during func()) func() {
			s.write = func(f *os.File, b []byte) error {
				if _, err := f.Write(b[:len(b)/2]); err != nil {
					return err
				}
				during()
				return errors.New("no space left on device")
			}
			return func() { s.write = nil }
		}, "no space left on device"},
		{"directory gone", func(t *testing.T, s *Store, during func()) func() {
			// The directory with the file moves away (an unmounted volume): the write cannot
			// even make its temp file.
			dir, away := filepath.Dir(s.path), filepath.Join(t.TempDir(), "away")
			if err := os.Rename(dir, away); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := os.Rename(away, dir); err != nil {
					t.Fatal(err)
				}
			}
		}, "no such file or directory"},
	}
	for _, op := range ops {
		for _, fault := range faults {
			t.Run(op.name+"/"+fault.name, func(t *testing.T) {
				fdcheck.Check(t, 0) // the store opens files only for its snapshot: no slack
				path := filepath.Join(t.TempDir(), "data", "tools.index")
				s, err := Open(path, quiet)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Upsert(ctx, corpus()); err != nil {
					t.Fatal(err)
				}
				before := search(t, s, q)
				oldFile, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}

				searchedDuring := false
				heal := fault.set(t, s, func() {
					searchedDuring = true
					if got := search(t, s, q); !slices.Equal(got, before) {
						t.Errorf("search during the write: got %v, want the old index's %v", got, before)
					}
					if got, _ := s.Hashes(ctx); len(got) != len(corpus()) || got["new.tool"] != "" || got["calc.add"] == "" {
						t.Errorf("hashes during the write: got %v, want the old index's", got)
					}
				})
				err = op.run(s)
				if err == nil || !strings.Contains(err.Error(), "persist "+path) || !strings.Contains(err.Error(), fault.wantErr) {
					t.Fatalf("%s with a failing write: got %v, want an error naming the file and %q", op.name, err, fault.wantErr)
				}
				if fault.name == "write fails halfway" && !searchedDuring {
					t.Error("the fault did not run")
				}
				heal()
				if t.Failed() {
					return
				}

				if got := search(t, s, q); !slices.Equal(got, before) {
					t.Errorf("search after the failed write: got %v, want the old index's %v", got, before)
				}
				if s.Len() != len(corpus()) {
					t.Errorf("Len after the failed write: got %d, want %d", s.Len(), len(corpus()))
				}
				if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, oldFile) {
					t.Errorf("snapshot file after the failed write: %d bytes (err %v), want the old %d bytes unchanged", len(got), err, len(oldFile))
				}
				if tmp := tempFiles(t, path); len(tmp) != 0 {
					t.Errorf("temp files left behind: %v", tmp)
				}
				restarted, err := Open(path, quiet)
				if err != nil || restarted.LoadError() != nil {
					t.Fatalf("restart after the failed write: %v, load error %v", err, restarted.LoadError())
				}
				if got := search(t, restarted, q); !slices.Equal(got, before) {
					t.Errorf("search after a restart: got %v, want the old index's %v", got, before)
				}

				// The fault is gone: the same batch goes in whole, and survives a restart.
				if err := op.run(s); err != nil {
					t.Fatalf("%s again: %v", op.name, err)
				}
				if got := search(t, s, q); !slices.Equal(got, op.want) {
					t.Errorf("search after the batch: got %v, want %v", got, op.want)
				}
				again, err := Open(path, quiet)
				if err != nil || again.LoadError() != nil {
					t.Fatalf("restart after the batch: %v, load error %v", err, again.LoadError())
				}
				if got := search(t, again, q); !slices.Equal(got, op.want) {
					t.Errorf("search after the batch and a restart: got %v, want %v", got, op.want)
				}
			})
		}
	}
}

// A process that dies while writing the snapshot leaves the old file and a partial temp file
// (the rename is the commit). The next Open loads the old index and removes the temp file.
func TestCrashMidWriteLoadsOldFile(t *testing.T) {
	fdcheck.Check(t, 0)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tools.index")
	s, err := Open(path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Upsert(ctx, corpus()); err != nil {
		t.Fatal(err)
	}
	q := store.Query{Sparse: map[string]store.SparseVector{"words": sv(1, 1, 4, 1)}, Limit: 10}
	before := search(t, s, q)

	// The dying writer: the next batch's file, cut off halfway, under persist's temp name.
	died := errors.New("killed")
	s.write = func(f *os.File, b []byte) error {
		if _, err := f.Write(b[:len(b)/2]); err != nil {
			return err
		}
		if err := os.Link(f.Name(), f.Name()+"-crash"); err != nil { // survives persist's cleanup, as after a kill
			return err
		}
		return died
	}
	if err := s.Upsert(ctx, []store.Doc{doc("calc.add", "calc", sv(9, 1))}); !errors.Is(err, died) {
		t.Fatalf("Upsert by the dying writer: got %v, want %v", err, died)
	}
	if tmp := tempFiles(t, path); len(tmp) != 1 {
		t.Fatalf("temp files after the crash: got %v, want the dead writer's one", tmp)
	}

	r, err := Open(path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if r.LoadError() != nil {
		t.Fatalf("restart after a crash mid-write: LoadError %v, want the old snapshot loaded", r.LoadError())
	}
	if got := search(t, r, q); !slices.Equal(got, before) {
		t.Errorf("search after the restart: got %v, want the old index's %v", got, before)
	}
	if tmp := tempFiles(t, path); len(tmp) != 0 {
		t.Errorf("temp files after the restart: got %v, want none", tmp)
	}
	if _, err := os.Stat(path + ".bad"); err == nil {
		t.Errorf("the good snapshot was moved aside as unusable")
	}
}
