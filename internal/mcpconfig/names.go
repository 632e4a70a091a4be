package mcpconfig

import (
	"fmt"
	"strings"

	"github.com/toolmesh/toolmesh/internal/toolid"
)

// ServedName is the server name toolmesh serves a configured server under, given the name its
// mcpServers entry has. Claude Desktop, Cursor and VS Code take any JSON string as a name
// ("GitHub", "Azure MCP Server", "microsoft.docs.mcp", "io.github.user/weather"), while a tool id
// is SERVER.TOOL with SERVER matching [a-z0-9_-]+ (the first dot splits it). One rule maps the
// first onto the second, so the same file gives the same ids everywhere (the executor, the
// api's policy, the index, the MCP face):
//
//   - a name that already matches [a-z0-9_-]+ is kept as it is;
//   - otherwise letters A-Z are lower-cased, each run of other characters (spaces, dots,
//     slashes, '@', letters outside A-Z) becomes one "-", and such a run at either end is
//     dropped.
//
// "" means nothing is left (a name of only such characters): the entry is refused.
func ServedName(name string) string {
	if toolid.ValidServer(name) {
		return name
	}
	var b strings.Builder
	other := false // a run of other characters is pending
	for _, r := range name {
		switch {
		case 'A' <= r && r <= 'Z':
			r += 'a' - 'A'
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '_', r == '-':
		default:
			other = true
			continue
		}
		if other && b.Len() > 0 {
			b.WriteByte('-')
		}
		other = false
		b.WriteRune(r)
	}
	return b.String()
}

// servedNote is the warning a server given a name ServedName changes carries; the executor
// logs it once, when it starts the server's session.
func servedNote(configName, name string) string {
	return fmt.Sprintf("%q is served as %q: tool ids are SERVER.TOOL with SERVER of lower-case letters, digits, '_' and '-'; "+
		"use %q in policy scopes, requests and tool ids", configName, name, name)
}

// servedNames maps each served name to the name it was given, to refuse two entries served
// under one name.
type servedNames map[string]string

// add records s's name, or returns the clash with an entry added before.
func (n servedNames) add(s Server) error {
	given := s.NameInConfig()
	if first, ok := n[s.Name]; ok {
		return fmt.Errorf("mcp servers %q and %q are both served as %q (names are lower-cased and other characters "+
			"than a-z, 0-9, '_' and '-' become '-'): rename one of them", first, given, s.Name)
	}
	n[s.Name] = given
	return nil
}

// NameInConfig is the server's name as its config gives it: ConfigName, else Name.
func (s Server) NameInConfig() string {
	if s.ConfigName != "" {
		return s.ConfigName
	}
	return s.Name
}
