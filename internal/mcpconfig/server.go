// Package mcpconfig reads the MCP server declarations operators already have:
// a Claude-Desktop-style "mcpServers" map or VS Code's "servers" map, as JSON or inline YAML.
package mcpconfig

import "time"

// Transport is how the executor talks to one MCP server.
type Transport string

const (
	TransportSSE            Transport = "sse"
	TransportStreamableHTTP Transport = "streamable-http"
	TransportStdio          Transport = "stdio"
)

// Server is one configured MCP server, with ${ENV} references already expanded.
type Server struct {
	// Name is the map key; it must match [a-z0-9_-]+ because tool ids are SERVER.TOOL.
	Name      string
	Transport Transport

	// URL and Headers apply to sse and streamable-http.
	URL     string
	Headers map[string]string

	// Command, Args and Env apply to stdio; Env is added to a minimal environment.
	Command string
	Args    []string
	Env     map[string]string

	// Timeout bounds one tools/call; zero means the executor's default.
	Timeout time.Duration
	// MaxConcurrency bounds in-flight calls to this server; zero means the executor's default.
	MaxConcurrency int
	// ProtocolVersion pins the MCP protocol version to negotiate; empty means the newest.
	ProtocolVersion string
}
