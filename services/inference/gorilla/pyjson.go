package gorilla

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// member is one key of an ordered JSON object.
type member struct {
	key   string
	value any
}

// object is a JSON object whose keys keep the order they were added in.
type object []member

// appendPyJSON appends v encoded the way Python's json.dumps(v) does with default settings:
// separators ", " and ": ", ensure_ascii (non-ASCII as \uXXXX, lower-case hex, surrogate pairs),
// no HTML escaping. Maps without an order are written with sorted keys. Integral floats are
// written as integers (a protobuf Struct keeps every number as a float64, so an integer in the
// server's schema comes back as one); other floats follow Python's repr.
func appendPyJSON(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		if v {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case string:
		return appendPyJSONString(b, v)
	case float64:
		return appendPyNumber(b, v)
	case float32:
		return appendPyNumber(b, float64(v))
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case int64:
		return strconv.AppendInt(b, v, 10)
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return strconv.AppendInt(b, i, 10)
		}
		if f, err := strconv.ParseFloat(string(v), 64); err == nil {
			return appendPyFloat(b, f)
		}
		return appendPyJSONString(b, string(v))
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPyJSON(b, e)
		}
		return append(b, ']')
	case []string:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPyJSONString(b, e)
		}
		return append(b, ']')
	case object:
		b = append(b, '{')
		for i, m := range v {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPyJSONString(b, m.key)
			b = append(b, ": "...)
			b = appendPyJSON(b, m.value)
		}
		return append(b, '}')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPyJSONString(b, k)
			b = append(b, ": "...)
			b = appendPyJSON(b, v[k])
		}
		return append(b, '}')
	default:
		// Not produced by structpb; encode through encoding/json and re-encode so the
		// output stays in Python's style.
		raw, err := json.Marshal(v)
		if err != nil {
			return append(b, "null"...)
		}
		var back any
		if json.Unmarshal(raw, &back) != nil {
			return append(b, "null"...)
		}
		return appendPyJSON(b, back)
	}
}

// appendPyNumber writes an integral float as an integer and any other float as Python's repr.
func appendPyNumber(b []byte, f float64) []byte {
	if f == 0 && math.Signbit(f) {
		return append(b, "-0.0"...)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.AppendInt(b, int64(f), 10)
	}
	return appendPyFloat(b, f)
}

// appendPyFloat writes f as Python's repr(float) does (json.dumps uses float.__repr__).
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	return append(b, pyFloatRepr(f)...)
}

// pyFloatRepr is Python's repr of a finite float: the shortest round-tripping digits, fixed
// notation when the decimal exponent is in [-4, 16), scientific ("1e+16", "1.5e-07") otherwise,
// and always a "." or an exponent.
func pyFloatRepr(f float64) string {
	e := strconv.FormatFloat(f, 'e', -1, 64)
	// e looks like "-1.2345e+07".
	exp := 0
	for i := len(e) - 1; i >= 0; i-- {
		if e[i] == 'e' {
			exp, _ = strconv.Atoi(e[i+1:])
			break
		}
	}
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		for i := 0; i < len(s); i++ {
			if s[i] == '.' {
				return s
			}
		}
		return s + ".0"
	}
	return e
}

const hexDigits = "0123456789abcdef"

// appendPyJSONString writes s as a JSON string with Python's ensure_ascii escaping.
func appendPyJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch c {
			case '"':
				b = append(b, '\\', '"')
			case '\\':
				b = append(b, '\\', '\\')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				if c < 0x20 {
					b = appendU4(b, rune(c))
				} else {
					b = append(b, c)
				}
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r > 0xFFFF {
			r -= 0x10000
			b = appendU4(b, 0xD800+(r>>10)&0x3FF)
			b = appendU4(b, 0xDC00+r&0x3FF)
			continue
		}
		b = appendU4(b, r)
	}
	return append(b, '"')
}

func appendU4(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
}
