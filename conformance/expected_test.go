package conformance

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
)

// expectedFailuresFile lists what fails today, each with why.
const expectedFailuresFile = "expected-failures.txt"

// expectation is one entry of expected-failures.txt.
type expectation struct {
	scenario string // a subtest path below TestConformance; "*" matches one element
	check    string // a check id pattern; empty means any check of the scenario
	flaky    bool   // the check fails only sometimes: its failure is tolerated, its passing too
	reason   string
	line     int

	mu      sync.Mutex
	matched int // scenarios that ran and that the entry names
}

func (x *expectation) String() string {
	key := x.scenario
	if x.check != "" {
		key += "#" + x.check
	}
	return fmt.Sprintf("%s:%d %s", expectedFailuresFile, x.line, key)
}

// expectations is the parsed file.
type expectations []*expectation

// loadExpectations reads the file. One entry per line:
//
//	[flaky] SCENARIO[#CHECK] REASON
//
// SCENARIO is client/VERSION/NAME or server/SERVER/VERSION/NAME, CHECK a
// check id of that scenario; both may use path.Match patterns ("*" matches
// one path element). Blank lines and lines starting with # are ignored.
// Every entry needs a reason.
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
		x := &expectation{line: n}
		key, rest, _ := strings.Cut(line, " ")
		if key == "flaky" {
			x.flaky = true
			key, rest, _ = strings.Cut(strings.TrimSpace(rest), " ")
		}
		x.reason = strings.TrimSpace(rest)
		x.scenario, x.check, _ = strings.Cut(key, "#")
		switch {
		case x.reason == "":
			return nil, fmt.Errorf("%s:%d: %q has no reason; write [flaky] SCENARIO[#CHECK] REASON", file, n, key)
		case !strings.HasPrefix(x.scenario, "client/") && !strings.HasPrefix(x.scenario, "server/"):
			return nil, fmt.Errorf("%s:%d: %q must start with client/ or server/", file, n, key)
		case x.flaky && x.check == "":
			return nil, fmt.Errorf("%s:%d: a flaky entry names its check (SCENARIO#CHECK), so the scenario's other checks still count", file, n)
		}
		for _, pattern := range []string{x.scenario, x.check} {
			if _, err := path.Match(pattern, ""); err != nil {
				return nil, fmt.Errorf("%s:%d: %q: %v", file, n, pattern, err)
			}
		}
		if prev, ok := seen[key]; ok {
			return nil, fmt.Errorf("%s:%d: %q is already on line %d", file, n, key, prev)
		}
		seen[key] = n
		out = append(out, x)
	}
	return out, sc.Err()
}

// forScenario returns the entries that name scenario id, and counts the match.
func (xs expectations) forScenario(id string) []*expectation {
	var out []*expectation
	for _, x := range xs {
		if ok, _ := path.Match(x.scenario, id); ok {
			x.mu.Lock()
			x.matched++
			x.mu.Unlock()
			out = append(out, x)
		}
	}
	return out
}

// covering returns the first of entries that expects check id to fail.
func covering(entries []*expectation, id string) *expectation {
	for _, x := range entries {
		if ok, _ := path.Match(x.check, id); ok || x.check == "" {
			return x
		}
	}
	return nil
}
