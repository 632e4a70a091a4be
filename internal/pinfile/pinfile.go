// Package pinfile reads and writes toolmesh's pin file: for each tool id (SERVER.TOOL), the
// fingerprint of the definition that is trusted (first seen, or approved since) and that
// definition itself, so a later change can be shown as a diff.
//
// Every executor replica reads the same file. Writes take an exclusive lock on PATH.lock, read
// the file again, apply the change and replace the file in one rename, so replicas sharing a
// volume never lose each other's pins and a reader never sees half a file. A file that does not
// parse is never replaced: its pins would be lost, and a rug pull would pass as a first sight.
package pinfile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/filelock"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Version is the file format's version.
const Version = 1

// MaxSize bounds the file: 10,000 tools with large schemas fit.
const MaxSize = 256 << 20

// ErrReadOnly is returned by Update when the file or its directory cannot be written (a
// Kubernetes ConfigMap, a read-only mount).
var ErrReadOnly = errors.New("the pin file is read-only")

// File is the pin file.
type File struct {
	Version int `json:"version"`
	// Pins are by tool id.
	Pins map[string]Pin `json:"pins"`
}

// Pin is one tool's trusted definition.
type Pin struct {
	// Hash is the definition's fingerprint (toolmesh.v1.Tool.hash).
	Hash     string    `json:"hash"`
	PinnedAt time.Time `json:"pinned_at"`
	// PinnedBy is "first seen", or who approved it.
	PinnedBy string `json:"pinned_by"`
	// Tool is the definition as toolmesh showed it (toolmesh.v1.Tool in JSON), for diffs.
	Tool json.RawMessage `json:"tool,omitempty"`
}

// Encode is t as a Pin's Tool.
func Encode(t *toolmeshv1.Tool) json.RawMessage {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(t)
	if err != nil {
		return nil
	}
	// protojson's output is not stable across versions on purpose; compact it so that the
	// file's indentation is ours.
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

// Decode reads a Pin's Tool; nil when it has none.
func Decode(raw json.RawMessage) (*toolmeshv1.Tool, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	t := &toolmeshv1.Tool{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, t); err != nil {
		return nil, err
	}
	return t, nil
}

// Read reads the file at path; a missing file has no pins.
func Read(path string) (*File, error) {
	data, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &File{Version: Version, Pins: map[string]Pin{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pin file %s: %w", path, err)
	}
	f, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("pin file %s: %w", path, err)
	}
	return f, nil
}

func readFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxSize)
	}
	return data, nil
}

func parse(data []byte) (*File, error) {
	f := &File{}
	if len(bytes.TrimSpace(data)) == 0 {
		// A file created empty on purpose (touch, an empty ConfigMap key) has no pins.
		return &File{Version: Version, Pins: map[string]Pin{}}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(f); err != nil {
		return nil, fmt.Errorf("not a pin file: %w", err)
	}
	if f.Version != Version {
		return nil, fmt.Errorf("version %d, this toolmesh reads version %d", f.Version, Version)
	}
	if f.Pins == nil {
		f.Pins = map[string]Pin{}
	}
	ids := make([]string, 0, len(f.Pins))
	for id := range f.Pins {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if _, _, ok := toolid.Split(id); !ok {
			return nil, fmt.Errorf("pins: %q is not SERVER.TOOL", id)
		}
		if f.Pins[id].Hash == "" {
			return nil, fmt.Errorf("pins.%s: no hash", id)
		}
	}
	return f, nil
}

// lockWait bounds the wait for another replica's update, which takes milliseconds.
const lockWait = 30 * time.Second

// Update changes the file at path: under its lock it reads the file (missing: no pins), calls
// change, and when change reports a change writes the file back in one rename. It returns the
// file as it is after the update. An error that is ErrReadOnly means the file cannot be written
// here.
func Update(path string, change func(*File) bool) (*File, error) {
	// The replicas sharing the file take turns updating it; an update takes milliseconds.
	ctx, cancel := context.WithTimeoutCause(context.Background(), lockWait, fmt.Errorf("another replica's update took over %s", lockWait))
	defer cancel()
	unlock, err := filelock.Lock(ctx, path+".lock")
	if err != nil {
		if writeRefused(err) {
			return nil, fmt.Errorf("pin file %s: %w (%v)", path, ErrReadOnly, err)
		}
		return nil, fmt.Errorf("pin file %s: %w", path, err)
	}
	defer unlock()
	f, err := Read(path)
	if err != nil {
		return nil, err
	}
	if !change(f) {
		return f, nil
	}
	f.Version = Version
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("pin file %s: %w", path, err)
	}
	if err := writeAtomic(path, append(data, '\n')); err != nil {
		if writeRefused(err) {
			return nil, fmt.Errorf("pin file %s: %w (%v)", path, ErrReadOnly, err)
		}
		return nil, fmt.Errorf("pin file %s: %w", path, err)
	}
	return f, nil
}

func writeRefused(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// writeAtomic writes data to a temporary file beside path, syncs it and renames it over path.
func writeAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Watch tells whether a file changed since it last looked, by its size, time and identity (a
// rename over it, or a ConfigMap's symlink swap, makes another file).
type Watch struct {
	last   os.FileInfo
	looked bool
}

// Changed reports whether path differs from when Changed last saw it; a file that appears or
// disappears has changed, a missing file seen missing again has not.
func (w *Watch) Changed(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		fi = nil
	}
	prev, looked := w.last, w.looked
	w.last, w.looked = fi, true
	switch {
	case !looked:
		return fi != nil
	case fi == nil || prev == nil:
		return (fi == nil) != (prev == nil)
	}
	return !os.SameFile(fi, prev) || fi.Size() != prev.Size() || !fi.ModTime().Equal(prev.ModTime())
}
