// Package toolid is the one vocabulary every hop shares for naming tools: a tool's id is
// SERVER.TOOL, where the server name matches [a-z0-9_-]+ (so it holds no dot) and the first dot
// splits the two. Its subpackage toolname maps ids to the names model APIs and MCP clients
// accept. (How many tools a search returns and how long its text may be are
// internal/searchbounds'.)
package toolid

import "strings"

// ServerRule is the server-name rule as error messages state it.
const ServerRule = "[a-z0-9_-]+"

// ValidServer reports whether name is a valid server name.
func ValidServer(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Join is the id of tool on server.
func Join(server, tool string) string { return server + "." + tool }

// Split splits id at its first dot. ok is false when id has no dot, an invalid server name or
// an empty tool name.
func Split(id string) (server, tool string, ok bool) {
	server, tool, found := strings.Cut(id, ".")
	if !found || !ValidServer(server) || tool == "" {
		return server, tool, false
	}
	return server, tool, true
}

// Server is the server part of id (everything before the first dot).
func Server(id string) string {
	server, _, _ := strings.Cut(id, ".")
	return server
}
