package lexical

import (
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/kljensen/snowball/english"
	"github.com/rivo/uniseg"
	"golang.org/x/text/cases"
	"golang.org/x/text/runes"
	"golang.org/x/text/transform"
	"golang.org/x/text/unicode/norm"
)

// Words segments text into words (Unicode UAX #29 word boundaries), then splits each word into
// its identifier parts (snake_case, kebab-case, camelCase, dots, slashes, letter/digit runs)
// and folds each part: Unicode case folding, compatibility decomposition and removal of
// combining marks ("Café" → "cafe"). Parts without a letter or digit are dropped. The result is
// not stemmed; see Terms.
func Words(text string) []string {
	var out []string
	rest := text
	state := -1
	var w string
	for len(rest) > 0 {
		w, rest, state = uniseg.FirstWordInString(rest, state)
		if !hasAlnum(w) {
			continue
		}
		for _, p := range splitIdentifier(w) {
			if f := fold(p); f != "" {
				out = append(out, f)
			}
		}
	}
	return out
}

// Terms returns the indexed terms of text under the default configuration: Words, minus single
// letters, stemmed with Snowball English (Porter2); when query is true, English stop words and
// pure numbers are dropped too.
func Terms(text string, query bool) []string { return defaultEncoder().terms(text, query) }

// defaultEncoder is Default, built once (New formats and hashes the configuration).
var defaultEncoder = sync.OnceValue(Default)

func isStopWord(w string) bool { return english.IsStopWord(w) }

func stem(w string) string {
	if !isASCIILetters(w) {
		return w
	}
	if s, ok := stemCache.Load(w); ok {
		return s.(string)
	}
	s := english.Stem(w, true)
	if stemCacheLen.Add(1) > stemCacheMax {
		stemCache.Clear()
		stemCacheLen.Store(1)
	}
	// Copies: w and s may share the memory of a whole document or request.
	stemCache.Store(strings.Clone(w), strings.Clone(s))
	return s
}

// stemCache memoizes Snowball stemming, the hot spot of encoding (tool and request vocabularies
// repeat a lot). It is bounded: past stemCacheMax entries it starts over.
var (
	stemCache    sync.Map // word → stem
	stemCacheLen atomic.Int64
)

const stemCacheMax = 1 << 17

func hasAlnum(s string) bool {
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return true
		}
	}
	return false
}

func isDigits(s string) bool {
	for _, r := range s {
		if !unicode.IsDigit(r) {
			return false
		}
	}
	return s != ""
}

func isASCIILetters(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

type runeClass int

const (
	classOther runeClass = iota
	classLower
	classUpper
	classDigit
	classLetter // letters without case (CJK, etc.)
)

func classify(r rune) runeClass {
	switch {
	case unicode.IsLower(r):
		return classLower
	case unicode.IsUpper(r) || unicode.IsTitle(r):
		return classUpper
	case unicode.IsDigit(r):
		return classDigit
	case unicode.IsLetter(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r):
		return classLetter
	}
	return classOther
}

// splitIdentifier splits one UAX #29 word into parts: on any rune that is not a letter, digit or
// combining mark (underscore, dot, apostrophe, hyphen…), at lower→Upper ("getWeather"), at
// Upper→Upper+lower ("HTTPServer" → "HTTP", "Server") and between letters and digits ("mp3").
func splitIdentifier(w string) []string {
	if isASCII(w) {
		return splitASCII(w)
	}
	return splitRunes(w)
}

func splitRunes(w string) []string {
	rs := []rune(w)
	var parts []string
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			parts = append(parts, string(rs[start:end]))
		}
		start = -1
	}
	for i, r := range rs {
		c := classify(r)
		if c == classOther {
			flush(i)
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		p := classify(rs[i-1])
		switch {
		case c == classUpper && p == classLower:
			flush(i)
			start = i
		case c == classLower && p == classUpper && i-1 > start:
			// "HTTPServer": the last upper rune starts the next part.
			flush(i - 1)
			start = i - 1
		case (c == classDigit) != (p == classDigit) && p != classOther:
			flush(i)
			start = i
		}
	}
	flush(len(rs))
	return parts
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func classifyASCII(c byte) runeClass {
	switch {
	case 'a' <= c && c <= 'z':
		return classLower
	case 'A' <= c && c <= 'Z':
		return classUpper
	case '0' <= c && c <= '9':
		return classDigit
	}
	return classOther
}

// splitASCII is splitIdentifier for ASCII words: the same rules on bytes, parts sharing w's
// memory.
func splitASCII(w string) []string {
	var parts []string
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			parts = append(parts, w[start:end])
		}
		start = -1
	}
	for i := 0; i < len(w); i++ {
		c := classifyASCII(w[i])
		if c == classOther {
			flush(i)
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		p := classifyASCII(w[i-1])
		switch {
		case c == classUpper && p == classLower:
			flush(i)
			start = i
		case c == classLower && p == classUpper && i-1 > start:
			flush(i - 1)
			start = i - 1
		case (c == classDigit) != (p == classDigit) && p != classOther:
			flush(i)
			start = i
		}
	}
	flush(len(w))
	return parts
}

// fold applies Unicode case folding and strips combining marks after compatibility
// decomposition. ASCII input takes a fast path.
func fold(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(s)
	}
	// Casers and transformers are stateful: one per call.
	folded := cases.Fold().String(s)
	t := transform.Chain(norm.NFKD, runes.Remove(runes.In(unicode.Mn)), norm.NFC)
	out, _, err := transform.String(t, folded)
	if err != nil {
		return folded
	}
	return out
}
