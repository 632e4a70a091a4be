// Package callstats measures a call made in a loop by concurrent callers: its latencies over
// rounds, the calls a second and the CPU time the process spends per call. The bench programs
// that set two ways of making a call side by side run them in alternating rounds, each into
// its own Stats.
package callstats

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Stats gathers the latencies of one way of calling over its rounds, and the process's CPU time
// in them.
type Stats struct {
	lat     []time.Duration
	elapsed time.Duration
	cpu     time.Duration
}

// Round runs n callers of call for d, each calling in a loop, after a warm-up that is not
// measured (a fifth of d, at most a second). The first error stops the round and is returned.
func (s *Stats) Round(n int, d time.Duration, call func() error) error {
	var stop atomic.Bool
	warm := time.Now().Add(min(d/5, time.Second))
	var wg sync.WaitGroup
	lat := make([][]time.Duration, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			for !stop.Load() {
				t0 := time.Now()
				if err := call(); err != nil {
					errs[i] = err
					stop.Store(true)
					return
				}
				if t0.After(warm) {
					lat[i] = append(lat[i], time.Since(t0))
				}
			}
		})
	}
	time.Sleep(time.Until(warm))
	began, cpu0 := time.Now(), CPUTime()
	time.Sleep(d)
	s.cpu += CPUTime() - cpu0
	s.elapsed += time.Since(began)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, l := range lat {
		s.lat = append(s.lat, l...)
	}
	return nil
}

// Calls is the number of calls measured.
func (s *Stats) Calls() int { return len(s.lat) }

// P is the q-th percentile of the latencies.
func (s *Stats) P(q int) time.Duration {
	slices.Sort(s.lat)
	if len(s.lat) == 0 {
		return 0
	}
	return s.lat[min(len(s.lat)-1, len(s.lat)*q/100)]
}

// Rate is the calls measured a second.
func (s *Stats) Rate() float64 { return float64(len(s.lat)) / s.elapsed.Seconds() }

// CPUPerCall is the process's CPU time (user and system) per call measured.
func (s *Stats) CPUPerCall() time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	return s.cpu / time.Duration(len(s.lat))
}

// Row is the Markdown table row of these figures: | name | n | calls | calls/s | p50 | p90 |
// p99 | CPU/call |.
func (s *Stats) Row(name string, n int) string {
	return fmt.Sprintf("| %s | %d | %d | %.0f | %s | %s | %s | %s |", name, n, len(s.lat), s.Rate(), us(s.P(50)), us(s.P(90)), us(s.P(99)), us(s.CPUPerCall()))
}

// Micro is d in µs.
func Micro(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", Micro(d)) }

// CPUTime is the CPU time this process has used so far, user and system.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
