package cli

import "testing"

// TestPrintable: what a terminal would act on is escaped; the rest, newlines, tabs and
// backslashes included, is left exactly as it came.
func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "2 plus 3 is 5.\n\tdone", "2 plus 3 is 5.\n\tdone"},
		{"backslash and unicode", `C:\x1b é 日本`, `C:\x1b é 日本`},
		{"colour and clear screen", "\x1b[31mred\x1b[0m\x1b[2J", `\x1b[31mred\x1b[0m\x1b[2J`},
		{"window title", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"carriage return and backspace", "ok\rno\x08", `ok\rno\x08`},
		{"DEL and C1 CSI", "a\x7fb\u009b2J", `a\x7fb\u009b2J`},
		{"bidi override", "abc\u202edcba\u2066x\u2069", `abc\u202edcba\u2066x\u2069`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := printable(tc.in); got != tc.want {
				t.Errorf("printable(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
