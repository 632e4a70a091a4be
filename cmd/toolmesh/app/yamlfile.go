package app

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
	yamlv4 "go.yaml.in/yaml/v4"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// yamlFile is a --config file as read: its top-level map, and where each of its keys was.
type yamlFile struct {
	path string
	doc  map[string]any
	// at holds the position of every key of every map in the file, by the key's path joined
	// with dots as flatten joins them ("api.call-timeout"), and of its value under path+"=".
	at map[string]yamlPos
}

type yamlPos struct{ line, col int }

// readYAML decodes a --config file. Every error names the file and, where the file has one, the
// line and column, and says what was expected there.
func readYAML(path string, data []byte) (*yamlFile, error) {
	f := &yamlFile{path: path, at: map[string]yamlPos{}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, f.syntaxError(data, err)
	}
	if len(root.Content) == 0 {
		return f, nil // an empty file: no settings
	}
	top := root.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return f, nil
	}
	if top.Kind != yaml.MappingNode {
		return nil, f.errorAt(yamlPos{top.Line, top.Column}, "the file is %s: expected a map of settings (keys are flag names, plus mcpServers and policy)",
			nodeKind(top))
	}
	if err := top.Decode(&f.doc); err != nil {
		return nil, f.syntaxError(data, err)
	}
	f.positions("", top)
	return f, nil
}

// positions records where each key of the mapping node m, and of the maps under it, is.
func (f *yamlFile) positions(prefix string, m *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		f.at[key] = yamlPos{k.Line, k.Column}
		f.at[key+"="] = yamlPos{v.Line, v.Column}
		if v.Kind == yaml.MappingNode {
			f.positions(key, v)
		}
	}
}

// errorAt is an error at pos of the file.
func (f *yamlFile) errorAt(pos yamlPos, format string, args ...any) error {
	return fmt.Errorf("config %s: line %d, column %d: %s", f.path, pos.line, pos.col, fmt.Sprintf(format, args...))
}

// keyError is an error about the key at path (or its value, with value set), at its position
// when the file has it.
func (f *yamlFile) keyError(path string, value bool, err error) error {
	where := path
	if value {
		where += "="
	}
	if pos, ok := f.at[where]; ok {
		return fmt.Errorf("config %s: line %d, column %d: %w", f.path, pos.line, pos.col, err)
	}
	return fmt.Errorf("config %s: %w", f.path, err)
}

// pathErrors places each of errs (as policy.ParseYAML returns them, each starting with the dotted
// path of the key it is about: "policy.tokens.ci-bot.cal: unknown key") at its key.
func (f *yamlFile) pathErrors(err error) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		path, _, _ := strings.Cut(e.Error(), ": ")
		for strings.HasSuffix(path, "]") { // a list item: the list's key
			if j := strings.LastIndexByte(path, '['); j > 0 {
				path = path[:j]
			} else {
				break
			}
		}
		out[i] = f.keyError(path, false, e)
	}
	return errors.Join(out...)
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a map"
	case yaml.ScalarNode:
		return "a single value (" + n.Tag + ")"
	}
	return "an alias"
}

// syntaxError explains an error yaml.v3 gave for data. yaml.v3 names a line only, and often the
// line where the enclosing map began rather than the mistake; go-yaml v4, given the same bytes,
// says where the mistake is (line and column) and what it was in. v3 decides (a file reads as it
// always has); v4, when it agrees that the file is bad, only locates the mistake.
func (f *yamlFile) syntaxError(data []byte, v3err error) error {
	var doc map[string]any
	var le *yamlv4.LoadError
	if err := yamlv4.Unmarshal(data, &doc); !errors.As(err, &le) || le.Mark.Line == 0 {
		return fmt.Errorf("config %s: %w", f.path, v3err)
	}
	pos := yamlPos{le.Mark.Line, le.Mark.Column}
	if strings.HasPrefix(le.Message, "cannot construct ") {
		// v3's wording ("cannot unmarshal !!seq into map[string]interface {}") at v4's place.
		return f.errorAt(pos, "%s", strings.TrimPrefix(v3Message(v3err), "yaml: "))
	}
	context := yamlContext(le.ContextMsg)
	if context != "" && le.ContextMark.Line > 0 && atEnd(data, le.Mark) {
		want := expectedOf(le.Message)
		if want == "" {
			want = "the rest of it"
		}
		return f.errorAt(pos, "the file ends inside %s that starts at line %d, column %d (was it cut short?): expected %s",
			context, le.ContextMark.Line, le.ContextMark.Column, want)
	}
	msg := le.Message
	if context != "" && le.ContextMark.Line > 0 && le.ContextMark != le.Mark {
		msg += fmt.Sprintf(" (in %s that starts at line %d, column %d)", context, le.ContextMark.Line, le.ContextMark.Column)
	}
	switch {
	case le.Message == "did not find expected key":
		msg += ": is this line indented as the keys above it?"
	case strings.HasPrefix(le.Message, "found character that cannot start any token") && charAt(data, le.Mark) == '\t':
		msg += ": YAML indents with spaces, not tabs"
	case le.Message == "mapping values are not allowed in this context":
		msg += `: a value holding ": " must be quoted`
	}
	return f.errorAt(pos, "%s", msg)
}

// v3Message is the first problem of a yaml.v3 error, without its line.
func v3Message(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		if _, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
			return rest
		}
		return msg
	}
	return err.Error()
}

// yamlContext names what the parser was inside of, from go-yaml's context message.
func yamlContext(msg string) string {
	switch msg {
	case "":
		return ""
	case "while scanning a quoted scalar":
		return "the quoted string"
	case "while parsing a flow sequence":
		return "the list"
	case "while parsing a flow mapping":
		return "the map"
	case "while parsing a block mapping":
		return "the map"
	case "while parsing a block collection":
		return "the list"
	case "while scanning a simple key":
		return "the key"
	case "while parsing a flow node", "while parsing a block node":
		return "the value"
	case "while scanning a block scalar":
		return "the block of text"
	}
	return "what it was " + strings.TrimPrefix(msg, "while ")
}

// expectedOf is what go-yaml's message says it expected, or "".
func expectedOf(msg string) string {
	switch {
	case msg == "found unexpected end of stream":
		return "its closing quote"
	case strings.HasPrefix(msg, "did not find expected "):
		return strings.TrimPrefix(msg, "did not find expected ")
	case strings.HasPrefix(msg, "could not find expected "):
		return strings.TrimPrefix(msg, "could not find expected ")
	}
	return ""
}

// offsetOf is the byte offset of m in data (go-yaml counts columns in characters; the offset
// is only compared with the end of the file and read for one ASCII byte, so a multi-byte
// character before it on its line errs on the safe side), or -1.
func offsetOf(data []byte, m yamlv4.Mark) int {
	off := 0
	for line := 1; line < m.Line; line++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return -1
		}
		off += i + 1
	}
	return off + m.Column - 1
}

// atEnd reports whether only blanks follow m in data: the file ended where go-yaml gave up.
func atEnd(data []byte, m yamlv4.Mark) bool {
	off := offsetOf(data, m)
	return off >= len(bytes.TrimRight(data, " \t\r\n"))
}

// charAt is the byte at m in data, or 0.
func charAt(data []byte, m yamlv4.Mark) byte {
	if off := offsetOf(data, m); off >= 0 && off < len(data) {
		return data[off]
	}
	return 0
}

// servers takes the mcpServers map out of the file, for mcpconfig to parse.
func (f *yamlFile) servers() (map[string]any, error) {
	raw, ok := f.doc["mcpServers"]
	if !ok {
		return nil, nil
	}
	delete(f.doc, "mcpServers")
	m, ok := raw.(map[string]any)
	if !ok {
		what := "is " + mcpconfig.TypeName(raw)
		if raw == nil {
			what = "has no value"
		}
		return nil, f.keyError("mcpServers", true, fmt.Errorf("mcpServers %s: expected a map of server name to server", what))
	}
	return m, nil
}
