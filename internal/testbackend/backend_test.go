package testbackend

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder stands in for the test a helper is given, to see whether it skipped or failed.
type recorder struct {
	testing.TB
	skipped, failed string
	logs            []string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = strings.TrimSpace(sprint(args)); runtime.Goexit() }
func (r *recorder) Fatal(args ...any) { r.failed = strings.TrimSpace(sprint(args)); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func sprint(args []any) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(a.(string))
	}
	return b.String()
}

// need runs b.Need on a recorder in its own goroutine, as the testing package would.
func need(b Backend) (vals []string, r *recorder) {
	r = &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		vals = b.Need(r)
	}()
	<-done
	return vals, r
}

func TestNeed(t *testing.T) {
	b := Backend{Name: "thing", Vars: []string{"TESTBACKEND_A", "TESTBACKEND_B"}, Required: "TESTBACKEND_REQUIRED", Install: "scripts/thing"}
	cases := []struct {
		name        string
		a, b, req   string
		wantVals    []string
		wantSkipped bool
		wantFailed  bool
	}{
		{name: "installed", a: "/bin/a", b: "/bin/b", wantVals: []string{"/bin/a", "/bin/b"}},
		{name: "installed and required", a: "/bin/a", b: "/bin/b", req: "1", wantVals: []string{"/bin/a", "/bin/b"}},
		{name: "absent", a: "/bin/a", wantSkipped: true},
		{name: "absent but required", a: "/bin/a", req: "1", wantFailed: true},
		{name: "absent, required set to something else", req: "0", wantSkipped: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TESTBACKEND_A", tc.a)
			t.Setenv("TESTBACKEND_B", tc.b)
			t.Setenv("TESTBACKEND_REQUIRED", tc.req)
			vals, r := need(b)
			if got := strings.Join(vals, " "); got != strings.Join(tc.wantVals, " ") {
				t.Errorf("values = %q, want %q", got, tc.wantVals)
			}
			if (r.skipped != "") != tc.wantSkipped || (r.failed != "") != tc.wantFailed {
				t.Fatalf("skipped %q, failed %q; want skipped=%v failed=%v", r.skipped, r.failed, tc.wantSkipped, tc.wantFailed)
			}
			msg := r.skipped + r.failed
			if msg != "" && (!strings.Contains(msg, "TESTBACKEND_B") || !strings.Contains(msg, "scripts/thing")) {
				t.Errorf("message %q does not name the unset variable and how to install it", msg)
			}
			if tc.wantFailed && !strings.Contains(msg, "TESTBACKEND_REQUIRED=1") {
				t.Errorf("failure %q does not name the variable that made it one", msg)
			}
		})
	}
}

// TestNeedPending: while scripts/test still builds a backend beside the tests, a test that needs
// it waits for the install's file, and takes the values from it; an install that failed (an
// empty file) or never ends fails a required backend instead of hanging.
func TestNeedPending(t *testing.T) {
	b := Backend{Name: "thing", Vars: []string{"TESTBACKEND_A"}, Required: "TESTBACKEND_REQUIRED", Install: "scripts/thing", Pending: "TESTBACKEND_PENDING"}
	defer func(d time.Duration) { pendingWait = d }(pendingWait)
	pendingWait = 3 * time.Second
	cases := []struct {
		name       string
		write      string // what the install writes, after a delay; "-" for never
		wantVals   string
		wantFailed string
	}{
		{name: "installed while waiting", write: "TESTBACKEND_A=/bin/a\n", wantVals: "/bin/a"},
		{name: "install failed", write: "", wantFailed: "TESTBACKEND_A"},
		{name: "install never ends", write: "-", wantFailed: "did not end within 3s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "thing.env")
			t.Setenv("TESTBACKEND_A", "")
			t.Setenv("TESTBACKEND_REQUIRED", "1")
			t.Setenv("TESTBACKEND_PENDING", path)
			if tc.write != "-" {
				timer := time.AfterFunc(500*time.Millisecond, func() {
					tmp := path + ".tmp"
					if err := os.WriteFile(tmp, []byte(tc.write), 0o644); err != nil {
						panic(err)
					}
					if err := os.Rename(tmp, path); err != nil {
						panic(err)
					}
				})
				defer timer.Stop()
			}
			vals, r := need(b)
			if got := strings.Join(vals, " "); got != tc.wantVals {
				t.Errorf("values = %q, want %q", got, tc.wantVals)
			}
			if tc.wantFailed == "" && r.failed != "" || !strings.Contains(r.failed, tc.wantFailed) {
				t.Errorf("failed %q, want a failure containing %q", r.failed, tc.wantFailed)
			}
			if r.skipped != "" {
				t.Errorf("skipped %q: a required backend must not skip", r.skipped)
			}
			if len(r.logs) == 0 || !strings.Contains(r.logs[0], "still installing") {
				t.Errorf("logs %q: the wait is not said", r.logs)
			}
		})
	}
}
