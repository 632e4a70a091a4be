package modelfetch

import "testing"

// SetRegistry replaces the known models for the rest of the test, so that a test can pin a
// model's SHA-256 and size in the registry as a maintainer would.
func SetRegistry(t testing.TB, known []Known) {
	old := registry
	registry = known
	t.Cleanup(func() { registry = old })
}
