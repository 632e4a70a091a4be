package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/internal/buildinfo"
)

// buildInfo is what `toolmesh version` reports.
type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	// Modified says the binary was built from a tree with uncommitted changes.
	Modified  bool     `json:"modified,omitempty"`
	GoVersion string   `json:"go_version"`
	Platform  string   `json:"platform"`
	API       string   `json:"api"`
	MCP       []string `json:"mcp_protocol_versions"`
}

func readBuildInfo() buildInfo {
	bi := buildinfo.Read()
	return buildInfo{Version: bi.Version, Commit: bi.Commit, Modified: bi.Modified, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, API: "toolmesh.v1", MCP: mcp.ValidProtocolVersions}
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr, "Usage: toolmesh version [--json]\n\nPrints the version, the commit it was built from, the Go version and the protocol versions it speaks.")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, func() error { return fs.Parse(args) }); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("toolmesh version: unexpected argument %q", fs.Arg(0))
	}
	b := readBuildInfo()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(b)
	}
	commit := b.Commit
	if commit == "" {
		commit = "unknown"
	} else if b.Modified {
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(stdout, "toolmesh %s\ncommit   %s\ngo       %s %s\napi      %s (gRPC and REST)\nmcp      %s\n",
		b.Version, commit, b.GoVersion, b.Platform, b.API, strings.Join(b.MCP, ", "))
	return nil
}
