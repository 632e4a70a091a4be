package policy

import (
	"fmt"
	"strings"
)

// Prompts and resources are decided as tools are, at the grain MCP gives them: the server's
// rules name prompts and resource URIs (allowedPrompts, excludedPrompts, allowedResources,
// excludedResources), and a token's scope reaches a server's prompts and resources only when it
// covers the server whole ("SERVER", "SERVER.*" or "*"): a scope of single tools says nothing
// about the rest of the server, and a resource can hold more than any one tool shows. Listing
// takes the list scope, getting a prompt or reading a resource the call scope.

// Extra actions and rules of prompts and resources.
const (
	GetPrompt    Action = "get prompt"
	ReadResource Action = "read resource"

	RuleAllowedPrompts    Rule = "allowedPrompts"
	RuleExcludedPrompts   Rule = "excludedPrompts"
	RuleAllowedResources  Rule = "allowedResources"
	RuleExcludedResources Rule = "excludedResources"
)

// nameRules are a server's allow and exclude globs over one kind of name.
type nameRules struct{ allowed, excluded globs }

// PromptExists decides whether server's rules let its prompt name exist: a prompt they leave
// out is never listed or got. The denial names the rule (for the operator: callers are told
// NOT_FOUND, as for a prompt the server does not have).
func (p *Policy) PromptExists(server, name string) *Denial {
	return p.nameRule(server, name, GetPrompt)
}

// ResourceExists decides whether server's rules let a resource URI (or a template's URI
// template) exist.
func (p *Policy) ResourceExists(server, uri string) *Denial {
	return p.nameRule(server, uri, ReadResource)
}

func (p *Policy) nameRule(server, name string, a Action) *Denial {
	if p == nil {
		return nil
	}
	r := p.rulesOf(server)
	if r == nil {
		return nil
	}
	rules, allowKey, exclKey := r.prompts, RuleAllowedPrompts, RuleExcludedPrompts
	if a == ReadResource {
		rules, allowKey, exclKey = r.resources, RuleAllowedResources, RuleExcludedResources
	}
	what := server + " " + name
	if pat, ok := rules.excluded.find(name); ok {
		return &Denial{Action: a, Tool: what, Rule: exclKey, Reason: fmt.Sprintf("mcpServers.%s.%s has %q", server, exclKey, pat)}
	}
	if len(rules.allowed) > 0 {
		if _, ok := rules.allowed.find(name); !ok {
			return &Denial{Action: a, Tool: what, Rule: allowKey, Reason: fmt.Sprintf("no pattern of mcpServers.%s.%s matches it", server, allowKey)}
		}
	}
	return nil
}

// ServerContext decides whether c may see (a is List) or get and read (a is Call) server's
// prompts and resources: the request's servers, then c's scope, which must cover the server
// whole.
func (p *Policy) ServerContext(c Caller, a Action, server string) *Denial {
	if p == nil {
		p = empty
	}
	what := server + " prompts and resources"
	if d := bound(c, a, server, what); d != nil {
		return d
	}
	sc, d := p.scopeOf(c, a, what)
	if d != nil || sc == nil {
		return d
	}
	set, where := sc.of(a)
	if set.coversServer(server) {
		return nil
	}
	return &Denial{Action: a, Tool: what, Rule: RuleScope,
		Reason: fmt.Sprintf("%s's %s does not cover the server whole (%s, %s.* or *); it has %s", who(c), where, server, server, patternsOf(set))}
}

// ContextServers returns the servers of names whose prompts and resources c may act on with a.
func (p *Policy) ContextServers(c Caller, a Action, names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if p.ServerContext(c, a, n) == nil {
			out = append(out, n)
		}
	}
	return out
}

// coversServer reports whether the set holds every tool of server.
func (s *idSet) coversServer(server string) bool {
	if s.all || s.servers[server] {
		return true
	}
	for _, g := range s.other {
		if g.tool.kind == globAny && g.server.match(server) {
			return true
		}
	}
	return false
}

// patternsOf lists the first few patterns of set, for messages.
func patternsOf(set *idSet) string {
	const show = 5
	ps := set.patterns
	switch {
	case len(ps) == 0:
		return "none"
	case len(ps) > show:
		return strings.Join(ps[:show], ", ") + fmt.Sprintf(" and %d more", len(ps)-show)
	}
	return strings.Join(ps, ", ")
}
