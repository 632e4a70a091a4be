// Package mcpservers lists the MCP servers toolmesh ships, by name, for
// `toolmesh mcp NAME` and `toolmesh up`.
package mcpservers

import (
	"maps"
	"slices"

	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/mcpservers/calculator"
	"github.com/toolmesh/toolmesh/mcpservers/converter"
)

var shipped = map[string]func() *server.MCPServer{
	calculator.Name: calculator.New,
	converter.Name:  converter.New,
}

// Lookup returns the constructor of the shipped MCP server called name.
// Each call of the constructor returns a new, independent server.
func Lookup(name string) (func() *server.MCPServer, bool) {
	newServer, ok := shipped[name]
	return newServer, ok
}

// Names returns the names of the shipped MCP servers, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(shipped))
}
