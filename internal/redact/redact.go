// Package redact hides the credentials a URL can carry before text is shown to anyone: in
// errors, log lines, status fields, spans and the web console.
//
// Users put secrets in MCP server URLs (https://TOKEN@host/mcp, .../sse?api_key=KEY), and
// those URLs come back inside the errors of the HTTP client, mcp-go and net ("Get
// \"https://...?api_key=KEY\": dial tcp ...") and in the error pages of servers that quote the
// request they refused ("no route for /mcp?api_key=KEY"). Text finds every URL in a piece of
// text and masks its userinfo, the value of each query parameter and its fragment; it keeps the
// scheme, host, port and path, which say which server failed. It is the one redaction function of toolmesh:
// the log handler, the span exporter, the REST answers and the gRPC error statuses all call it.
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces each hidden part.
const Mask = "REDACTED"

// Text returns s with every URL in it masked: an absolute one ("scheme://...") as URL does,
// and a relative one with a query ("/mcp?api_key=KEY", as a server quotes the request it
// refused) by its query values and fragment. Text without "://" or "?" is returned as it is,
// without allocating.
func Text(s string) string {
	if !MayHold(s) {
		return s
	}
	var b strings.Builder
	done := 0 // s[:done] is written to b
	for i := 0; i < len(s); {
		if isDelimiter(s[i]) {
			i++
			continue
		}
		end := urlEnd(s, i)
		tok := s[i:end]
		start, masked := i, ""
		if sep := strings.Index(tok, "://"); sep >= 0 {
			if at := schemeStart(tok, sep); at < sep {
				start, masked = i+at, URL(tok[at:])
			}
		} else if q := strings.IndexByte(tok, '?'); q >= 0 && strings.IndexByte(tok[:q], '/') >= 0 {
			start, masked = i+q, maskQuery(tok[q:])
		}
		if masked != "" {
			b.WriteString(s[done:start])
			b.WriteString(masked)
			done = end
		}
		i = end
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// MayHold reports whether Text could change s: a cheap test for callers that would otherwise
// copy a structure to redact it.
func MayHold(s string) bool {
	return strings.Contains(s, "://") || strings.IndexByte(s, '?') >= 0
}

// schemeStart is where the scheme before the "://" at sep begins: a letter followed by
// letters, digits, '+', '-' or '.' (RFC 3986). It is sep when there is no scheme.
func schemeStart(s string, sep int) int {
	start := sep
	for start > 0 && isSchemeChar(s[start-1]) {
		start--
	}
	for start < sep && !isLetter(s[start]) {
		start++
	}
	return start
}

// urlEnd is where a URL that goes on from i ends in text: at white space, a quote, an angle
// bracket, a backslash (a quote escaped in JSON or Go syntax) or the end of s.
func urlEnd(s string, i int) int {
	for ; i < len(s) && !isDelimiter(s[i]); i++ {
	}
	return i
}

func isDelimiter(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>', '\\':
		return true
	}
	return false
}

// URL masks the credentials of one URL: its userinfo (user and password alike, since a user
// name is often the token itself), the value of every query parameter (a parameter without a
// value is masked whole) and the fragment (OAuth puts tokens there). Scheme, host, port and
// path are kept. It works on the text, so a URL that does not parse is masked all the same and
// nothing else in it is re-encoded.
func URL(raw string) string {
	sep := strings.Index(raw, "://")
	if sep < 0 {
		return raw
	}
	authStart := sep + 3
	rest := raw[authStart:]
	authLen := strings.IndexAny(rest, "/?#")
	if authLen < 0 {
		authLen = len(rest)
	}
	var b strings.Builder
	b.Grow(len(raw) + 8)
	b.WriteString(raw[:authStart])
	authority := rest[:authLen]
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		b.WriteString(Mask)
		authority = authority[at:]
	}
	b.WriteString(authority)
	rest = rest[authLen:]

	q := strings.IndexAny(rest, "?#")
	if q < 0 {
		b.WriteString(rest)
		return b.String()
	}
	b.WriteString(rest[:q])
	b.WriteString(maskQuery(rest[q:]))
	return b.String()
}

// maskQuery masks what follows a path: "?a=1&b" becomes "?a=REDACTED&REDACTED", a fragment
// "#REDACTED".
func maskQuery(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	rest, _, hasFragment := strings.Cut(s, "#")
	if query, ok := strings.CutPrefix(rest, "?"); ok {
		b.WriteByte('?')
		for j, param := range strings.Split(query, "&") {
			if j > 0 {
				b.WriteByte('&')
			}
			if param == "" {
				continue
			}
			if key, _, ok := strings.Cut(param, "="); ok {
				b.WriteString(key)
				b.WriteString("=" + Mask)
				continue
			}
			b.WriteString(Mask)
		}
	}
	if hasFragment {
		b.WriteString("#" + Mask)
	}
	return b.String()
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isSchemeChar(c byte) bool {
	return isLetter(c) || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

// quoted is a run an error message quotes: between backticks (yaml.v3 quotes values so) or
// double quotes; name is a quoted run that is only a name (a key, a server's name).
var (
	quoted = regexp.MustCompile("`[^`]*`|\"(?:[^\"\\\\]|\\\\.)*\"")
	name   = regexp.MustCompile(`^"[A-Za-z0-9_.-]{1,64}"$`)
)

// Quotes replaces what s quotes with "…", but for names. An error about a file that is not
// what it should be (a symlink that points at another file, say) quotes that file's bytes;
// where the message goes further than the log (a readiness answer), the values go, and the
// names of keys and servers, which say where the problem is, stay.
func Quotes(s string) string {
	return quoted.ReplaceAllStringFunc(s, func(q string) string {
		if name.MatchString(q) {
			return q
		}
		return "…"
	})
}
