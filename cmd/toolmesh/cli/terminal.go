package cli

import (
	"fmt"
	"strings"
)

// printable is s with the characters a terminal would act on instead of showing written as
// escapes (\x1b, \r, \u202e): model output and tool results are text from outside, and an
// escape sequence in them can recolour the terminal, move the cursor, rewrite the line
// before (\r, backspace), set the window title or hide text (bidi overrides). Newlines and
// tabs stay: an answer keeps its lines. A backslash is left as it is, so text without such
// characters prints exactly as it came.
func printable(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !unsafeRune(r):
			b.WriteRune(r)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// unsafeRune: C0 controls but newline and tab, DEL, C1 controls (0x9b is a one-byte CSI on
// some terminals), and the bidirectional overrides and isolates. The text comes from JSON, so
// it is UTF-8 already.
func unsafeRune(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
