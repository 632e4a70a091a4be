// Package policy is toolmesh's one decision point for who may do what with which tool. It
// holds three kinds of rule:
//
//   - per MCP server, from its mcpServers entry: allowedTools and excludedTools (globs over the
//     server's tool names: a tool they leave out does not exist for toolmesh: never listed,
//     indexed, offered or called) and allowDestructive (whether the model may be offered the
//     server's tools that may be destructive);
//   - per API token, from the config's `policy:` key: which tools it may list, search and call,
//     and whether it may ask questions;
//   - per request: the `servers` list of a query bounds every call the query makes, direct
//     @SERVER.TOOL(...) calls included.
//
// The api's REST and gRPC handlers and its agent loop, the executor (at discovery and on every
// call) and any later front ask the same Policy. A refusal is a *Denial: an error that is a
// gRPC PermissionDenied status (HTTP 403) naming the action, the tool and the rule; Record
// counts it in a metric and marks it on the request's span.
package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Action is what a decision is about.
type Action string

const (
	List   Action = "list"   // see a tool in a listing
	Search Action = "search" // see a tool in search results
	Call   Action = "call"   // call a tool, directly or through the model
	Query  Action = "query"  // ask a question the model answers
	Offer  Action = "offer"  // show a tool to the model
)

// Rule names the rule a denial applies; the values are a fixed set, so they are safe as
// metric labels.
type Rule string

const (
	RuleAllowedTools  Rule = "allowedTools"     // mcpServers.S.allowedTools leaves the tool out
	RuleExcludedTools Rule = "excludedTools"    // mcpServers.S.excludedTools names the tool
	RuleServers       Rule = "servers"          // the request's servers list leaves the server out
	RuleScope         Rule = "scope"            // the token's scope does not cover the tool
	RuleQuery         Rule = "query"            // the token may not ask questions
	RuleDestructive   Rule = "allowDestructive" // the tool may be destructive and its server does not opt in
	RuleOffered       Rule = "offered"          // the model called a tool it was not offered
	// RuleServerRules: the servers' rules are not known (the api has not had them from the
	// executor), so nothing that depends on them is decided: such a refusal is UNAVAILABLE, not
	// PERMISSION_DENIED (Denial.GRPCStatus).
	RuleServerRules Rule = "serverRules"
)

// Caller is who asks and within what bound.
type Caller struct {
	// Token is the name of the caller's API token (auth.Name), "" when auth is off.
	Token string
	// Servers is the request's own bound (QueryRequest.servers); empty means none.
	Servers []string
}

// Policy decides. It is safe for concurrent use, and immutable but for SetServers and Await (a
// configuration reload, the executor's rules as they come) and what callers spent of the rate
// limits (Take); a nil *Policy allows what a Policy built from an empty Config allows.
type Policy struct {
	servers atomic.Pointer[serverSet]
	scoped  bool
	tokens  map[string]*scope
	def     *scope // nil: callers without an entry may do nothing (when scoped)
	denials metric.Int64Counter
	// calls holds what each caller has spent of the tools' rate limits (ratelimit.go).
	calls callLimits
	now   func() time.Time // the clock calls reads; nil: time.Now
}

// serverSet is the per-server rules in force: rules by server name, or, while pending is set,
// none known (why), so that every decision about a tool is refused as unavailable.
type serverSet struct {
	rules   map[string]*serverRules
	pending string
}

type serverRules struct {
	allowed, excluded globs
	allowDestructive  bool
	rate              *mcpconfig.RateLimit
	toolRate          map[string]*mcpconfig.RateLimit
	prompts           nameRules // allowedPrompts, excludedPrompts (prompt names)
	resources         nameRules // allowedResources, excludedResources (URIs and URI templates)
}

type scope struct {
	where              string // "policy.tokens.NAME" or "policy.default", for messages
	call, list, search *idSet
	query              bool
}

var empty = &Policy{denials: noopCounter()}

func noopCounter() metric.Int64Counter {
	c, _ := metricnoop.Meter{}.Int64Counter("")
	return c
}

// New compiles cfg. meter may be nil; denials are then not counted.
func New(cfg Config, meter metric.Meter) (*Policy, error) {
	p := &Policy{tokens: map[string]*scope{}, scoped: cfg.Scoped()}
	var errs []string
	check := func(where string, s Scope) {
		for _, l := range []struct {
			name string
			ps   []string
		}{{"call", s.Call}, {"list", s.List}, {"search", s.Search}} {
			for i, pat := range l.ps {
				if msg := checkIDPattern(pat); msg != "" {
					errs = append(errs, fmt.Sprintf("%s.%s[%d]: %q %s", where, l.name, i, pat, msg))
				}
			}
		}
	}
	for name, s := range cfg.Tokens {
		where := "policy.tokens." + name
		if !validTokenName(name) {
			errs = append(errs, where+": not a token name (1 to 64 letters, digits, '.', '_' or '-')")
		}
		check(where, s)
		p.tokens[name] = compileScope(where, s)
	}
	if cfg.Default != nil {
		check("policy.default", *cfg.Default)
		p.def = compileScope("policy.default", *cfg.Default)
	}
	servers, serverErrs := compileServers(cfg.Servers)
	p.servers.Store(&serverSet{rules: servers, pending: cfg.Pending})
	errs = append(errs, serverErrs...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("policy: %s", strings.Join(errs, "; "))
	}
	if meter == nil {
		p.denials = noopCounter()
		return p, nil
	}
	var err error
	if p.denials, err = meter.Int64Counter("toolmesh.policy.denials",
		metric.WithDescription("Requests, calls and offers the policy refused, by action and rule.")); err != nil {
		p.denials = noopCounter()
	}
	return p, nil
}

func compileServers(rules map[string]ServerRules) (map[string]*serverRules, []string) {
	out := make(map[string]*serverRules, len(rules))
	var errs []string
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		r := rules[name]
		for _, l := range []struct {
			key string
			ps  []string
		}{{"allowedTools", r.AllowedTools}, {"excludedTools", r.ExcludedTools},
			{"allowedPrompts", r.AllowedPrompts}, {"excludedPrompts", r.ExcludedPrompts},
			{"allowedResources", r.AllowedResources}, {"excludedResources", r.ExcludedResources}} {
			for i, pat := range l.ps {
				if msg := checkToolPattern(pat); msg != "" {
					errs = append(errs, fmt.Sprintf("mcpServers.%s.%s[%d]: %q %s", name, l.key, i, pat, msg))
				}
			}
		}
		out[name] = &serverRules{allowed: compileGlobs(r.AllowedTools), excluded: compileGlobs(r.ExcludedTools), allowDestructive: r.AllowDestructive,
			rate: r.RateLimit, toolRate: r.ToolRateLimits,
			prompts:   nameRules{allowed: compileGlobs(r.AllowedPrompts), excluded: compileGlobs(r.ExcludedPrompts)},
			resources: nameRules{allowed: compileGlobs(r.AllowedResources), excluded: compileGlobs(r.ExcludedResources)}}
		errs = append(errs, checkRateLimit(fmt.Sprintf("mcpServers.%s.rateLimit", name), r.RateLimit)...)
		for _, tool := range slices.Sorted(maps.Keys(r.ToolRateLimits)) {
			errs = append(errs, checkRateLimit(fmt.Sprintf("mcpServers.%s.tools.%s.rateLimit", name, tool), r.ToolRateLimits[tool])...)
		}
	}
	return out, errs
}

// SetServers replaces the per-server rules, as a reload of the mcpServers entries does (or the
// executor's rules, as they come), and ends a wait for them (Config.Pending, Await); the token
// scopes stay. On error nothing changes.
func (p *Policy) SetServers(rules map[string]ServerRules) error {
	if p == nil {
		return errors.New("policy: no policy to change")
	}
	servers, errs := compileServers(rules)
	if len(errs) > 0 {
		return fmt.Errorf("policy: %s", strings.Join(errs, "; "))
	}
	p.servers.Store(&serverSet{rules: servers})
	return nil
}

// Await drops the per-server rules: until SetServers, every decision about a tool is refused as
// unavailable (RuleServerRules) with why as the reason. The api does so when its executor sends
// no rules (an executor older than them): deciding without them would allow what they refuse.
func (p *Policy) Await(why string) {
	if p != nil {
		p.servers.Store(&serverSet{pending: why})
	}
}

// Pending says why the per-server rules are not known, or "" when they are.
func (p *Policy) Pending() string {
	if p == nil {
		return ""
	}
	return p.serverSet().pending
}

// serverSet is the rules in force; none for a Policy not made by New.
func (p *Policy) serverSet() *serverSet {
	if s := p.servers.Load(); s != nil {
		return s
	}
	return &serverSet{}
}

// rulesOf is server's rules, or nil.
func (p *Policy) rulesOf(server string) *serverRules {
	return p.serverSet().rules[server]
}

func compileScope(where string, s Scope) *scope {
	list, search := s.List, s.Search
	if list == nil {
		list = s.Call
	}
	if search == nil {
		search = s.Call
	}
	return &scope{where: where, call: compileIDSet(s.Call), list: compileIDSet(list), search: compileIDSet(search), query: s.Query}
}

// Tokens lists the token names the scopes mention, for checking them against the tokens loaded.
func (p *Policy) Tokens() []string {
	if p == nil {
		return nil
	}
	out := make([]string, 0, len(p.tokens))
	for name := range p.tokens {
		out = append(out, name)
	}
	return out
}

// Scoped reports whether any scope is configured.
func (p *Policy) Scoped() bool { return p != nil && p.scoped }

// Exists reports whether server's rules let its tool name exist at all: the executor leaves a
// tool for which it is false out of its catalog, so it is never listed, indexed or offered.
func (p *Policy) Exists(server, name string) bool {
	return p.toolRules(Call, server, name, "") == nil
}

// Call decides whether c may call the tool id.
func (p *Policy) Call(c Caller, id string) *Denial { return p.decide(c, Call, id) }

// List decides whether c may see the tool id in a listing.
func (p *Policy) List(c Caller, id string) *Denial { return p.decide(c, List, id) }

// Search decides whether c may see the tool id in search results.
func (p *Policy) Search(c Caller, id string) *Denial { return p.decide(c, Search, id) }

// decide applies the request's servers, c's scope and then the server's rules to an action a
// (Call, List or Search) on the tool id. The server's rules come last so that a tool c may
// not reach is refused in one way (rule scope or servers, the same message) whatever lies
// behind it: were allowedTools and excludedTools asked first, a token could read from the
// refusal which tools the operator hides on a server it may not even list. A caller whose
// scope covers the tool is told the server's rule, since that is what it needs to know why
// a tool it may use is not there.
func (p *Policy) decide(c Caller, a Action, id string) *Denial {
	if p == nil {
		p = empty
	}
	server, name, _ := toolid.Split(id)
	if d := bound(c, a, server, id); d != nil {
		return d
	}
	sc, d := p.scopeOf(c, a, id)
	if d != nil {
		return d
	}
	if sc != nil {
		if set, where := sc.of(a); !set.has(server, name, id) {
			return denyScope(c, a, id, where, set)
		}
	}
	return p.toolRules(a, server, name, id)
}

// of is the scope's list for a (Call, List or Search) and its config key, for messages.
func (sc *scope) of(a Action) (*idSet, string) {
	switch a {
	case List:
		return sc.list, sc.where + ".list"
	case Search:
		return sc.search, sc.where + ".search"
	}
	return sc.call, sc.where + ".call"
}

// Offer decides whether the model may be offered t while answering c's question: c must be
// able to call it, and a tool that may be destructive (see Destructive) is offered only when
// its server's config sets allowDestructive. An app that calls such a tool directly has chosen
// to, and Call allows it.
func (p *Policy) Offer(c Caller, t *toolmeshv1.Tool) *Denial {
	if p == nil {
		p = empty
	}
	if d := p.Call(c, t.GetId()); d != nil {
		d.Action = Offer
		return d
	}
	if !Destructive(t.GetAnnotations()) {
		return nil
	}
	server := toolid.Server(t.GetId())
	if r := p.rulesOf(server); r != nil && r.allowDestructive {
		return nil
	}
	return &Denial{Action: Offer, Tool: t.GetId(), Rule: RuleDestructive,
		Reason: fmt.Sprintf("its annotations do not say readOnlyHint: true or destructiveHint: false, so it may be destructive, and mcpServers.%s does not set allowDestructive: true", server)}
}

// Ask decides whether c may ask a question.
func (p *Policy) Ask(c Caller) *Denial {
	if p == nil {
		p = empty
	}
	sc, d := p.scopeOf(c, Query, "")
	if d != nil || sc == nil {
		return d
	}
	if !sc.query {
		return &Denial{Action: Query, Rule: RuleQuery, Reason: fmt.Sprintf("%s may not ask questions (%s.query is not true)", who(c), sc.where)}
	}
	return nil
}

// MayList decides whether c may list tools at all (its list scope is not empty).
func (p *Policy) MayList(c Caller) *Denial { return p.may(c, List) }

// MaySearch decides whether c may search tools at all.
func (p *Policy) MaySearch(c Caller) *Denial { return p.may(c, Search) }

func (p *Policy) may(c Caller, a Action) *Denial {
	if p == nil {
		p = empty
	}
	sc, d := p.scopeOf(c, a, "")
	if d != nil || sc == nil {
		return d
	}
	if set, where := sc.of(a); set.empty() {
		return &Denial{Action: a, Rule: RuleScope, Reason: fmt.Sprintf("%s may %s no tools (%s is empty)", who(c), a, where)}
	}
	return nil
}

// ListsServer reports whether c may see some tool of server, and so the server itself.
func (p *Policy) ListsServer(c Caller, server string) bool {
	if p == nil {
		p = empty
	}
	sc, d := p.scopeOf(c, List, "")
	if d != nil {
		return false
	}
	return sc == nil || sc.list.hasServer(server)
}

// ListsAll reports whether c may list every tool (nothing is scoped, or c's list scope has
// "*"): what names servers c could not list otherwise (a refused reload's error) is for such
// a caller only.
func (p *Policy) ListsAll(c Caller) bool {
	if p == nil {
		p = empty
	}
	sc, d := p.scopeOf(c, List, "")
	return d == nil && (sc == nil || sc.list.all)
}

// Servers returns the servers whose tools c may act on with a (Call, List or Search) and true,
// or false when c's scope does not bound the servers (no scope, or a server pattern with a
// wildcard). A search asks only these servers, so that a narrow scope still gets k results;
// the agent loop searches the servers c may call.
func (p *Policy) Servers(c Caller, a Action) ([]string, bool) {
	if p == nil {
		p = empty
	}
	sc, d := p.scopeOf(c, a, "")
	if d != nil {
		return []string{}, true
	}
	if sc == nil {
		return nil, false
	}
	set, _ := sc.of(a)
	return set.serverNames()
}

// Within narrows a request's servers (none: all) to those c may act on with a. It returns the
// servers to ask, none meaning all, and false when no server is left.
func (p *Policy) Within(c Caller, a Action, requested []string) ([]string, bool) {
	allowed, bounded := p.Servers(c, a)
	switch {
	case !bounded:
		return requested, true
	case len(requested) == 0:
		return allowed, len(allowed) > 0
	}
	out := make([]string, 0, len(requested))
	for _, s := range requested {
		if slices.Contains(allowed, s) {
			out = append(out, s)
		}
	}
	return out, len(out) > 0
}

// Destructive reports whether a tool with these annotations may be destructive, as the MCP
// spec reads them: destructiveHint defaults to true and only means something when readOnlyHint
// is not true, so a tool is taken as safe only when it says readOnlyHint: true or
// destructiveHint: false. Annotations are the server's claims; allowedTools and excludedTools
// are the operator's answer to a server that lies.
func Destructive(a *toolmeshv1.ToolAnnotations) bool {
	if a == nil {
		return true
	}
	if a.ReadOnlyHint != nil && *a.ReadOnlyHint {
		return false
	}
	return a.DestructiveHint == nil || *a.DestructiveHint
}

// toolRules applies server's allowedTools and excludedTools to its tool name.
func (p *Policy) toolRules(a Action, server, name, id string) *Denial {
	if p == nil {
		return nil
	}
	if id == "" {
		id = toolid.Join(server, name)
	}
	set := p.serverSet()
	if set.pending != "" {
		return &Denial{Action: a, Tool: id, Rule: RuleServerRules, Reason: set.pending}
	}
	r := set.rules[server]
	if r == nil {
		return nil
	}
	if pat, ok := r.excluded.find(name); ok {
		return &Denial{Action: a, Tool: id, Rule: RuleExcludedTools, Reason: fmt.Sprintf("mcpServers.%s.excludedTools has %q", server, pat)}
	}
	if len(r.allowed) > 0 {
		if _, ok := r.allowed.find(name); !ok {
			return &Denial{Action: a, Tool: id, Rule: RuleAllowedTools, Reason: fmt.Sprintf("no pattern of mcpServers.%s.allowedTools matches it", server)}
		}
	}
	return nil
}

// bound applies the request's servers list.
func bound(c Caller, a Action, server, id string) *Denial {
	if len(c.Servers) == 0 {
		return nil
	}
	for _, s := range c.Servers {
		if s == server {
			return nil
		}
	}
	return &Denial{Action: a, Tool: id, Rule: RuleServers, Reason: "the request's servers are " + strings.Join(c.Servers, ", ")}
}

// scopeOf returns c's scope: nil and no denial when nothing is scoped.
func (p *Policy) scopeOf(c Caller, a Action, id string) (*scope, *Denial) {
	if !p.scoped {
		return nil, nil
	}
	if sc, ok := p.tokens[c.Token]; ok && c.Token != "" {
		return sc, nil
	}
	if p.def != nil {
		return p.def, nil
	}
	why := fmt.Sprintf("%s has no entry under policy.tokens and there is no policy.default", who(c))
	return nil, &Denial{Action: a, Tool: id, Rule: RuleScope, Reason: why}
}

func who(c Caller) string {
	if c.Token == "" {
		return "a caller without a token"
	}
	return fmt.Sprintf("token %q", c.Token)
}

// denyScope says which patterns c's scope has, the first few of them: enough to see the
// mistake without echoing a long list into every error.
func denyScope(c Caller, a Action, id, where string, set *idSet) *Denial {
	return &Denial{Action: a, Tool: id, Rule: RuleScope, Reason: fmt.Sprintf("%s may %s only %s (%s)", who(c), a, patternsOf(set), where)}
}

// Denial is a refusal. As an error it is a gRPC PermissionDenied status (HTTP 403) with a
// google.rpc.ErrorInfo (errreason.PolicyDenied; metadata action, tool, rule); one by
// RuleServerRules (the rules are not known yet) is Unavailable (HTTP 503, errreason.NotReady):
// nothing was decided, and asking again once the rules have come may be allowed.
type Denial struct {
	Action Action
	Tool   string // the tool id; "" for a question
	Rule   Rule
	Reason string // for people; never holds a secret
}

func (d *Denial) Error() string {
	what := string(d.Action)
	if d.Tool != "" {
		what += " " + d.Tool
	}
	if d.Rule == RuleServerRules {
		return fmt.Sprintf("unavailable: %s: %s (rule: %s)", what, d.Reason, d.Rule)
	}
	return fmt.Sprintf("permission denied: %s: %s (rule: %s)", what, d.Reason, d.Rule)
}

// GRPCStatus makes a *Denial returned by a gRPC handler a PermissionDenied status, or an
// Unavailable one for RuleServerRules.
func (d *Denial) GRPCStatus() *status.Status {
	code, reason := codes.PermissionDenied, errreason.PolicyDenied
	if d.Rule == RuleServerRules {
		code, reason = codes.Unavailable, errreason.NotReady
	}
	st := status.New(code, d.Error())
	md := map[string]string{"action": string(d.Action), "rule": string(d.Rule)}
	if d.Tool != "" {
		md["tool"] = d.Tool
	}
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errreason.Domain, Metadata: md}); err == nil {
		return ds
	}
	return st
}

// Record counts d (labels action and rule only: a tool id is the caller's to choose, so it
// would make the metric unbounded) and adds an event naming the tool and the rule to the span
// in ctx. It returns d, for `return nil, p.Record(ctx, d)`.
func (p *Policy) Record(ctx context.Context, d *Denial) *Denial {
	if p == nil {
		p = empty
	}
	attrs := []attribute.KeyValue{attribute.String("toolmesh.policy.action", string(d.Action)), attribute.String("toolmesh.policy.rule", string(d.Rule))}
	p.denials.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attrs...))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		if d.Tool != "" {
			attrs = append(attrs, attribute.String("gen_ai.tool.name", d.Tool))
		}
		span.AddEvent("toolmesh.policy.denied", trace.WithAttributes(attrs...))
		if d.Action != Offer {
			// A withheld offer is the policy working, not a refused request.
			span.SetAttributes(attribute.String("toolmesh.policy.denied_rule", string(d.Rule)))
		}
	}
	return d
}
