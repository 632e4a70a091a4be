// Package testbackend is how a test finds a real backend that scripts/backends installed (a
// llama-server, Jaeger v2, Chromium, Node 22 with the MCP reference servers): the test skips
// when it is absent, unless the run declares the backend required, and then the test fails.
// scripts/test declares every installable backend required, so a broken install can never turn
// a real-backend suite into a quiet skip in CI.
package testbackend

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Backend is one real peer the tests can use when it is installed.
type Backend struct {
	// Name is what messages call it.
	Name string
	// Vars are the environment variables that locate it; all must be set.
	Vars []string
	// Required is the variable that, set to 1, makes its absence a failure.
	Required string
	// Install says how to get it.
	Install string
	// Pending is the variable that, when Vars are unset, may name a file that an install still
	// under way writes when it ends: Vars as NAME=value lines, or nothing when it failed.
	// scripts/test starts the tests while Jaeger builds; its tests wait for the file.
	Pending string
}

// pendingWait bounds the wait for a pending install: Jaeger's build from nothing took under 10
// minutes on 2 busy cores.
var pendingWait = 20 * time.Minute

// The backends scripts/backends installs.
var (
	Llama = Backend{
		Name: "llama-server", Vars: []string{"TOOLMESH_LLAMA_SERVER"},
		Required: "TOOLMESH_LLAMA_REQUIRED", Install: `eval "$(scripts/llamaserver)"`,
	}
	Jaeger = Backend{
		Name: "Jaeger v2", Vars: []string{"TOOLMESH_JAEGER"},
		Required: "TOOLMESH_JAEGER_REQUIRED", Install: `eval "$(scripts/jaeger)" (a few minutes the first time, cached after)`,
		Pending: "TOOLMESH_JAEGER_PENDING",
	}
	Chromium = Backend{
		Name: "Chromium", Vars: []string{"TOOLMESH_CHROMIUM"},
		Required: "TOOLMESH_CHROMIUM_REQUIRED", Install: `eval "$(scripts/chromium)"`,
	}
	Everything = Backend{
		Name: "Node 22 with @modelcontextprotocol/server-everything", Vars: []string{"TOOLMESH_NODE", "TOOLMESH_EVERYTHING"},
		Required: "TOOLMESH_NODE_REQUIRED", Install: `eval "$(scripts/testdeps)"`,
	}
	MCPSDK = Backend{
		Name: "Node 22 with the MCP TypeScript SDK", Vars: []string{"TOOLMESH_NODE", "TOOLMESH_MCP_SDK"},
		Required: "TOOLMESH_NODE_REQUIRED", Install: `eval "$(scripts/testdeps)"`,
	}
	OpenAISDK = Backend{
		Name: "Node 22 with the openai npm SDK", Vars: []string{"TOOLMESH_NODE", "TOOLMESH_OPENAI_SDK"},
		Required: "TOOLMESH_NODE_REQUIRED", Install: `eval "$(scripts/testdeps)"`,
	}
	Conformance = Backend{
		Name: "Node 22 with the MCP conformance suite", Vars: []string{"TOOLMESH_NODE", "TOOLMESH_CONFORMANCE"},
		Required: "TOOLMESH_NODE_REQUIRED", Install: `eval "$(scripts/testdeps)"`,
	}
)

// Lookup returns the values of b.Vars, in order, and whether all are set: in the environment,
// or else in the file of a pending install that has ended.
func (b Backend) Lookup() ([]string, bool) {
	pending := b.pending()
	vals := make([]string, len(b.Vars))
	for i, v := range b.Vars {
		vals[i] = os.Getenv(v)
		if vals[i] == "" {
			vals[i] = pending[v]
		}
		if vals[i] == "" {
			return nil, false
		}
	}
	return vals, true
}

// pending reads the NAME=value lines of b's pending install, nil while there is none or it
// has not ended.
func (b Backend) pending() map[string]string {
	path := b.pendingFile()
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	vars := map[string]string{}
	for line := range strings.Lines(string(data)) {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			vars[name] = value
		}
	}
	return vars
}

func (b Backend) pendingFile() string {
	if b.Pending == "" {
		return ""
	}
	return os.Getenv(b.Pending)
}

// awaitPending waits, logging why, while b's install is under way beside the test.
func (b Backend) awaitPending(t testing.TB) {
	t.Helper()
	path := b.pendingFile()
	if path == "" {
		return
	}
	if _, err := os.Stat(path); err == nil {
		return
	}
	t.Logf("waiting for %s: still installing beside the tests (%s, until %s appears)", b.Name, b.Pending, path)
	start := time.Now()
	for time.Since(start) < pendingWait {
		time.Sleep(250 * time.Millisecond)
		if _, err := os.Stat(path); err == nil {
			t.Logf("%s installed after a %s wait", b.Name, time.Since(start).Round(time.Second))
			return
		}
	}
	t.Fatalf("%s: its install did not end within %s (%s never appeared)", b.Name, pendingWait, path)
}

// IsRequired reports whether the run declared b required.
func (b Backend) IsRequired() bool { return os.Getenv(b.Required) == "1" }

// Missing says why b cannot be used, for a skip or a failure.
func (b Backend) Missing() string {
	var unset []string
	for _, v := range b.Vars {
		if os.Getenv(v) == "" {
			unset = append(unset, v)
		}
	}
	msg := fmt.Sprintf("%s is not installed (%s not set): run %s, as make test does", b.Name, strings.Join(unset, ", "), b.Install)
	if b.IsRequired() {
		msg += "; " + b.Required + "=1 makes this a failure"
	}
	return msg
}

// Need returns the values of b.Vars when b is installed. Otherwise it skips the test, or
// fails it when b is required.
func (b Backend) Need(t testing.TB) []string {
	t.Helper()
	vals, ok := b.Lookup()
	if ok {
		return vals
	}
	b.awaitPending(t)
	if vals, ok := b.Lookup(); ok {
		return vals
	}
	if b.IsRequired() {
		t.Fatal(b.Missing())
	}
	t.Skip(b.Missing())
	return nil
}
