package policy

import "fmt"

// Reviewing and approving tool definitions (mcpServers pinning) is an admin's: whoever
// approves a definition decides what every caller's model may be told by that tool.
const (
	// Approve is listing the definitions waiting for approval, or approving one.
	Approve Action = "approve"
	// RuleAdmin refuses an approval to a caller that is not an admin.
	RuleAdmin Rule = "admin"
)

// Admin decides whether c may review and approve tool definitions. An admin is a caller whose
// scope calls and lists every tool (call: ["*"], and list, when set, ["*"] too): a caller that
// may already use every tool loses nothing to a tool it approves, while a narrower one would
// decide for tools it may not use itself. Without scopes every caller may use every tool, so
// every caller (every API token, or anyone the api lets in without tokens) is an admin.
func (p *Policy) Admin(c Caller) *Denial {
	if p == nil {
		p = empty
	}
	sc, d := p.scopeOf(c, Approve, "")
	if d != nil {
		d.Rule = RuleAdmin
		d.Reason += `; approving tool definitions takes a scope that calls and lists every tool (call: ["*"])`
		return d
	}
	if sc == nil || (sc.call.all && sc.list.all) {
		return nil
	}
	return &Denial{Action: Approve, Rule: RuleAdmin,
		Reason: fmt.Sprintf(`%s may not review or approve tool definitions: that takes a scope that calls and lists every tool (%s.call: ["*"], and list unset or ["*"])`, who(c), sc.where)}
}
