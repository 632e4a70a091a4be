package gorilla

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// AppendLiteral appends v as a Python literal: strings quoted as Python's repr does, integers,
// floats (integral float64 values as integers), True/False/None, lists and dicts (sorted keys).
// It accepts what encoding/json and structpb produce (also json.Number, int, int64 and
// []string); NaN, infinities and other types are an error.
func AppendLiteral(b []byte, v any) ([]byte, error) {
	return appendLiteral(b, v, 0)
}

func appendLiteral(b []byte, v any, depth int) ([]byte, error) {
	if depth > 100 {
		return b, fmt.Errorf("gorilla: value nested more than 100 deep")
	}
	var err error
	switch v := v.(type) {
	case nil:
		return append(b, "None"...), nil
	case bool:
		if v {
			return append(b, "True"...), nil
		}
		return append(b, "False"...), nil
	case string:
		return appendPyString(b, v), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(v), 10), nil
	case float32:
		return appendLiteral(b, float64(v), depth)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return b, fmt.Errorf("gorilla: %v has no Python literal", v)
		}
		return appendPyNumber(b, v), nil
	case json.Number:
		s := string(v)
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return append(b, s...), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) {
			return b, fmt.Errorf("gorilla: bad number %q", s)
		}
		if isJSONNumber(s) {
			return append(b, s...), nil // a JSON number is a Python literal as written
		}
		return appendPyFloat(b, f), nil
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ", "...)
			}
			if b, err = appendLiteral(b, e, depth+1); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case []string:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPyString(b, e)
		}
		return append(b, ']'), nil
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
			b = appendPyString(b, k)
			b = append(b, ": "...)
			if b, err = appendLiteral(b, v[k], depth+1); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	default:
		return b, fmt.Errorf("gorilla: no Python literal for %T", v)
	}
}

// isJSONNumber reports whether s is in JSON's number syntax (which Python also reads).
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == start || s[start] == '0' && i-start > 1 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	return i == len(s)
}

// appendPyString writes s as Python's repr(str) does: single quotes unless s holds a single
// quote and no double quote; \\, the quote, \n, \r, \t escaped; other control characters as
// \xhh; printable non-ASCII kept as is. Invalid UTF-8 bytes become U+FFFD.
func appendPyString(b []byte, s string) []byte {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	return appendQuoted(b, s, q)
}

// appendQuoted writes s between q quotes with Python escapes.
func appendQuoted(b []byte, s string, q byte) []byte {
	b = append(b, q)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == rune(q) || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r < 0x20 || r == 0x7f:
			b = append(b, '\\', 'x', hexDigits[r>>4], hexDigits[r&0xF])
		case r >= 0x80 && !unicode.IsPrint(r):
			switch {
			case r <= 0xFF:
				b = append(b, '\\', 'x', hexDigits[r>>4], hexDigits[r&0xF])
			case r <= 0xFFFF:
				b = append(b, '\\', 'u', hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
			default:
				b = append(b, '\\', 'U')
				for shift := 28; shift >= 0; shift -= 4 {
					b = append(b, hexDigits[r>>uint(shift)&0xF])
				}
			}
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, q)
}

// Render writes a call as the model would: "<<function>>name(arg=value, ...)", keyword
// arguments in schema order, then any arguments the schema does not declare, sorted.
func (c *Catalog) Render(call Call) (string, error) {
	b, err := c.appendCall(append([]byte(nil), fnDelim...), call.ToolID, call.Arguments)
	return string(b), err
}

// appendCall writes name(kw=value, ...) for a tool id; an id outside the catalog is written
// with its sanitized name and sorted arguments.
func (c *Catalog) appendCall(b []byte, toolID string, args map[string]any) ([]byte, error) {
	f := c.byID[toolID]
	var order []string // argument names as the schema has them
	name := dottedName(toolID)
	byOrig := map[string]string{}
	schemas := map[string]any{}
	if f != nil {
		name = f.name
		for _, p := range f.params {
			byOrig[p.orig] = p.name
			schemas[p.orig] = p.schema
			if _, ok := args[p.orig]; ok {
				order = append(order, p.orig)
			}
		}
	}
	var extra []string
	for k := range args {
		if _, ok := byOrig[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	order = append(order, extra...)
	b = append(b, name...)
	b = append(b, '(')
	var err error
	for i, k := range order {
		if i > 0 {
			b = append(b, ", "...)
		}
		if n, ok := byOrig[k]; ok {
			b = append(b, n...)
		} else if identShaped(k) {
			b = append(b, k...) // as the parser reads it back, keywords included
		} else {
			b = append(b, identifier(k)...)
		}
		b = append(b, '=')
		if b, err = appendSchemaLiteral(b, args[k], schemas[k], 0); err != nil {
			return b, fmt.Errorf("argument %q: %w", k, err)
		}
	}
	return append(b, ')'), nil
}

// appendSchemaLiteral is AppendLiteral with dict keys in schema order where the schema
// declares keys (as the grammar asks for them, see objectKeys), for lists item by item.
func appendSchemaLiteral(b []byte, v any, schema any, depth int) ([]byte, error) {
	m, _ := schema.(map[string]any)
	if m == nil || depth > maxSchemaDepth {
		return AppendLiteral(b, v)
	}
	var err error
	switch v := v.(type) {
	case map[string]any:
		names, props, _ := objectKeys(m)
		if len(names) == 0 {
			return AppendLiteral(b, v)
		}
		var order []string
		for _, k := range names {
			if _, ok := v[k]; ok {
				order = append(order, k)
			}
		}
		var extra []string
		for k := range v {
			if _, ok := props[k]; !ok {
				extra = append(extra, k)
			}
		}
		sort.Strings(extra)
		b = append(b, '{')
		for i, k := range append(order, extra...) {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendPyString(b, k)
			b = append(b, ": "...)
			if b, err = appendSchemaLiteral(b, v[k], props[k], depth+1); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ", "...)
			}
			if b, err = appendSchemaLiteral(b, e, m["items"], depth+1); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	}
	return AppendLiteral(b, v)
}

// identShaped reports whether s is made of identifier characters and does not start with a digit
// (a Python keyword included).
func identShaped(s string) bool {
	if s == "" || !isIdentStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isIdentChar(s[i]) {
			return false
		}
	}
	return true
}
