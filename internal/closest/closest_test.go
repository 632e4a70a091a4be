package closest

import (
	"slices"
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"calculator", "calculator", 0},
		{"calculatr", "calculator", 1},
		{"Calculator", "calculator", 0},
		{"kitten", "sitting", 3},
		{"", "abc", 3},
		{strings.Repeat("a", 65), "a", 64},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestSorted(t *testing.T) {
	known := []string{"sqlite", "converter", "calculator", "converter"}
	got := Sorted("sqlit", known)
	want := []string{"sqlite", "calculator", "converter"} // the last two are 8 edits away: by name
	if !slices.Equal(got, want) {
		t.Errorf("Sorted = %v, want %v", got, want)
	}
	if !slices.Equal(known, []string{"sqlite", "converter", "calculator", "converter"}) {
		t.Errorf("Sorted changed its input: %v", known)
	}
	if got := Sorted("x", nil); len(got) != 0 {
		t.Errorf("Sorted of nothing = %v", got)
	}
}

func TestName(t *testing.T) {
	known := []string{"add", "subtract", "multiply", "divide"}
	for _, tc := range []struct {
		name string
		want string
	}{
		{"ad", "add"},
		{"ADD", "add"},
		{"substract", "subtract"},
		{"power", ""},
	} {
		if got := Name(tc.name, known, 2); got != tc.want {
			t.Errorf("Name(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := Near("ad", known, 2); got != ` (did you mean "add"?)` {
		t.Errorf("Near = %q", got)
	}
	if got := Near("power", known, 2); got != "" {
		t.Errorf("Near(power) = %q, want nothing", got)
	}
}

func TestList(t *testing.T) {
	known := []string{"b", "a", "c", "ab"}
	if got, want := List("ab", known, 2), "ab, a and 2 more"; got != want {
		t.Errorf("List = %q, want %q", got, want)
	}
	if got, want := List("c", known, 10), "c, a, b, ab"; got != want {
		t.Errorf("List = %q, want %q", got, want)
	}
}
