package policy

import "testing"

func TestPromptAndResourceRules(t *testing.T) {
	p, err := New(Config{Servers: map[string]ServerRules{
		"everything": {AllowedPrompts: []string{"simple*", "args-*"}, ExcludedPrompts: []string{"args-secret"},
			ExcludedResources: []string{"demo://resource/static/document/architecture.md"}},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, what string
		resource   bool
		rule       Rule // "" allowed
	}{
		{"allowed prompt", "simple-prompt", false, ""},
		{"prompt no allow pattern matches", "resource-prompt", false, RuleAllowedPrompts},
		{"excluded wins", "args-secret", false, RuleExcludedPrompts},
		{"resource excluded", "demo://resource/static/document/architecture.md", true, RuleExcludedResources},
		{"other resource", "demo://resource/static/document/features.md", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d *Denial
			if tc.resource {
				d = p.ResourceExists("everything", tc.what)
			} else {
				d = p.PromptExists("everything", tc.what)
			}
			switch {
			case tc.rule == "" && d != nil:
				t.Fatalf("got %v, want allowed", d)
			case tc.rule != "" && (d == nil || d.Rule != tc.rule):
				t.Fatalf("got %v, want rule %s", d, tc.rule)
			}
		})
	}
	if d := p.PromptExists("other", "anything"); d != nil {
		t.Errorf("a server without rules: got %v", d)
	}
}

func TestServerContextScopes(t *testing.T) {
	p, err := New(Config{Tokens: map[string]Scope{
		"whole":  {Call: []string{"everything"}},
		"star":   {Call: []string{"every*.*"}},
		"single": {Call: []string{"everything.echo"}},
		"lister": {Call: []string{}, List: []string{"everything.*"}},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token  string
		action Action
		server string
		ok     bool
	}{
		{"whole", Call, "everything", true},
		{"whole", List, "everything", true},
		{"whole", List, "calculator", false},
		{"star", Call, "everything", true},
		{"single", List, "everything", false},
		{"lister", List, "everything", true},
		{"lister", Call, "everything", false},
		{"nobody", List, "everything", false},
	} {
		d := p.ServerContext(Caller{Token: tc.token}, tc.action, tc.server)
		if (d == nil) != tc.ok {
			t.Errorf("%s %s %s: got %v, want allowed %v", tc.token, tc.action, tc.server, d, tc.ok)
		}
	}
	if d := p.ServerContext(Caller{Token: "whole", Servers: []string{"calculator"}}, Call, "everything"); d == nil || d.Rule != RuleServers {
		t.Errorf("request's servers: got %v, want rule servers", d)
	}
	if d := (*Policy)(nil).ServerContext(Caller{}, Call, "everything"); d != nil {
		t.Errorf("no policy: got %v", d)
	}
}
