package memory

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// Snapshot file layout: magic, format version (uint32), CRC-32 (IEEE) of the payload (uint32),
// payload length (uint64), payload (gob of snapshotV1). Integers are little-endian.
const (
	magic         = "TOOLMESH-MEMSTORE\n"
	formatVersion = 1
	headerLen     = len(magic) + 4 + 4 + 8
)

type snapDoc struct {
	ID, Server, Hash string
	Tool             []byte
	Dense            []float32
}

// snapVec stores one named vector's postings column-wise: the postings of Terms[i] are
// Docs/Weights[Offsets[i]:Offsets[i+1]], Docs indexing snapshotV1.Docs.
type snapVec struct {
	Terms   []uint32
	Offsets []uint32
	Docs    []uint32
	Weights []float32
}

type snapshotV1 struct {
	Fingerprint string
	Docs        []snapDoc
	Vectors     map[string]snapVec
	// Complete is the store's completion marker (store.Completion). It was added without a new
	// format version: gob leaves a field missing from the file at its zero value, so a file of
	// the earlier format loads as partial, and the earlier binary ignores the field. Partial is
	// right for those files: that version rewrote the file after every batch, a first build cut
	// short included, and nothing in the file tells a finished build from a cut one.
	Complete bool
}

// pending is a snapshot captured under the lock, still to be encoded and written: the tools
// are marshaled outside the lock (they are immutable once stored), so searches wait only for
// the copy of the postings.
type pending struct {
	snap  *snapshotV1
	tools []*toolmeshv1.Tool // of snap.Docs, by index
}

// snapshot captures the current state. Called with mu held.
func (s *Store) snapshot() *pending {
	snap := &snapshotV1{Fingerprint: s.fingerprint, Vectors: map[string]snapVec{}, Complete: s.complete}
	p := &pending{snap: snap}
	pos := make([]uint32, len(s.slots))
	for i := range s.slots {
		x := &s.slots[i]
		if !x.live {
			continue
		}
		pos[i] = uint32(len(snap.Docs))
		snap.Docs = append(snap.Docs, snapDoc{ID: x.id, Server: s.serverNames[x.server], Hash: x.hash, Dense: x.dense})
		p.tools = append(p.tools, x.tool)
	}
	for name, post := range s.vecs {
		v := snapVec{Terms: make([]uint32, 0, len(post))}
		for t := range post {
			v.Terms = append(v.Terms, t)
		}
		slices.Sort(v.Terms)
		v.Offsets = make([]uint32, 0, len(v.Terms)+1)
		v.Offsets = append(v.Offsets, 0)
		for _, t := range v.Terms {
			for _, p := range post[t] {
				v.Docs = append(v.Docs, pos[p.slot])
				v.Weights = append(v.Weights, p.w)
			}
			v.Offsets = append(v.Offsets, uint32(len(v.Docs)))
		}
		snap.Vectors[name] = v
	}
	return p
}

// persist writes a snapshot to the snapshot file atomically: a temp file in the same directory,
// fsync, rename over the old file, fsync of the directory. A crash at any point leaves the old
// file or the new one, never a partial one (a leftover temp file is removed by the next Open).
// Called with wmu held.
func (s *Store) persist(p *pending) error {
	for i, t := range p.tools {
		b, err := proto.Marshal(t)
		if err != nil {
			return fmt.Errorf("marshal tool %s: %w", p.snap.Docs[i].ID, err)
		}
		p.snap.Docs[i].Tool = b
	}
	var payload bytes.Buffer
	if err := gob.NewEncoder(&payload).Encode(p.snap); err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	out := make([]byte, 0, headerLen+payload.Len())
	out = append(out, magic...)
	out = binary.LittleEndian.AppendUint32(out, formatVersion)
	out = binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(payload.Bytes()))
	out = binary.LittleEndian.AppendUint64(out, uint64(payload.Len()))
	out = append(out, payload.Bytes()...)

	dir := filepath.Dir(s.path)
	f, err := os.CreateTemp(dir, filepath.Base(s.path)+tempInfix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	write := s.write
	if write == nil {
		write = func(f *os.File, b []byte) error { _, err := f.Write(b); return err }
	}
	if err := write(f, out); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// tempInfix marks the temp files persist writes next to the snapshot (path + tempInfix + random).
const tempInfix = ".tmp-"

// errSnapshot marks a snapshot that exists but cannot be used.
var errSnapshot = errors.New("memory store: unusable snapshot")

// load reads the snapshot at s.path if there is one. An unusable one is reported, moved aside
// and ignored; only a directory that cannot be created is an error.
func (s *Store) load() error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	s.removeTemps()
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = s.restore(b)
	}
	if err == nil {
		return nil
	}
	s.loadErr = fmt.Errorf("%w %s: %w", errSnapshot, s.path, err)
	s.log.Warn("memory store: snapshot not loaded; starting empty, the index will be rebuilt",
		"path", s.path, "err", err)
	if rerr := os.Rename(s.path, s.path+".bad"); rerr != nil {
		s.log.Warn("memory store: cannot move the unusable snapshot aside", "path", s.path, "err", rerr)
	}
	return nil
}

// removeTemps deletes temp files a writer left when it died before its rename: they are never
// the snapshot (the rename is the commit), and each can be as large as the index.
func (s *Store) removeTemps() {
	entries, _ := os.ReadDir(filepath.Dir(s.path))
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), filepath.Base(s.path)+tempInfix) {
			continue
		}
		tmp := filepath.Join(filepath.Dir(s.path), e.Name())
		if err := os.Remove(tmp); err != nil {
			s.log.Warn("memory store: cannot remove a temp file left by an interrupted write", "path", tmp, "err", err)
			continue
		}
		s.log.Info("memory store: removed a temp file left by an interrupted write", "path", tmp)
	}
}

func (s *Store) restore(b []byte) error {
	if len(b) < headerLen || string(b[:len(magic)]) != magic {
		return errors.New("not a snapshot file (bad magic)")
	}
	h := b[len(magic):]
	if v := binary.LittleEndian.Uint32(h); v != formatVersion {
		return fmt.Errorf("format version %d, want %d", v, formatVersion)
	}
	sum := binary.LittleEndian.Uint32(h[4:])
	n := binary.LittleEndian.Uint64(h[8:])
	payload := b[headerLen:]
	if uint64(len(payload)) != n {
		return fmt.Errorf("truncated: payload %d bytes, header says %d", len(payload), n)
	}
	if crc32.ChecksumIEEE(payload) != sum {
		return errors.New("checksum mismatch")
	}
	var snap snapshotV1
	if err := gob.NewDecoder(bytes.NewReader(payload)).Decode(&snap); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if snap.Fingerprint != s.fingerprint {
		return fmt.Errorf("written by encoder %q, current is %q", snap.Fingerprint, s.fingerprint)
	}
	docs := make([]store.Doc, len(snap.Docs))
	for i, d := range snap.Docs {
		t := &toolmeshv1.Tool{}
		if err := proto.Unmarshal(d.Tool, t); err != nil {
			return fmt.Errorf("tool %s: %w", d.ID, err)
		}
		docs[i] = store.Doc{ID: d.ID, Server: d.Server, Hash: d.Hash, Tool: t, Dense: d.Dense, Sparse: map[string]store.SparseVector{}}
	}
	names := make([]string, 0, len(snap.Vectors))
	for name := range snap.Vectors {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v := snap.Vectors[name]
		if len(v.Offsets) != len(v.Terms)+1 || len(v.Docs) != len(v.Weights) {
			return fmt.Errorf("vector %s: inconsistent postings", name)
		}
		for i, t := range v.Terms {
			lo, hi := v.Offsets[i], v.Offsets[i+1]
			if lo > hi || int(hi) > len(v.Docs) {
				return fmt.Errorf("vector %s: bad offsets", name)
			}
			for j := lo; j < hi; j++ {
				di := v.Docs[j]
				if int(di) >= len(docs) {
					return fmt.Errorf("vector %s: bad doc index", name)
				}
				sv := docs[di].Sparse[name]
				sv.Indices = append(sv.Indices, t) // terms ascend, so indices stay sorted
				sv.Values = append(sv.Values, v.Weights[j])
				docs[di].Sparse[name] = sv
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range docs {
		s.put(&docs[i])
	}
	s.complete = snap.Complete
	return nil
}
