// Package eventually waits, in tests, for something that happens in the background: a server
// that reconnects, an index that catches up, a double that notices a closed connection.
package eventually

import (
	"testing"
	"time"
)

// Check calls f until it returns "" and fails t with f's last complaint if d passes first.
// It polls at 10 ms at first and backs off to 100 ms, so a check that issues requests does
// not flood what it waits for.
func Check(t testing.TB, d time.Duration, what string, f func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := 10 * time.Millisecond
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, d, msg)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// True is Check for a condition with nothing to say when it is false.
func True(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	Check(t, d, what, func() string {
		if cond() {
			return ""
		}
		return "still false"
	})
}
