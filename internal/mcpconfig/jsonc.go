package mcpconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// skipString returns the index just past the JSON string starting at out[i] == '"'.
func skipString(out []byte, i int) int {
	for i++; i < len(out); i++ {
		switch out[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(out)
}

func position(data []byte, offset int) (line, col int) {
	offset = min(max(offset, 0), len(data))
	line = 1 + bytes.Count(data[:offset], []byte("\n"))
	col = offset - bytes.LastIndexByte(data[:offset], '\n')
	return line, col
}

// jsonError adds line:column to encoding/json syntax errors.
func jsonError(data []byte, err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line, col := position(data, int(syn.Offset)-1) // Offset is just past the bad byte
		return fmt.Errorf("line %d, column %d: %w", line, col, err)
	}
	if errors.Is(err, io.EOF) {
		return errors.New("empty document")
	}
	return err
}
