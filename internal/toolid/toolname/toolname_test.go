package toolname

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNames(t *testing.T) {
	long := strings.Repeat("s", 40) + "." + strings.Repeat("t", 40)
	for _, tc := range []struct {
		ids  []string
		want []string
	}{
		{[]string{"weather.get_forecast"}, []string{"weather__get_forecast"}},
		{[]string{"files.read-file", "a.b.c"}, []string{"files__read-file", "a__b__c"}},
		{[]string{"a.b", "a__b"}, []string{"a__b", hashed("a__b", "a__b", "")}},
		{[]string{"a__b", "a.b"}, []string{"a__b", hashed("a__b", "a.b", "")}},
		{[]string{"srv.tööl/x y"}, []string{"srv__t__l_x_y"}},
		{[]string{"srv.t?l", "srv.t!l"}, []string{"srv__t_l", hashed("srv__t_l", "srv.t!l", "")}},
		{[]string{""}, []string{"tool"}},
		{[]string{long}, []string{hashed(Base(long), long, "")}},
	} {
		n := New(tc.ids...)
		seen := map[string]bool{}
		for i, id := range tc.ids {
			name := n.Name(id)
			if name != tc.want[i] {
				t.Errorf("%q: name %q, want %q", id, name, tc.want[i])
			}
			if !Valid(name) {
				t.Errorf("%q: name %q is not a valid OpenAI function name or Anthropic tool name", id, name)
			}
			if seen[name] {
				t.Errorf("%q: name %q given twice", id, name)
			}
			seen[name] = true
			if back, ok := n.ID(name); !ok || back != id {
				t.Errorf("%q: ID(%q) = %q, %v", id, name, back, ok)
			}
		}
	}
	if _, ok := New("a.b").ID("a.b"); ok {
		t.Error("ID of an unmapped name succeeded")
	}
	// Many colliding ids stay one-to-one.
	ids := []string{"x.y", "x__y", "x_.y", "x._y", "x?.y", "x!.y", "x y.y"}
	n := New(ids...)
	seen := map[string]string{}
	for _, id := range ids {
		name := n.Name(id)
		if other, dup := seen[name]; dup {
			t.Errorf("%q and %q share %q", id, other, name)
		}
		seen[name] = id
		if back, _ := n.ID(name); back != id || !Valid(name) {
			t.Errorf("%q -> %q -> %q", id, name, back)
		}
	}
}
