package policy

import (
	"maps"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/internal/toolid"
)

// glob is one compiled pattern: '*' matches any run of characters (none included), '?' exactly
// one, everything else itself. Tool names are ASCII by the MCP spec's naming guidance, so a
// character is a byte. There is no escape: MCP tool names cannot hold '*' or '?'.
type glob struct {
	pat  string
	kind globKind
	lit  string // the literal for globExact, the prefix for globPrefix
}

type globKind uint8

const (
	globExact  globKind = iota // no wildcard
	globAny                    // "*"
	globPrefix                 // "lit*"
	globOther                  // anything else
)

func compileGlob(p string) glob {
	g := glob{pat: p}
	switch i := strings.IndexAny(p, "*?"); {
	case i < 0:
		g.kind, g.lit = globExact, p
	case p == "*":
		g.kind = globAny
	case i == len(p)-1 && p[i] == '*':
		g.kind, g.lit = globPrefix, p[:i]
	default:
		g.kind = globOther
	}
	return g
}

func (g glob) match(s string) bool {
	switch g.kind {
	case globExact:
		return s == g.lit
	case globAny:
		return true
	case globPrefix:
		return strings.HasPrefix(s, g.lit)
	}
	return wildcard(g.pat, s)
}

// wildcard matches s against p in O(len(p)·len(s)) at worst and without allocating: on a
// mismatch it moves the last '*' on by one character, which is all backtracking a pattern of
// only '*' and '?' needs.
func wildcard(p, s string) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// globs is a list of patterns over one string, as configured.
type globs []glob

func compileGlobs(ps []string) globs {
	out := make(globs, len(ps))
	for i, p := range ps {
		out[i] = compileGlob(p)
	}
	return out
}

// find returns the first pattern that matches s, or "" and false.
func (gs globs) find(s string) (string, bool) {
	for _, g := range gs {
		if g.match(s) {
			return g.pat, true
		}
	}
	return "", false
}

// idSet is a compiled scope list: patterns over tool ids. A pattern "SERVER.TOOL" matches its
// server part against the server and its tool part against the tool name, each as a glob; a
// pattern without a dot is a server's pattern and stands for all its tools ("calculator" is
// "calculator.*"; "*" is every tool). The common shapes are looked up in maps, so a decision
// stays fast with many rules; only patterns with wildcards elsewhere are tried one by one.
type idSet struct {
	patterns []string // as configured, for messages
	all      bool
	servers  map[string]bool // patterns "SERVER" and "SERVER.*"
	ids      map[string]bool // patterns without a wildcard
	other    []idGlob
}

type idGlob struct{ server, tool glob }

func compileIDSet(ps []string) *idSet {
	s := &idSet{patterns: ps, servers: map[string]bool{}, ids: map[string]bool{}}
	for _, p := range ps {
		server, tool, ok := strings.Cut(p, ".")
		if !ok {
			tool = "*"
		}
		sg, tg := compileGlob(server), compileGlob(tool)
		switch {
		case sg.kind == globAny && tg.kind == globAny:
			s.all = true
		case sg.kind == globExact && tg.kind == globAny:
			s.servers[server] = true
		case sg.kind == globExact && tg.kind == globExact:
			s.ids[p] = true
		default:
			s.other = append(s.other, idGlob{server: sg, tool: tg})
		}
	}
	return s
}

// has reports whether the tool name of server, whose id is id, matches a pattern.
func (s *idSet) has(server, name, id string) bool {
	if s.all || s.servers[server] || s.ids[id] {
		return true
	}
	for _, g := range s.other {
		if g.server.match(server) && g.tool.match(name) {
			return true
		}
	}
	return false
}

// hasServer reports whether a pattern may match some tool of server.
func (s *idSet) hasServer(server string) bool {
	if s.all || s.servers[server] {
		return true
	}
	for id := range s.ids {
		if toolid.Server(id) == server {
			return true
		}
	}
	for _, g := range s.other {
		if g.server.match(server) {
			return true
		}
	}
	return false
}

// serverNames returns the servers the set names and true, or false when a pattern's server
// part has a wildcard (then any server may match).
func (s *idSet) serverNames() ([]string, bool) {
	if s.all {
		return nil, false
	}
	seen := map[string]bool{}
	for srv := range s.servers {
		seen[srv] = true
	}
	for id := range s.ids {
		seen[toolid.Server(id)] = true
	}
	for _, g := range s.other {
		if g.server.kind != globExact {
			return nil, false
		}
		seen[g.server.lit] = true
	}
	return slices.Sorted(maps.Keys(seen)), true
}

func (s *idSet) empty() bool { return len(s.patterns) == 0 }
