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
}

// The backends scripts/backends installs.
var (
	Llama = Backend{
		Name: "llama-server", Vars: []string{"TOOLMESH_LLAMA_SERVER"},
		Required: "TOOLMESH_LLAMA_REQUIRED", Install: `eval "$(scripts/llamaserver)"`,
	}
	Jaeger = Backend{
		Name: "Jaeger v2", Vars: []string{"TOOLMESH_JAEGER"},
		Required: "TOOLMESH_JAEGER_REQUIRED", Install: `eval "$(scripts/jaeger)" (a few minutes the first time, cached after)`,
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

// Lookup returns the values of b.Vars, in order, and whether all are set.
func (b Backend) Lookup() ([]string, bool) {
	vals := make([]string, len(b.Vars))
	for i, v := range b.Vars {
		vals[i] = os.Getenv(v)
		if vals[i] == "" {
			return nil, false
		}
	}
	return vals, true
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
	if b.IsRequired() {
		t.Fatal(b.Missing())
	}
	t.Skip(b.Missing())
	return nil
}
