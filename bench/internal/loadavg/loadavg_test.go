package loadavg

import (
	"os"
	"regexp"
	"testing"
)

func TestNow(t *testing.T) {
	got := Now()
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		if got != "unknown" {
			t.Errorf("Now() = %q without /proc/loadavg, want unknown", got)
		}
		return
	}
	if !regexp.MustCompile(`^[0-9.]+/[0-9.]+/[0-9.]+$`).MatchString(got) {
		t.Errorf("Now() = %q, want three load averages like 0.52/0.61/0.70", got)
	}
}
