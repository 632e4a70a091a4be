// Package mcpservers lists the MCP servers toolmesh ships, by name, for
// `toolmesh mcp NAME` and `toolmesh up`.
package mcpservers

import (
	"fmt"
	"maps"
	"slices"

	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/mcpservers/calculator"
	"github.com/toolmesh/toolmesh/mcpservers/converter"
	"github.com/toolmesh/toolmesh/mcpservers/sqlite"
)

// Options configure a shipped server. The zero value suits every server.
type Options struct {
	// DBPath is the SQLite database file the sqlite server serves
	// read-only; empty means its demo database, written to a temporary
	// directory that Close removes. The other servers refuse it.
	DBPath string
}

// Server is one instance of a shipped MCP server.
type Server struct {
	MCP   *server.MCPServer
	close func() error
}

// Close releases what the server holds (the sqlite server's database and
// demo file). It is safe to call more than once.
func (s *Server) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}

// Constructor makes a new, independent instance of a shipped server.
type Constructor func(Options) (*Server, error)

var shipped = map[string]Constructor{
	calculator.Name: withoutOptions(calculator.Name, calculator.New),
	converter.Name:  withoutOptions(converter.Name, converter.New),
	sqlite.Name:     newSQLite,
}

// withoutOptions adapts the constructor of a server that holds nothing and
// takes no options.
func withoutOptions(name string, newServer func() *server.MCPServer) Constructor {
	return func(opts Options) (*Server, error) {
		if opts.DBPath != "" {
			return nil, fmt.Errorf("mcp server %s takes no database file (only %s does)", name, sqlite.Name)
		}
		return &Server{MCP: newServer()}, nil
	}
}

func newSQLite(opts Options) (*Server, error) {
	var s *sqlite.Server
	var err error
	if opts.DBPath == "" {
		s, err = sqlite.OpenDemo(sqlite.Options{})
	} else {
		s, err = sqlite.New(opts.DBPath, sqlite.Options{})
	}
	if err != nil {
		return nil, err
	}
	return &Server{MCP: s.MCP(), close: s.Close}, nil
}

// Lookup returns the constructor of the shipped MCP server called name.
func Lookup(name string) (Constructor, bool) {
	newServer, ok := shipped[name]
	return newServer, ok
}

// Names returns the names of the shipped MCP servers, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(shipped))
}
