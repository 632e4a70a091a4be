package audit

import (
	"context"
	"hash"
	"io"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/toolmesh/toolmesh/internal/logsample"
)

// sink is where the lines go: the trail's file, stdout, or a test's double.
type sink interface {
	io.Writer
	Sync() error
	Truncate(size int64) error
	Close() error
}

// maxBatch bounds the records one write takes, so that a burst is written while it comes.
const maxBatch = 1024

// batchWait is how long the writer lets records gather after the first of a batch: one wakeup
// and one write for the calls of those milliseconds instead of one of each per call, which on a
// busy 2-core machine cost a call tens of µs (the bench/audit profile). The trail's durability
// is the fsync interval; a record still reaches the file within milliseconds.
const batchWait = 2 * time.Millisecond

// writer is the one goroutine that encodes, chains and writes the records. Its chain advances
// only when a write succeeds: a failed batch is encoded again, from the same head, next time.
type writer struct {
	r   *Recorder
	cfg Config
	out sink // nil: no file (OpenTelemetry only)
	// path is the file's path when it is a regular file of ours, which can be rotated; ""
	// for stdout, a device, a test's sink.
	path string
	// size is what the file holds of complete records; seq is the next record's number in it;
	// prev is the hash of the last record written (the chain's head, across files).
	size int64
	seq  uint64
	prev string
	// start: the file needs its start record, which says why it begins (new, rotated,
	// restart, torn) and which file it follows.
	start        bool
	reason       string
	previousFile string
	// reopen: the file is closed (a rotation failed half way) and must be opened again.
	reopen bool
	// torn: a failed write left bytes that could not be cut off; the file is rotated.
	torn bool

	mac, argsMac hash.Hash
	macName      string
	host         string
	pending      []item
	buf          []byte
	heads        []head
	failing      error
	dirty        bool // written since the last fsync
	syncs        bool // the sink is a file worth fsyncing (not stdout, a pipe, a device)
	errs         *logsample.Sampler
}

// head is where one line of a batch sits in the chain, for its OpenTelemetry record.
type head struct {
	seq        uint64
	hash, prev string
	line       []byte
	item       int // its record in pending; -1 for a start record
}

func newWriter(r *Recorder, cfg Config, key []byte, test sink) (*writer, error) {
	w := &writer{r: r, cfg: cfg, mac: newHasher(key), argsMac: newHasher(key), macName: "sha256", start: true, reason: "new",
		errs: logsample.New(r.logger, 3, 10*time.Second)}
	if key != nil {
		w.macName = "hmac-sha256"
	}
	w.host, _ = os.Hostname()
	switch {
	case test != nil:
		w.out, w.syncs = test, true
	case cfg.File == "":
	case cfg.File == "-":
		w.out = os.Stdout
	default:
		if err := w.open(); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// open opens the trail's file. A regular file already there (a restart) is moved aside first,
// and the new file chained to its last record.
func (w *writer) open() error {
	path := w.cfg.File
	if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		w.prev = lastHash(path)
		moved, err := w.moveAside(path)
		if err != nil {
			return err
		}
		w.reason, w.previousFile = "restart", moved
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	w.out, w.size, w.seq, w.start, w.reopen = f, 0, 0, true, false
	w.syncs = st.Mode().IsRegular()
	if w.syncs {
		w.path = path
		w.size = st.Size()
	}
	return nil
}

// moveAside renames the trail's file to its rotated name and returns that name's base.
func (w *writer) moveAside(path string) (string, error) {
	name, err := rotatedName(path, time.Now())
	if err != nil {
		return "", err
	}
	if err := os.Rename(path, name); err != nil {
		return "", err
	}
	return baseName(name), nil
}

// rotate moves the file aside and begins a new one, chained to it. When the file cannot be
// moved, the records go on into it: a trail past its size beats no trail.
func (w *writer) rotate(reason string) error {
	moved, err := w.moveAside(w.path)
	if err != nil {
		w.errs.Log(context.Background(), slog.LevelWarn, "audit trail: rotating failed; writing on into the same file", "err", err, "file", w.path)
		return nil
	}
	if err := w.out.Sync(); err != nil {
		w.r.logger.Warn("audit trail: fsync of the rotated file failed", "err", err, "file", moved)
	}
	_ = w.out.Close()
	w.reason, w.previousFile, w.torn, w.reopen = reason, moved, false, true
	if err := w.open(); err != nil {
		return err
	}
	w.prune()
	return nil
}

// prune deletes the oldest rotated files past MaxFiles.
func (w *writer) prune() {
	if w.cfg.MaxFiles == 0 {
		return
	}
	files, err := Files(w.path)
	if err != nil {
		w.r.logger.Warn("audit trail: listing rotated files", "err", err)
		return
	}
	rotated := files[:len(files)-1] // the live file is last
	for _, f := range rotated[:max(0, len(rotated)-w.cfg.MaxFiles)] {
		if err := os.Remove(f); err != nil {
			w.r.logger.Warn("audit trail: deleting a rotated file past --audit.max-files", "file", f, "err", err)
			continue
		}
		w.r.logger.Info("audit trail: deleted a rotated file past --audit.max-files", "file", f)
	}
}

// run takes records until the Recorder stops, writing whatever has queued at once while
// writes work and retrying on every tick while they fail.
func (w *writer) run() {
	defer close(w.r.done)
	every := w.cfg.SyncInterval
	if every == 0 || every > time.Second {
		every = time.Second // retries of a failed write come at least this often
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	gather := time.NewTimer(batchWait)
	gather.Stop()
	for {
		select {
		case it := <-w.r.q:
			w.take(it)
			gather.Reset(batchWait)
			select {
			case <-gather.C:
			case <-w.r.stop: // closed: the loop's next turn sees it too
				gather.Stop()
			}
			w.drain(maxBatch)
			if w.failing == nil {
				w.flush()
			}
		case <-tick.C:
			if w.failing != nil {
				w.flush()
			} else if w.dirty && w.cfg.SyncInterval > 0 {
				w.sync()
			}
		case <-w.r.stop:
			for {
				w.drain(queueSize)
				w.flush()
				if len(w.r.q) == 0 || w.failing != nil {
					break
				}
			}
			if w.dirty {
				w.sync()
			}
			if w.out != nil && w.out != os.Stdout {
				_ = w.out.Close()
			}
			return
		}
	}
}

// take adds it to the batch; while writes fail, at most queueSize records wait, and the rest
// are dropped (and declared once writes work).
func (w *writer) take(it item) {
	if len(w.pending) >= queueSize {
		w.r.drop(context.Background(), "writes of the trail keep failing")
		return
	}
	w.pending = append(w.pending, it)
}

// drain takes up to n records that are already queued.
func (w *writer) drain(n int) {
	for range n {
		select {
		case it := <-w.r.q:
			w.take(it)
		default:
			return
		}
	}
}

// flush writes the batch: one write while the file has room, a write per file when it must
// rotate on the way.
func (w *writer) flush() {
	for (len(w.pending) > 0 || w.start) && w.writeSome() {
	}
}

// writeSome writes the file's start record when it needs one and the pending records that fit
// before the file must rotate (at least one), in one write, and drops them from the batch. It
// reports whether the write worked.
func (w *writer) writeSome() bool {
	if w.path != "" || w.reopen {
		var err error
		switch {
		case w.reopen:
			err = w.open()
		case w.torn:
			err = w.rotate("torn")
		case w.seq > 1 && w.full(0): // a record besides its start record
			err = w.rotate("rotated")
		}
		if err != nil {
			w.fail(err, 0)
			return false
		}
	}
	lost := w.r.lost.Load()
	buf, heads := w.buf[:0], w.heads[:0]
	seq, prev := w.seq, w.prev
	taken := 0
	for i := -1; i < len(w.pending); i++ {
		at, from := len(buf), prev
		switch {
		case i < 0 && !w.start:
			continue
		case i < 0:
			buf, prev = w.appendStart(buf, seq, prev)
		case taken > 0 && w.full(len(buf)):
			i = len(w.pending) // the rest go to the next file
			continue
		default:
			var declared int64
			if i == 0 {
				declared = lost // the batch's first record declares the records lost before it
			}
			buf, prev = w.appendRecord(buf, w.pending[i], seq, prev, declared)
			taken++
		}
		heads = append(heads, head{seq: seq, hash: prev, prev: from, item: i, line: buf[at : len(buf)-1]})
		seq++
	}
	w.buf, w.heads = buf, heads
	if w.out != nil {
		if n, err := w.out.Write(buf); err != nil {
			w.fail(err, n)
			return false
		}
	}
	// Written: the chain moves on.
	w.size += int64(len(buf))
	w.seq, w.prev, w.start = seq, prev, false
	if taken > 0 {
		w.r.lost.Add(-lost)
	}
	w.dirty = w.out != nil && w.syncs
	w.emit(heads)
	n := copy(w.pending, w.pending[taken:])
	clear(w.pending[n:]) // the records' arguments go with them
	w.pending = w.pending[:n]
	w.r.records.Add(context.Background(), int64(taken), metric.WithAttributes(attribute.String("outcome", "written")))
	if w.failing != nil {
		w.r.logger.Info("audit trail: writing again", "after", w.failing.Error())
		w.failing = nil
	}
	w.r.failure.Store(nil)
	if w.cfg.SyncInterval == 0 && w.dirty {
		w.sync()
	}
	return true
}

// full says whether the file, with extra bytes more, has reached --audit.max-bytes: it is
// rotated before the next record.
func (w *writer) full(extra int) bool {
	return w.path != "" && w.cfg.MaxBytes > 0 && w.size+int64(extra) >= w.cfg.MaxBytes
}

// fail handles a write that failed after n bytes: they are cut off, so that the file ends on
// a whole record, and the batch waits for the next try.
func (w *writer) fail(err error, n int) {
	if n > 0 && w.out != nil {
		if terr := w.out.Truncate(w.size); terr != nil {
			w.torn = true // the next try begins a new file
		}
	}
	w.failing = err
	w.r.failure.Store(&err)
	w.r.writeErrors.Add(context.Background(), 1)
	w.errs.Log(context.Background(), slog.LevelWarn, "audit trail: writing failed; its records are kept and written again",
		"err", err, "waiting", len(w.pending), "file", w.cfg.File)
}

// sync fsyncs the file. A failed fsync may have lost what was written (the kernel drops the
// pages it could not write): under fail-closed calls wait for the next fsync that works.
func (w *writer) sync() {
	if err := w.out.Sync(); err != nil {
		w.r.failure.Store(&err)
		w.r.writeErrors.Add(context.Background(), 1)
		w.errs.Log(context.Background(), slog.LevelWarn, "audit trail: fsync failed", "err", err, "file", w.cfg.File)
		return
	}
	w.dirty = false
	if w.failing == nil {
		w.r.failure.Store(nil)
	}
}

// typeOf is a record's type.
func typeOf(r Record) string {
	if r.Type == "" {
		return "call"
	}
	return r.Type
}
