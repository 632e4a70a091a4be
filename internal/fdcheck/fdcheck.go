// Package fdcheck lets a test fail when it leaves file descriptors open: sockets of a
// connection that was never closed, files of a snapshot that was never released.
package fdcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Check counts the process's open descriptors now and registers a cleanup that fails t when,
// after waiting up to a second for closes in flight, more than slack are open beyond that count.
// Call it first in a test, so its cleanup runs after every other one (servers stopped,
// goroutines returned). Where /proc/self/fd does not exist it logs that and checks nothing.
func Check(t testing.TB, slack int) {
	t.Helper()
	before, err := Count()
	if err != nil {
		t.Logf("not counting file descriptors: %v", err)
		return
	}
	t.Cleanup(func() {
		var now int
		for range 50 {
			if now, _ = Count(); now <= before+slack {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("open file descriptors: %d at the start, %d at the end: %s", before, now, List())
	})
}

// Count is the number of descriptors the process holds open.
func Count() (int, error) {
	es, err := os.ReadDir("/proc/self/fd")
	return len(es), err
}

// List names each open descriptor and what it points at, for a failure message.
func List() string {
	es, _ := os.ReadDir("/proc/self/fd")
	out := make([]string, 0, len(es))
	for _, e := range es {
		l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		out = append(out, e.Name()+"→"+l)
	}
	return strings.Join(out, " ")
}
