package modelfetch

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// String is the progress as one line: "FILE: 1.2 GB of 4.3 GB (28%), 25.0 MB/s, ETA 2m3s".
func (p Progress) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	b.WriteString(": ")
	b.WriteString(Bytes(p.Done))
	if p.Total > 0 {
		fmt.Fprintf(&b, " of %s (%d%%)", Bytes(p.Total), p.Done*100/p.Total)
	}
	if p.Rate > 0 {
		fmt.Fprintf(&b, ", %s/s", Bytes(int64(p.Rate)))
	}
	switch {
	case p.Complete:
		b.WriteString(", done")
	case p.ETA > 0:
		fmt.Fprintf(&b, ", ETA %s", p.ETA.Round(time.Second))
	}
	return b.String()
}

// Bytes formats a size in decimal units, as the hub shows sizes: 512 B, 45.9 MB, 4.3 GB.
func Bytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTP"[exp])
}

// TerminalProgress draws the progress on one line of a terminal, redrawn in place, and ends
// the line when the file is complete.
func TerminalProgress(w io.Writer) func(Progress) {
	var mu sync.Mutex
	width := 0
	return func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		line := p.String()
		pad := max(width-len(line), 0)
		width = len(line)
		fmt.Fprintf(w, "\r%s%s", line, strings.Repeat(" ", pad))
		if p.Complete {
			fmt.Fprintln(w)
			width = 0
		}
	}
}

// LogProgress logs the progress at most every interval (and once at the end), for logs that
// are not a terminal.
func LogProgress(logger *slog.Logger, every time.Duration) func(Progress) {
	var mu sync.Mutex
	var last time.Time
	return func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		if !p.Complete && time.Since(last) < every {
			return
		}
		last = time.Now()
		attrs := []any{"file", p.File, "bytes", p.Done}
		if p.Total > 0 {
			attrs = append(attrs, "total", p.Total, "percent", p.Done*100/p.Total)
		}
		attrs = append(attrs, "rate", Bytes(int64(p.Rate))+"/s")
		if p.Complete {
			logger.Info("model downloaded", attrs...)
			return
		}
		if p.ETA > 0 {
			attrs = append(attrs, "eta", p.ETA.Round(time.Second).String())
		}
		logger.Info("downloading model", attrs...)
	}
}
