package mcpservers

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/mcpservers/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRegistry(t *testing.T) {
	if got, want := Names(), []string{"calculator", "converter", "sqlite"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	for _, name := range Names() {
		newServer, ok := Lookup(name)
		if !ok {
			t.Errorf("Lookup(%q) not found", name)
			continue
		}
		s, err := newServer(Options{})
		if err != nil {
			t.Errorf("Lookup(%q)(Options{}) error = %v", name, err)
			continue
		}
		if s.MCP == nil || len(s.MCP.ListTools()) == 0 {
			t.Errorf("Lookup(%q)() returned a server without tools", name)
		}
		s2, err := newServer(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if s2.MCP == s.MCP {
			t.Errorf("Lookup(%q)() returned the same server twice, want a new one per call", name)
		}
		for _, srv := range []*Server{s, s2, s} { // a second Close is fine too
			if err := srv.Close(); err != nil {
				t.Errorf("%s Close: %v", name, err)
			}
		}
	}
	if _, ok := Lookup("nope"); ok {
		t.Errorf("Lookup(%q) found, want not found", "nope")
	}
}

func TestRegistryDBPath(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "company.db")
	if err := sqlite.WriteDemo(db); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr string
	}{
		{"sqlite", db, ""},
		{"sqlite", filepath.Join(dir, "missing.db"), "does not exist"},
		{"calculator", db, "takes no database file"},
		{"converter", db, "takes no database file"},
	}
	for _, tt := range tests {
		newServer, _ := Lookup(tt.name)
		s, err := newServer(Options{DBPath: tt.path})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s with DBPath %s: error = %v, want one containing %q", tt.name, tt.path, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s with DBPath %s: %v", tt.name, tt.path, err)
			continue
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("the user's database after Close: %v, want it kept", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !os.IsNotExist(err) {
		t.Errorf("missing.db after a failed open: %v, want it not created", err)
	}
}
