package policy

import (
	"math"

	"google.golang.org/protobuf/types/known/durationpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// The executor owns the servers' rules (its mcpServers config) and publishes them with its
// catalog (ListServers, WatchTools); the api's policy decides by what it publishes. These turn
// ServerRules into their published form and back, field for field.

// RulesProto is r as the executor publishes it.
func RulesProto(r ServerRules) *toolmeshv1.ServerRules {
	out := &toolmeshv1.ServerRules{
		AllowedTools: r.AllowedTools, ExcludedTools: r.ExcludedTools, AllowDestructive: r.AllowDestructive,
		RateLimit:      rateProto(r.RateLimit),
		AllowedPrompts: r.AllowedPrompts, ExcludedPrompts: r.ExcludedPrompts,
		AllowedResources: r.AllowedResources, ExcludedResources: r.ExcludedResources,
	}
	for tool, l := range r.ToolRateLimits {
		if l == nil {
			continue
		}
		if out.ToolRateLimits == nil {
			out.ToolRateLimits = make(map[string]*toolmeshv1.RateLimit, len(r.ToolRateLimits))
		}
		out.ToolRateLimits[tool] = rateProto(l)
	}
	return out
}

// RulesSetProto is every server's rules as WatchTools carries them.
func RulesSetProto(rules map[string]ServerRules) *toolmeshv1.ServerRulesSet {
	out := &toolmeshv1.ServerRulesSet{Servers: make(map[string]*toolmeshv1.ServerRules, len(rules))}
	for name, r := range rules {
		out.Servers[name] = RulesProto(r)
	}
	return out
}

// RulesFromProto is the published rules m as ServerRules. It checks nothing: SetServers refuses
// what New would (a rate limit of no calls, a pattern no name can match).
func RulesFromProto(m *toolmeshv1.ServerRules) ServerRules {
	r := ServerRules{
		AllowedTools: m.GetAllowedTools(), ExcludedTools: m.GetExcludedTools(), AllowDestructive: m.GetAllowDestructive(),
		RateLimit:      rateFromProto(m.GetRateLimit()),
		AllowedPrompts: m.GetAllowedPrompts(), ExcludedPrompts: m.GetExcludedPrompts(),
		AllowedResources: m.GetAllowedResources(), ExcludedResources: m.GetExcludedResources(),
	}
	for tool, l := range m.GetToolRateLimits() {
		if r.ToolRateLimits == nil {
			r.ToolRateLimits = make(map[string]*mcpconfig.RateLimit, len(m.GetToolRateLimits()))
		}
		r.ToolRateLimits[tool] = rateFromProto(l)
	}
	return r
}

// RulesSetFromProto is the published rules of every server.
func RulesSetFromProto(m *toolmeshv1.ServerRulesSet) map[string]ServerRules {
	out := make(map[string]ServerRules, len(m.GetServers()))
	for name, r := range m.GetServers() {
		out[name] = RulesFromProto(r)
	}
	return out
}

func rateProto(l *mcpconfig.RateLimit) *toolmeshv1.RateLimit {
	if l == nil {
		return nil
	}
	return &toolmeshv1.RateLimit{Calls: uint32(min(max(l.Calls, 0), math.MaxUint32)), Per: durationpb.New(l.Per)}
}

func rateFromProto(l *toolmeshv1.RateLimit) *mcpconfig.RateLimit {
	if l == nil {
		return nil
	}
	return &mcpconfig.RateLimit{Calls: int(min(l.GetCalls(), math.MaxInt32)), Per: l.GetPer().AsDuration()}
}
