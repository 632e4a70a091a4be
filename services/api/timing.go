package api

import "time"

// millis is d in milliseconds with microsecond precision, as every *_ms field of a response.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// timed is a span of the query that began at start and ends now: its start counted from the
// query's start, and its length, both in milliseconds.
func (r *runner) timed(start time.Time) (startMs, durationMs float64) {
	return millis(start.Sub(r.began)), millis(time.Since(start))
}
