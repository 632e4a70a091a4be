package loadavg

import (
	"os"
	"regexp"
	"strings"
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

func TestVerdict(t *testing.T) {
	cases := []struct {
		before, after string
		cores         int
		want          string
	}{
		{"0.20/0.30/0.40", "0.90/0.50/0.40", 2, "quiet"},
		{"0.20/0.30/0.40", "1.00/0.50/0.40", 2, "busy"},
		{"9.40/10.37/6.46", "0.10/0.10/0.10", 2, "busy"},
		{"unknown", "0.10/0.10/0.10", 2, "unknown"},
	}
	for _, tc := range cases {
		if got := Verdict(tc.before, tc.after, tc.cores); !strings.HasPrefix(got, tc.want) {
			t.Errorf("Verdict(%q, %q, %d) = %q, want it to start with %q", tc.before, tc.after, tc.cores, got, tc.want)
		}
	}
}
