// Package redact hides the credentials a URL can carry before text is shown to anyone: in
// errors, log lines, status fields, spans and the web console.
//
// Users put secrets in MCP server URLs (https://TOKEN@host/mcp, .../sse?api_key=KEY), and
// those URLs come back inside the errors of the HTTP client, mcp-go and net ("Get
// \"https://...?api_key=KEY\": dial tcp ..."). Text finds every URL in a piece of text and masks
// its userinfo, the value of each query parameter and its fragment; it keeps the scheme, host,
// port and path, which say which server failed. It is the one redaction function of toolmesh:
// the log handler, the span exporter, the REST answers and the gRPC error statuses all call it.
package redact

import "strings"

// Mask replaces each hidden part.
const Mask = "REDACTED"

// Text returns s with every URL in it ("scheme://...") passed through URL. Text without
// "://" is returned as it is, without allocating.
func Text(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	done, pos := 0, 0 // s[:done] is written to b; the search goes on at pos
	for {
		i := strings.Index(s[pos:], "://")
		if i < 0 {
			break
		}
		i += pos
		start, end := schemeStart(s, i), urlEnd(s, i+3)
		pos = end
		if start == i {
			continue // "://" without a scheme in front is no URL
		}
		b.WriteString(s[done:start])
		b.WriteString(URL(s[start:end]))
		done = end
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
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
	for ; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r', '"', '\'', '`', '<', '>', '\\':
			return i
		}
	}
	return i
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

	path, _, hasFragment := strings.Cut(rest, "#")
	path, query, hasQuery := strings.Cut(path, "?")
	b.WriteString(path)
	if hasQuery {
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
