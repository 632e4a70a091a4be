package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Config is everything the policy decides by. Tokens and Default come from the `policy:` key
// of toolmesh's YAML config (ParseYAML); Servers from the mcpServers declarations (RulesOf).
// The tokens themselves stay in the tokens file or the environment: scopes name them by their
// NAME, never by the secret.
type Config struct {
	// Tokens maps a token's name to what it may do.
	Tokens map[string]Scope
	// Default is the scope of a caller whose token has no entry in Tokens, and of every caller
	// when API tokens are off. Nil: such a caller may do nothing once any scope is configured.
	Default *Scope
	// Servers holds each MCP server's rules by server name.
	Servers map[string]ServerRules
	// Pending, when set, says the servers' rules are still to come (SetServers), and why: the
	// api has them from the executor. Until they come, every decision about a tool is refused
	// as unavailable (RuleServerRules) with Pending as the reason, rather than taken without
	// rules that might refuse it.
	Pending string
}

// Scoped reports whether any scope is configured. Without one every caller may list, search
// and call every tool and ask questions; the server rules and a request's servers still apply.
func (c Config) Scoped() bool { return c.Default != nil || len(c.Tokens) > 0 }

// Scope is what one caller may do. Each list holds tool-id patterns: "SERVER.TOOL" with '*'
// and '?' wildcards in either part, or a bare "SERVER" for all its tools; "*" is every tool.
type Scope struct {
	// Call: the tools the caller may call, directly or through the model.
	Call []string
	// List and Search: the tools it may see in GET /v1/tools and in search results. Nil means
	// the same as Call (what one may call, one may find); an empty list means none.
	List, Search []string
	// Query: whether it may ask questions (a query the model answers). A direct
	// @SERVER.TOOL(...) query needs only Call.
	Query bool
}

// ServerRules are one MCP server's rules from its mcpServers entry.
type ServerRules struct {
	// AllowedTools: when not empty, only tools whose names match one of these globs exist.
	AllowedTools []string
	// ExcludedTools: tools whose names match one of these globs do not exist. They win over
	// AllowedTools.
	ExcludedTools []string
	// AllowDestructive lets the model be offered this server's tools that may be destructive.
	AllowDestructive bool
	// RateLimit bounds the calls each caller (API token) makes of each of the server's tools;
	// ToolRateLimits, by tool name, win over it. Nil: no limit.
	RateLimit      *mcpconfig.RateLimit
	ToolRateLimits map[string]*mcpconfig.RateLimit
	// AllowedPrompts and ExcludedPrompts are AllowedTools and ExcludedTools for the server's
	// prompts (globs over prompt names); AllowedResources and ExcludedResources for its
	// resources (globs over resource URIs, and over the URI templates of its templates).
	AllowedPrompts, ExcludedPrompts     []string
	AllowedResources, ExcludedResources []string
}

// RulesOf takes the rules out of the mcpServers declarations (and nothing else: no URL, header
// or env value travels with them).
func RulesOf(servers map[string]mcpconfig.Server) map[string]ServerRules {
	out := make(map[string]ServerRules, len(servers))
	for name, s := range servers {
		r := ServerRules{AllowedTools: s.AllowedTools, ExcludedTools: s.ExcludedTools, AllowDestructive: s.AllowDestructive, RateLimit: s.RateLimit,
			AllowedPrompts: s.AllowedPrompts, ExcludedPrompts: s.ExcludedPrompts, AllowedResources: s.AllowedResources, ExcludedResources: s.ExcludedResources}
		for tool, ts := range s.Tools {
			if ts.RateLimit != nil {
				if r.ToolRateLimits == nil {
					r.ToolRateLimits = map[string]*mcpconfig.RateLimit{}
				}
				r.ToolRateLimits[tool] = ts.RateLimit
			}
		}
		out[name] = r
	}
	return out
}

// ParseYAML reads the value of the `policy:` key as yaml.v3 decodes it:
//
//	policy:
//	  default: {call: [calculator, converter], query: true}
//	  tokens:
//	    ci-bot: {call: ["calculator.*"]}
//	    ops:    {call: ["*"], query: true}
//
// Errors name the key (policy.tokens.ci-bot.call[1]) and say what is wrong.
func ParseYAML(raw any) (Config, error) {
	var c Config
	top, ok := raw.(map[string]any)
	if !ok {
		return c, fmt.Errorf("policy: want a map with keys default and tokens, not %s", mcpconfig.TypeName(raw))
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(top)) {
		switch k {
		case "default":
			s, err := parseScope("policy.default", top[k])
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.Default = &s
		case "tokens":
			m, ok := top[k].(map[string]any)
			if !ok {
				errs = append(errs, fmt.Errorf("policy.tokens: want a map of token name to scope, not %s", mcpconfig.TypeName(top[k])))
				continue
			}
			c.Tokens = make(map[string]Scope, len(m))
			for _, name := range slices.Sorted(maps.Keys(m)) {
				where := "policy.tokens." + name
				if !validTokenName(name) {
					errs = append(errs, fmt.Errorf("%s: a token name is 1 to 64 letters, digits, '.', '_' or '-' (the NAME of NAME:TOKEN in the tokens file)", where))
					continue
				}
				s, err := parseScope(where, m[name])
				if err != nil {
					errs = append(errs, err)
					continue
				}
				c.Tokens[name] = s
			}
		default:
			errs = append(errs, fmt.Errorf("policy.%s: unknown key; want default or tokens", k))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

func parseScope(where string, raw any) (Scope, error) {
	var s Scope
	m, ok := raw.(map[string]any)
	if !ok {
		return s, fmt.Errorf("%s: want a map with keys call, list, search and query, not %s", where, mcpconfig.TypeName(raw))
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		field := where + "." + k
		switch k {
		case "call", "list", "search":
			ps, err := parsePatterns(field, m[k])
			if err != nil {
				errs = append(errs, err)
				continue
			}
			switch k {
			case "call":
				s.Call = ps
			case "list":
				s.List = ps
			default:
				s.Search = ps
			}
		case "query":
			b, ok := m[k].(bool)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: want true or false, not %s", field, mcpconfig.TypeName(m[k])))
				continue
			}
			s.Query = b
		default:
			errs = append(errs, fmt.Errorf("%s: unknown key; want call, list, search or query", field))
		}
	}
	return s, errors.Join(errs...)
}

// parsePatterns reads a list of tool-id patterns; a single string is a list of one. An explicit
// empty list stays empty (not nil), so "list: []" means "nothing" rather than "as call".
func parsePatterns(field string, raw any) ([]string, error) {
	var items []any
	switch v := raw.(type) {
	case string:
		items = []any{v}
	case []any:
		items = v
	case nil:
		return []string{}, nil
	default:
		return nil, fmt.Errorf("%s: want a list of tool patterns like [\"calculator\", \"sqlite.list_*\"], not %s", field, mcpconfig.TypeName(raw))
	}
	out := make([]string, 0, len(items))
	var errs []error
	for i, it := range items {
		p, ok := it.(string)
		if !ok {
			errs = append(errs, fmt.Errorf("%s[%d]: want a string, not %s", field, i, mcpconfig.TypeName(it)))
			continue
		}
		if msg := checkIDPattern(p); msg != "" {
			errs = append(errs, fmt.Errorf("%s[%d]: %q %s", field, i, p, msg))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// checkIDPattern says what is wrong with a tool-id pattern, or "".
func checkIDPattern(p string) string {
	server, tool, dotted := strings.Cut(p, ".")
	switch {
	case p == "":
		return "is empty"
	case server == "":
		return "has no server part: write SERVER.TOOL, SERVER, or * for every tool"
	case dotted && tool == "":
		return "has no tool part after the dot: write SERVER.* for all of a server's tools"
	}
	for i := 0; i < len(server); i++ {
		c := server[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '*' || c == '?') {
			return "has a server part that is not a server name (" + toolid.ServerRule + ", with * and ? as wildcards)"
		}
	}
	if msg := checkToolPattern(tool); dotted && msg != "" {
		return msg
	}
	return ""
}

// checkToolPattern says what is wrong with a pattern over tool names, or "".
func checkToolPattern(p string) string {
	if p == "" {
		return "is empty"
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] == 0x7f {
			return "has a space or control character, which no tool name holds"
		}
	}
	return ""
}

func validTokenName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
