// Package loadavg reads the machine's load averages, which every benchmark prints beside its
// figures: on a shared 2-core machine they say how far the figures can be trusted.
package loadavg

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Now is the 1, 5 and 15 minute load averages as "a/b/c", or "unknown" where /proc/loadavg is
// missing (not Linux) or unreadable.
func Now() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], "/")
}

// Verdict says whether a machine with cores cores was quiet while the load averages before and
// after (as Now returns them) were read: quiet when the 1-minute load stayed under half a core
// per core, so that figures measured then were not slowed by other work; busy otherwise, or
// unknown when a reading is missing.
func Verdict(before, after string, cores int) string {
	var worst float64
	for _, r := range []string{before, after} {
		one, _, _ := strings.Cut(r, "/")
		v, err := strconv.ParseFloat(one, 64)
		if err != nil || cores <= 0 {
			return "unknown (no load average)"
		}
		worst = max(worst, v)
	}
	if worst < 0.5*float64(cores) {
		return fmt.Sprintf("quiet (1-minute load at most %.2f on %d cores)", worst, cores)
	}
	return fmt.Sprintf("busy (1-minute load up to %.2f on %d cores): other work shared the machine, timings may be pessimistic", worst, cores)
}
