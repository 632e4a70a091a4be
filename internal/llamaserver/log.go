package llamaserver

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
)

// maxLine bounds one forwarded log line; the rest of a longer line is dropped.
const maxLine = 4096

// tailLines is how many of the child's last log lines are kept for error messages.
const tailLines = 8

// levelPrefix is llama-server's log prefix: elapsed time, then D, I, W or E
// ("0.02.027.250 I slot launch_slot_: ...").
var levelPrefix = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+ ([DIWE]) (.*)$`)

// lineWriter splits the child's output into lines and logs each: warnings and errors at
// their level, everything else at debug (llama-server logs several lines per request).
type lineWriter struct {
	log  *slog.Logger
	tail *logLines

	mu      sync.Mutex
	pid     int
	partial []byte
	long    bool // the current line overflowed maxLine
}

// setPID names the process the lines come from.
func (w *lineWriter) setPID(pid int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pid = pid
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := strings.IndexByte(string(p), '\n')
		if i < 0 {
			w.add(p)
			break
		}
		w.add(p[:i])
		w.emit()
		p = p[i+1:]
	}
	return n, nil
}

func (w *lineWriter) add(p []byte) {
	room := maxLine - len(w.partial)
	if len(p) > room {
		p, w.long = p[:max(room, 0)], true
	}
	w.partial = append(w.partial, p...)
}

// flush logs what is left of an unterminated last line.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.emit()
	}
}

func (w *lineWriter) emit() {
	line := strings.TrimRight(string(w.partial), "\r")
	if w.long {
		line += " …"
	}
	w.partial, w.long = w.partial[:0], false
	if strings.TrimSpace(line) == "" {
		return
	}
	level := slog.LevelDebug
	msg := line
	if m := levelPrefix.FindStringSubmatch(line); m != nil {
		msg = m[2]
		switch m[1] {
		case "W":
			level = slog.LevelWarn
		case "E":
			level = slog.LevelError
		}
	}
	if r := []rune(msg); len(r) > 300 {
		w.tail.add(string(r[:300]) + " …")
	} else {
		w.tail.add(msg)
	}
	w.log.Log(context.Background(), level, msg, "pid", w.pid)
}

// logLines keeps the last tailLines lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if len(l.lines) > tailLines {
		l.lines = l.lines[len(l.lines)-tailLines:]
	}
}

// last is the last lines joined with " | ", or "(none)".
func (l *logLines) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return "(none)"
	}
	return strings.Join(l.lines, " | ")
}
