package toolid

import (
	"regexp"
	"testing"
)

func TestValidServer(t *testing.T) {
	rule := regexp.MustCompile(`^` + ServerRule + `$`)
	for _, name := range []string{"calculator", "my-server_2", "a", "", "A", "a.b", "a b", "ü", "sql lite", "-", "_x-"} {
		if got, want := ValidServer(name), rule.MatchString(name); got != want {
			t.Errorf("ValidServer(%q) = %v, want %v (the rule %s)", name, got, want, ServerRule)
		}
	}
}

func TestSplit(t *testing.T) {
	cases := []struct {
		id, server, tool string
		ok               bool
	}{
		{"calculator.add", "calculator", "add", true},
		{"fs.read.file", "fs", "read.file", true},
		{"calculator.", "calculator", "", false},
		{"calculator", "calculator", "", false},
		{".add", "", "add", false},
		{"Calc.add", "Calc", "add", false},
	}
	for _, tc := range cases {
		server, tool, ok := Split(tc.id)
		if server != tc.server || tool != tc.tool || ok != tc.ok {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q, %v", tc.id, server, tool, ok, tc.server, tc.tool, tc.ok)
		}
		if ok && Join(server, tool) != tc.id {
			t.Errorf("Join(Split(%q)) = %q", tc.id, Join(server, tool))
		}
		if Server(tc.id) != tc.server {
			t.Errorf("Server(%q) = %q, want %q", tc.id, Server(tc.id), tc.server)
		}
	}
}
