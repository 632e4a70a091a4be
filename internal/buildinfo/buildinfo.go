// Package buildinfo is what the binary knows of its own build: the one version string that
// `toolmesh version`, the MCP endpoints' serverInfo and anything else that reports a version
// all say.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// version is set at build time (-ldflags "-X github.com/toolmesh/toolmesh/internal/buildinfo.version=v1.2.3");
// otherwise the module version is reported, or "devel" for a build from a working tree.
var version = ""

// Info is the build's version and the VCS commit it was built from.
type Info struct {
	Version string
	Commit  string // "" when the build did not record one
	// Modified says the binary was built from a tree with uncommitted changes.
	Modified bool
	// Race says the binary was built with -race.
	Race bool
}

// Devel is the version of a build without one: `go run`, `go build` in a working tree.
const Devel = "devel"

var read = sync.OnceValue(func() Info {
	b := Info{Version: version}
	if info, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			case "-race":
				b.Race = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = Devel
	}
	return b
})

// Read returns the build's Info.
func Read() Info { return read() }

// Version is the build's version: the one string every report of it uses.
func Version() string { return read().Version }
