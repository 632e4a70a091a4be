package conformance

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
)

// expectedFailuresFile lists the scenarios that fail today, each with why.
const expectedFailuresFile = "expected-failures.txt"

// expectation is one line of expected-failures.txt.
type expectation struct {
	key    string // a subtest path below TestConformance; "*" matches one element
	reason string
	line   int

	mu      sync.Mutex
	matched []string // scenarios it matched
	passed  []string // of those, the ones that did not fail
}

// expectations is the parsed file.
type expectations []*expectation

// loadExpectations reads the file: one entry per line, "KEY REASON", where
// KEY is client/VERSION/SCENARIO or server/NAME/VERSION/SCENARIO; blank lines
// and lines starting with # are ignored. Every entry needs a reason.
func loadExpectations(file string) (expectations, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out expectations
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, reason, _ := strings.Cut(line, " ")
		reason = strings.TrimSpace(reason)
		if reason == "" {
			return nil, fmt.Errorf("%s:%d: %q has no reason; write KEY REASON", file, n, key)
		}
		if !strings.HasPrefix(key, "client/") && !strings.HasPrefix(key, "server/") {
			return nil, fmt.Errorf("%s:%d: key %q must start with client/ or server/", file, n, key)
		}
		if _, err := path.Match(key, ""); err != nil {
			return nil, fmt.Errorf("%s:%d: key %q: %v", file, n, key, err)
		}
		if prev, ok := seen[key]; ok {
			return nil, fmt.Errorf("%s:%d: key %q is already on line %d", file, n, key, prev)
		}
		seen[key] = n
		out = append(out, &expectation{key: key, reason: reason, line: n})
	}
	return out, sc.Err()
}

// match returns the first entry whose key matches id, and records the match.
func (xs expectations) match(id string) *expectation {
	for _, x := range xs {
		if ok, _ := path.Match(x.key, id); ok {
			x.mu.Lock()
			x.matched = append(x.matched, id)
			x.mu.Unlock()
			return x
		}
	}
	return nil
}

func (x *expectation) notFailing(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.passed = append(x.passed, id)
}
