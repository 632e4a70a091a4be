// Package logsample bounds how many lines a kind of event may log, so that an attacker who can
// cause the event (a wrong token, a foreign Origin) cannot flood the logs: the first lines of a
// burst are logged, then at most a steady rate, and the next line logged says how many were
// left out in between.
package logsample

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Sampler logs at most Burst lines at once and then one per Every. The zero value is not
// usable; use New. A Sampler is safe for concurrent use.
type Sampler struct {
	logger     *slog.Logger
	limit      *rate.Limiter
	suppressed atomic.Int64
}

// New returns a Sampler writing to logger: burst lines at once, then one every every.
func New(logger *slog.Logger, burst int, every time.Duration) *Sampler {
	return &Sampler{logger: logger, limit: rate.NewLimiter(rate.Every(every), burst)}
}

// Log logs msg with attrs at level if the budget allows, adding "suppressed": how many lines
// were left out since the last one logged. It reports whether it logged.
func (s *Sampler) Log(ctx context.Context, level slog.Level, msg string, attrs ...any) bool {
	if !s.logger.Enabled(ctx, level) {
		return false
	}
	if !s.limit.Allow() {
		s.suppressed.Add(1)
		return false
	}
	if n := s.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	s.logger.Log(ctx, level, msg, attrs...)
	return true
}
