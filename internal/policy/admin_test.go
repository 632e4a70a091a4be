package policy

import (
	"strings"
	"testing"
)

// TestAdmin: who may review and approve tool definitions. An admin's scope calls and lists
// every tool; without scopes every caller already may, so every caller is one.
func TestAdmin(t *testing.T) {
	scoped := Config{
		Tokens: map[string]Scope{
			"root":     {Call: []string{"*"}, Query: true},
			"narrow":   {Call: []string{"calc.*"}, Query: true},
			"lister":   {Call: []string{"calc.add"}, List: []string{"*"}},
			"callsall": {Call: []string{"*"}, List: []string{"calc.*"}},
		},
	}
	withDefault := scoped
	withDefault.Default = &Scope{Call: []string{"*"}}
	cases := []struct {
		name  string
		cfg   Config
		token string
		admin bool
	}{
		{"no scopes, a token", Config{}, "anyone", true},
		{"no scopes, no token", Config{}, "", true},
		{"a scope that calls every tool", scoped, "root", true},
		{"a scope of one server", scoped, "narrow", false},
		{"lists every tool, calls one", scoped, "lister", false},
		{"calls every tool, lists one server", scoped, "callsall", false},
		{"a token without an entry", scoped, "stranger", false},
		{"the default scope calls every tool", withDefault, "stranger", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := New(c.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			d := p.Admin(Caller{Token: c.token})
			if (d == nil) != c.admin {
				t.Fatalf("Admin(%q) = %v, want admin %v", c.token, d, c.admin)
			}
			if d != nil && (d.Rule != RuleAdmin || d.Action != Approve || !strings.Contains(d.Reason, `"*"`)) {
				t.Errorf("denial %+v: want rule admin, action approve, saying what scope it takes", d)
			}
		})
	}
}
