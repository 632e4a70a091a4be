package mcpservers

import (
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRegistry(t *testing.T) {
	if got, want := Names(), []string{"calculator", "converter"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	for _, name := range Names() {
		newServer, ok := Lookup(name)
		if !ok {
			t.Errorf("Lookup(%q) not found", name)
			continue
		}
		s := newServer()
		if s == nil || len(s.ListTools()) == 0 {
			t.Errorf("Lookup(%q)() returned a server without tools", name)
		}
		if s2 := newServer(); s2 == s {
			t.Errorf("Lookup(%q)() returned the same server twice, want a new one per call", name)
		}
	}
	if _, ok := Lookup("nope"); ok {
		t.Errorf("Lookup(%q) found, want not found", "nope")
	}
}
