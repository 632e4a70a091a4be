package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// suite is an installed @modelcontextprotocol/conformance.
type suite struct {
	node  string // a Node 22 binary
	entry string // the suite's CLI entry file
}

// findSuite returns the suite scripts/testdeps installed, and skips the test
// when it is not installed.
func findSuite(t *testing.T) suite {
	t.Helper()
	paths := testbackend.Conformance.Need(t)
	s := suite{node: paths[0], entry: paths[1]}
	for _, f := range []string{s.node, s.entry} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("conformance suite: %v (run scripts/testdeps again)", err)
		}
	}
	return s
}

// scenarioLine is one scenario in the output of `conformance list`: its
// name and the protocol versions it applies at ("extension" and "draft" for
// those that apply at none of the dated ones).
var scenarioLine = regexp.MustCompile(`^\s+- (\S+) \[([^\]]*)\]`)

// list returns the scenarios of role ("client" or "server") by the protocol
// version they apply at, as the suite itself decides.
func (s suite) list(t *testing.T, role string) map[string][]string {
	t.Helper()
	out, err := exec.Command(s.node, s.entry, "list", "--"+role).CombinedOutput()
	if err != nil {
		t.Fatalf("conformance list --%s: %v\n%s", role, err, out)
	}
	byVersion := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := scenarioLine.FindStringSubmatch(sc.Text()); m != nil {
			for _, v := range strings.Split(m[2], ",") {
				byVersion[strings.TrimSpace(v)] = append(byVersion[strings.TrimSpace(v)], m[1])
			}
		}
	}
	if len(byVersion) == 0 {
		t.Fatalf("conformance list --%s listed no scenario:\n%s", role, out)
	}
	return byVersion
}

// check is one entry of a scenario's checks.json.
type check struct {
	ID           string         `json:"id"`
	Name         string         `json:"name"`
	Description  string         `json:"description"`
	Status       string         `json:"status"` // SUCCESS, FAILURE, WARNING, SKIPPED, INFO
	ErrorMessage string         `json:"errorMessage"`
	Details      map[string]any `json:"details"`
}

// result is what the suite recorded for one scenario.
type result struct {
	checks []check
	dir    string // the scenario's result folder (checks.json, and a client's stdout.txt/stderr.txt)
}

// run runs the suite with args plus `--suite all --spec-version VERSION -o
// DIR`, every scenario of the version in one process (the suite runs them
// concurrently), and returns the results by scenario name. The suite's exit
// status only says whether some scenario failed, which the caller judges
// scenario by scenario, so it is not an error here.
func (s suite) run(ctx context.Context, t *testing.T, env []string, version string, args ...string) map[string]result {
	t.Helper()
	dir := t.TempDir()
	args = append([]string{s.entry}, args...)
	args = append(args, "--suite", "all", "--spec-version", version, "-o", dir)
	cmd := exec.CommandContext(ctx, s.node, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("conformance %s --spec-version %s: %s", args[1], version, time.Since(start).Round(10*time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("conformance %s: %v\n%s", args[1], ctx.Err(), out)
	}
	results, rerr := readResults(dir, args[1] == "server")
	if rerr != nil || len(results) == 0 {
		t.Fatalf("conformance %s left no results (exit: %v, reading: %v):\n%s", args[1], err, rerr, out)
	}
	return results
}

// timestampSuffix ends the name of every result folder.
var timestampSuffix = regexp.MustCompile(`-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$`)

// readResults reads DIR/[server-]SCENARIO-TIMESTAMP/checks.json (a client
// scenario "auth/x" is in DIR/auth/x-TIMESTAMP).
func readResults(dir string, server bool) (map[string]result, error) {
	out := map[string]result{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "checks.json" {
			return err
		}
		rel, err := filepath.Rel(dir, filepath.Dir(p))
		if err != nil {
			return err
		}
		name := timestampSuffix.ReplaceAllString(filepath.ToSlash(rel), "")
		if server {
			name = strings.TrimPrefix(name, "server-")
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var checks []check
		if err := json.Unmarshal(b, &checks); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		out[name] = result{checks: checks, dir: filepath.Dir(p)}
		return nil
	})
	return out, err
}

// tail returns the last n bytes of a result file, for failure messages.
func (r result) tail(file string, n int) string {
	b, err := os.ReadFile(filepath.Join(r.dir, file))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > n {
		b = append([]byte("..."), b[len(b)-n:]...)
	}
	return string(b)
}
