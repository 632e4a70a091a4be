package eventually

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps a failure instead of failing the real test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(f string, a ...any) {
	r.failed = fmt.Sprintf(f, a...)
	panic(r) // Fatalf does not return
}

func run(f func(t testing.TB)) (failed string) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		failed = r.failed
	}()
	f(r)
	return ""
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name     string
		okAfter  int // calls before f is satisfied; -1: never
		wantFail string
	}{
		{"at once", 0, ""},
		{"after a few tries", 3, ""},
		{"never", -1, "the thing: not within 200ms: try"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			got := run(func(r testing.TB) {
				Check(r, 200*time.Millisecond, "the thing", func() string {
					calls++
					if tc.okAfter >= 0 && calls > tc.okAfter {
						return ""
					}
					return fmt.Sprintf("try %d", calls)
				})
			})
			if (tc.wantFail == "") != (got == "") || !strings.HasPrefix(got, tc.wantFail) {
				t.Errorf("failure %q, want %q", got, tc.wantFail)
			}
		})
	}
}

func TestTrue(t *testing.T) {
	if got := run(func(r testing.TB) { True(r, 50*time.Millisecond, "never", func() bool { return false }) }); got == "" {
		t.Error("a condition that stays false did not fail")
	}
	if got := run(func(r testing.TB) { True(r, 50*time.Millisecond, "at once", func() bool { return true }) }); got != "" {
		t.Errorf("a true condition failed: %s", got)
	}
}
