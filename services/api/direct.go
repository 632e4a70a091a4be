package api

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolmesh/toolmesh/internal/toolid"
)

// directCall is one `@SERVER.TOOL({...})` of a query that names its calls itself.
type directCall struct {
	ToolID    string
	Arguments map[string]any
}

// isDirect says whether a query is a list of direct calls rather than a question.
func isDirect(query string) bool {
	return strings.HasPrefix(strings.TrimSpace(query), "@")
}

// parseDirect reads one or more `@SERVER.TOOL({...json...})` calls separated by white space
// (commas and semicolons between calls are allowed too). The arguments are a JSON object;
// `()` means no arguments. Errors name the byte offset, so a user can find the mistake.
func parseDirect(query string) ([]directCall, error) {
	var calls []directCall
	s := query
	pos := 0
	skip := func() {
		for pos < len(s) && strings.IndexByte(" \t\r\n,;", s[pos]) >= 0 {
			pos++
		}
	}
	for skip(); pos < len(s); skip() {
		if s[pos] != '@' {
			return nil, fmt.Errorf("byte %d: expected '@' to start a call like @calculator.add({\"a\":2,\"b\":3})", pos)
		}
		pos++
		start := pos
		for pos < len(s) && s[pos] != '(' && !isSpace(s[pos]) {
			pos++
		}
		id := s[start:pos]
		server, name, ok := toolid.Split(id)
		switch {
		case server == "" || name == "":
			return nil, fmt.Errorf("byte %d: %q is not a tool id of the form SERVER.TOOL", start, id)
		case !ok:
			return nil, fmt.Errorf("byte %d: server %q must match %s", start, server, toolid.ServerRule)
		case pos >= len(s) || s[pos] != '(':
			return nil, fmt.Errorf("byte %d: expected '(' after %s", pos, id)
		}
		pos++
		for pos < len(s) && isSpace(s[pos]) {
			pos++
		}
		args := map[string]any{}
		if pos < len(s) && s[pos] != ')' {
			dec := json.NewDecoder(strings.NewReader(s[pos:]))
			var v any
			if err := dec.Decode(&v); err != nil {
				return nil, fmt.Errorf("byte %d: arguments of %s are not valid JSON: %v", pos, id, err)
			}
			obj, isObj := v.(map[string]any)
			if !isObj {
				return nil, fmt.Errorf("byte %d: arguments of %s must be a JSON object", pos, id)
			}
			args = obj
			pos += int(dec.InputOffset())
			for pos < len(s) && isSpace(s[pos]) {
				pos++
			}
		}
		if pos >= len(s) || s[pos] != ')' {
			return nil, fmt.Errorf("byte %d: expected ')' to close the call of %s", pos, id)
		}
		pos++
		calls = append(calls, directCall{ToolID: id, Arguments: args})
	}
	if len(calls) == 0 {
		return nil, fmt.Errorf("byte 0: no call found")
	}
	return calls, nil
}

func isSpace(c byte) bool { return strings.IndexByte(" \t\r\n", c) >= 0 }
