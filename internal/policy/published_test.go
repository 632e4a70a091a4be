package policy

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// TestRulesPublished: the rules the executor publishes read back as the rules it has, field for
// field, so the api decides by what the executor's config says.
func TestRulesPublished(t *testing.T) {
	rules := map[string]ServerRules{
		"notes": {AllowedTools: []string{"get_*"}, ExcludedTools: []string{"get_secret"}, AllowDestructive: true,
			RateLimit:      &mcpconfig.RateLimit{Calls: 3, Per: time.Minute},
			ToolRateLimits: map[string]*mcpconfig.RateLimit{"get_page": {Calls: 1, Per: time.Hour}},
			AllowedPrompts: []string{"p*"}, ExcludedPrompts: []string{"px"}, AllowedResources: []string{"file:///a/*"}, ExcludedResources: []string{"file:///a/b"}},
		"bare": {},
	}
	if got := RulesSetFromProto(RulesSetProto(rules)); !reflect.DeepEqual(got, rules) {
		t.Errorf("published and read back:\n%+v\nwant\n%+v", got, rules)
	}
}

// TestPending: a policy waiting for its servers' rules refuses every decision about a tool as
// unavailable, saying why, until SetServers; Await makes it wait again.
func TestPending(t *testing.T) {
	const why = "no rules yet"
	p, err := New(Config{Pending: why}, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, wantPending bool) {
		t.Helper()
		d := p.Call(Caller{}, "calc.add")
		if !wantPending {
			if d != nil || p.Pending() != "" {
				t.Errorf("%s: Call = %v, Pending %q; want allowed", name, d, p.Pending())
			}
			return
		}
		if d == nil || d.Rule != RuleServerRules || p.Pending() != why {
			t.Fatalf("%s: Call = %v, Pending %q; want refused by %s", name, d, p.Pending(), RuleServerRules)
		}
		st := status.Convert(d)
		if want := "unavailable: call calc.add: " + why + " (rule: serverRules)"; st.Code() != codes.Unavailable || st.Message() != want || errreason.Of(d) != errreason.NotReady {
			t.Errorf("%s: %v %q (reason %q); want Unavailable %q, NOT_READY", name, st.Code(), st.Message(), errreason.Of(d), want)
		}
		if p.Offer(Caller{}, nil) == nil || p.List(Caller{}, "calc.add") == nil {
			t.Errorf("%s: an offer or a listing is allowed without rules", name)
		}
	}
	check("before the rules", true)
	if err := p.SetServers(map[string]ServerRules{"calc": {ExcludedTools: []string{"sub"}}}); err != nil {
		t.Fatal(err)
	}
	check("with the rules", false)
	if d := p.Call(Caller{}, "calc.sub"); d == nil || d.Rule != RuleExcludedTools {
		t.Errorf("calc.sub with the rules: %v; want excludedTools", d)
	}
	p.Await(why)
	check("waiting again", true)
}
