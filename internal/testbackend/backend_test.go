package testbackend

import (
	"runtime"
	"strings"
	"testing"
)

// recorder stands in for the test a helper is given, to see whether it skipped or failed.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = strings.TrimSpace(sprint(args)); runtime.Goexit() }
func (r *recorder) Fatal(args ...any) { r.failed = strings.TrimSpace(sprint(args)); runtime.Goexit() }

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
