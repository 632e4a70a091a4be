// Package loadavg reads the machine's load averages, which every benchmark prints beside its
// figures: on a shared 2-core machine they say how far the figures can be trusted.
package loadavg

import (
	"os"
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
