// Package filewatch tells when files may have changed, for the config reloader and the TLS
// files alike. It watches the files' directories, not the files: Kubernetes updates a mounted
// ConfigMap or Secret by swapping a symlink (..data) in the directory, which a watch on a file
// itself misses. With a poll interval it also ticks, for file systems that send no events
// (some network and container mounts). It only says "look again": reading the files and
// telling whether they really changed is the caller's.
package filewatch

import (
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watcher sends on C when one of its files may have changed. Sends coalesce: C holds at most
// one, so a burst of changes wakes the reader once.
type Watcher struct {
	C <-chan struct{}

	c     chan struct{}
	files []string
	log   *slog.Logger
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// New watches the directories of files and, when poll is above 0, ticks every poll. A
// directory that cannot be watched is logged and left to the poll (or to the caller's other
// triggers, such as SIGHUP). Close stops it.
func New(files []string, poll time.Duration, logger *slog.Logger) (*Watcher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	c := make(chan struct{}, 1)
	w := &Watcher{C: c, c: c, files: files, log: logger, stop: make(chan struct{}), done: make(chan struct{})}
	var dirs []string
	for _, f := range files {
		dir := filepath.Dir(f)
		if slices.Contains(dirs, dir) {
			continue
		}
		dirs = append(dirs, dir)
		if err := fw.Add(dir); err != nil {
			logger.Warn("changes to these files are not watched", "dir", dir, "err", err)
		}
	}
	go w.run(fw, poll)
	return w, nil
}

// Close stops watching and waits until the watcher has let go of its resources.
func (w *Watcher) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Watcher) run(fw *fsnotify.Watcher, poll time.Duration) {
	defer close(w.done)
	defer fw.Close()
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-fw.Events:
			if !ok {
				return
			}
			if w.Concerns(ev.Name) {
				w.signal()
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return
			}
			w.log.Warn("watching files for changes", "files", w.files, "err", err)
		case <-tick:
			w.signal()
		}
	}
}

func (w *Watcher) signal() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Concerns reports whether a change of name in a watched directory may change one of the
// files: the file itself, or Kubernetes' ..data symlink and the timestamped directories it
// points to. Other files in the directory (an editor's swap file) are ignored.
func (w *Watcher) Concerns(name string) bool { return concerns(w.files, name) }

func concerns(files []string, name string) bool {
	base := filepath.Base(name)
	if strings.HasPrefix(base, "..") {
		return true
	}
	for _, f := range files {
		if base == filepath.Base(f) {
			return true
		}
	}
	return false
}
