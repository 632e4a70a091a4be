package mcpconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// stripJSONC blanks out // and /* */ comments, trailing commas before } or ], and a UTF-8
// byte-order mark, replacing them with spaces so byte offsets (and so line:column in errors)
// still match the original file.
func stripJSONC(data []byte) ([]byte, error) {
	out := bytes.Clone(data)
	if bytes.HasPrefix(out, []byte("\xef\xbb\xbf")) {
		copy(out, "   ")
	}
	// Pass 1: comments.
	for i := 0; i < len(out); {
		switch {
		case out[i] == '"':
			i = skipString(out, i)
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '/':
			for i < len(out) && out[i] != '\n' {
				out[i] = ' '
				i++
			}
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '*':
			start := i
			out[i], out[i+1] = ' ', ' '
			i += 2
			for i < len(out) && !(out[i] == '*' && i+1 < len(out) && out[i+1] == '/') {
				if out[i] != '\n' {
					out[i] = ' '
				}
				i++
			}
			if i >= len(out) {
				line, col := position(data, start)
				return nil, fmt.Errorf("line %d, column %d: unterminated /* comment", line, col)
			}
			out[i], out[i+1] = ' ', ' '
			i += 2
		default:
			i++
		}
	}
	// Pass 2: trailing commas.
	for i := 0; i < len(out); {
		switch out[i] {
		case '"':
			i = skipString(out, i)
		case ',':
			j := i + 1
			for j < len(out) && (out[j] == ' ' || out[j] == '\t' || out[j] == '\n' || out[j] == '\r') {
				j++
			}
			if j < len(out) && (out[j] == '}' || out[j] == ']') {
				out[i] = ' '
			}
			i++
		default:
			i++
		}
	}
	return out, nil
}

// skipString returns the index just past the JSON string starting at out[i] == '"' (the end
// of out when it is not closed).
func skipString(out []byte, i int) int {
	if end := stringEnd(out, i); end >= 0 {
		return end
	}
	return len(out)
}

// position is the 1-based line and column (in bytes) of offset in data.
func position(data []byte, offset int) (line, col int) {
	offset = min(max(offset, 0), len(data))
	line = 1 + bytes.Count(data[:offset], []byte("\n"))
	col = offset - bytes.LastIndexByte(data[:offset], '\n')
	return line, col
}

// at prefixes msg with the line and column of offset in data.
func at(data []byte, offset int, format string, args ...any) error {
	line, col := position(data, offset)
	return fmt.Errorf("line %d, column %d: %s", line, col, fmt.Sprintf(format, args...))
}

// jsonError turns an encoding/json decoding error of clean (data with its comments blanked,
// so offsets match) into one that says where, in lines and columns, and what was expected
// there: a file cut short says more than "unexpected EOF".
func jsonError(data, clean []byte, err error) error {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		line, col := position(data, int(syn.Offset)-1) // Offset is just past the bad byte
		if want := expectedAfter(syn.Error()); want != "" {
			return fmt.Errorf("line %d, column %d: %w: expected %s", line, col, err, want)
		}
		return fmt.Errorf("line %d, column %d: %w", line, col, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return endOfFile(clean)
	case errors.Is(err, io.EOF):
		const want = `expected a JSON object like {"mcpServers": {...}}`
		if len(bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))) == 0 {
			return at(data, 0, "the file is empty: %s", want)
		}
		return at(data, len(data), "the file holds no JSON value, only comments: %s", want)
	}
	return err
}

// expectedAfter says what encoding/json's scanner wanted where it found the character its
// message names ("invalid character 'x' after object key:value pair"), or "".
func expectedAfter(msg string) string {
	hint := ""
	if strings.HasPrefix(msg, `invalid character '\''`) {
		hint = " (JSON strings take double quotes)"
	}
	for _, e := range []struct{ context, want string }{
		{"after object key:value pair", "',' or '}'"},
		{"after object key", "':'"},
		{"after array element", "',' or ']'"},
		{"looking for beginning of object key string", `a key in double quotes, or '}'` + hint},
		{"looking for beginning of value", "a value: a string in double quotes, a number, an object, a list, true, false or null" + hint},
		{"in string literal", `the rest of the string: a line break or tab in a string is written \n or \t`},
		{"in string escape code", `an escape: \", \\, \/, \b, \f, \n, \r, \t or \uXXXX`},
		{`in \u hexadecimal character escape`, "four hexadecimal digits"},
		{"in numeric literal", "a digit"},
		{"after top-level value", "the end of the file"},
	} {
		if strings.HasSuffix(msg, e.context) {
			return e.want
		}
	}
	return ""
}

// openValue is an object or list not yet closed where the file ends.
type openValue struct {
	bracket byte   // '{' or '['
	offset  int    // of the bracket
	key     string // whose value it is; "" at the top level or in a list
}

func (o openValue) String() string {
	kind := "object"
	if o.bracket == '[' {
		kind = "list"
	}
	if o.key != "" {
		return fmt.Sprintf("%s %q", kind, o.key)
	}
	return kind
}

// endOfFile says what a document that ends too early still needed: the decoder found no
// syntax error before the end, so one pass over the tokens tells what came last.
func endOfFile(data []byte) error {
	const (
		wantValue = iota
		wantKey
		wantColon
		wantComma // or the closing bracket
	)
	var open []openValue
	state, key := wantValue, ""
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case ' ', '\t', '\r', '\n':
		case '"':
			end := stringEnd(data, i)
			if end < 0 {
				return at(data, len(data), "unexpected end of file (was it cut short?): expected the closing '\"' of the string that starts at %s",
					where(data, i))
			}
			if state == wantKey {
				var k string
				if json.Unmarshal(data[i:end], &k) == nil {
					key = k
				}
				state = wantColon
			} else {
				state = wantComma
			}
			i = end - 1
		case ':':
			state = wantValue
		case ',':
			state = wantValue
			if len(open) > 0 && open[len(open)-1].bracket == '{' {
				state = wantKey
			}
		case '{', '[':
			o := openValue{bracket: c, offset: i}
			if len(open) > 0 && open[len(open)-1].bracket == '{' {
				o.key = key
			}
			open = append(open, o)
			state = wantValue
			if c == '{' {
				state = wantKey
			}
		case '}', ']':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
			state = wantComma
		default: // a number, true, false or null
			for i+1 < len(data) && strings.IndexByte("{}[]:,\" \t\r\n", data[i+1]) < 0 {
				i++
			}
			state = wantComma
		}
	}
	if len(open) == 0 {
		return at(data, len(data), "unexpected end of file (was it cut short?)")
	}
	top := open[len(open)-1]
	var want string
	switch {
	case state == wantColon:
		want = fmt.Sprintf("':' after the key %q", key)
	case state == wantValue && top.bracket == '{':
		want = fmt.Sprintf("the value of %q", key)
	case state == wantValue:
		want = fmt.Sprintf("a value or ']' to close the %s opened at %s", top, where(data, top.offset))
	case state == wantKey:
		want = fmt.Sprintf("a key in double quotes or '}' to close the %s opened at %s", top, where(data, top.offset))
	case top.bracket == '{':
		want = fmt.Sprintf("',' or '}' to close the %s opened at %s", top, where(data, top.offset))
	default:
		want = fmt.Sprintf("',' or ']' to close the %s opened at %s", top, where(data, top.offset))
	}
	var outer []string
	for i := len(open) - 2; i >= 0; i-- {
		var name string
		switch {
		case i == 0:
			name = "the top level"
		case open[i].key != "":
			name = strconv.Quote(open[i].key)
		case open[i].bracket == '[':
			name = "a list"
		default:
			name = "an object"
		}
		outer = append(outer, name+" at "+where(data, open[i].offset))
	}
	if len(outer) > 0 {
		want += " (still open: " + strings.Join(outer, ", ") + ")"
	}
	return at(data, len(data), "unexpected end of file (was it cut short?): expected %s", want)
}

// stringEnd is the offset just past the JSON string starting at data[i] == '"', or -1 when
// the data ends first.
func stringEnd(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// where is "line L, column C" of offset in data.
func where(data []byte, offset int) string {
	line, col := position(data, offset)
	return fmt.Sprintf("line %d, column %d", line, col)
}

// keyAt is where one key of an object, and its value, start.
type keyAt struct{ key, value int }

// objectKeys finds the keys of the object starting at data[start] ('{' after blanks), with
// their offsets; nil when there is none there. data is known to decode.
func objectKeys(data []byte, start int) map[string]keyAt {
	start = skipBlank(data, start, " \t\r\n")
	dec := json.NewDecoder(bytes.NewReader(data[start:]))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	out := map[string]keyAt{}
	for dec.More() {
		keyOff := skipBlank(data, start+int(dec.InputOffset()), " \t\r\n,")
		t, err := dec.Token()
		k, ok := t.(string)
		if err != nil || !ok {
			return out
		}
		valOff := skipBlank(data, start+int(dec.InputOffset()), " \t\r\n:")
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return out
		}
		out[k] = keyAt{key: keyOff, value: valOff}
	}
	return out
}

// skipBlank is the first offset from i of a byte not in blanks.
func skipBlank(data []byte, i int, blanks string) int {
	for i < len(data) && strings.IndexByte(blanks, data[i]) >= 0 {
		i++
	}
	return i
}
