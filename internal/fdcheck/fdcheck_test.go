package fdcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what a check reports instead of failing the real test.
type recorder struct {
	testing.TB
	cleanups []func()
	errors   []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Cleanup(f func())          { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Errorf(f string, a ...any) { r.errors = append(r.errors, f) }

func (r *recorder) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name  string
		leak  bool
		slack int
		fails bool
	}{
		{"nothing left open", false, 0, false},
		{"a file left open", true, 0, true},
		{"a file left open within the slack", true, 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			Check(r, tc.slack)
			f, err := os.Create(filepath.Join(t.TempDir(), "f"))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.leak {
				f.Close()
			}
			r.end()
			if tc.leak {
				f.Close()
			}
			if failed := len(r.errors) > 0; failed != tc.fails {
				t.Errorf("failed = %v (%s), want %v", failed, strings.Join(r.errors, "; "), tc.fails)
			}
		})
	}
}
