package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// maxNameLen is the longest function name OpenAI accepts.
const maxNameLen = 64

var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ValidName reports whether name is a function name OpenAI-compatible servers accept
// (^[a-zA-Z0-9_-]{1,64}$).
func ValidName(name string) bool { return validName.MatchString(name) }

// Names maps tool ids (SERVER.TOOL) to function names an OpenAI-compatible server accepts and
// back. The mapping is one-to-one: a name that would collide with another, or run over 64
// characters, gets a suffix made from the id's hash.
type Names struct {
	toName map[string]string
	toID   map[string]string
}

// NewNames maps ids in order; repeated ids are mapped once.
func NewNames(ids ...string) *Names {
	n := &Names{toName: map[string]string{}, toID: map[string]string{}}
	for _, id := range ids {
		n.Add(id)
	}
	return n
}

// Add maps id (if it is not mapped yet) and returns its name.
func (n *Names) Add(id string) string {
	if name, ok := n.toName[id]; ok {
		return name
	}
	name := BaseName(id)
	if len(name) > maxNameLen || n.toID[name] != "" {
		name = hashed(name, id, "")
	}
	for i := 2; n.toID[name] != ""; i++ { // a hash collision, or a tool named like a hashed one
		name = hashed(BaseName(id), id, fmt.Sprint(i))
	}
	n.toName[id], n.toID[name] = name, id
	return name
}

// Name is the function name of id ("" when id is not mapped).
func (n *Names) Name(id string) string { return n.toName[id] }

// ID is the tool id of a function name, exactly as it was added.
func (n *Names) ID(name string) (string, bool) {
	id, ok := n.toID[name]
	return id, ok
}

// BaseName is the readable part of a tool's function name: "." becomes "__" (SERVER.TOOL →
// SERVER__TOOL) and any other character outside [a-zA-Z0-9_-] becomes "_".
func BaseName(id string) string {
	var b strings.Builder
	for _, r := range id {
		switch {
		case r == '.':
			b.WriteString("__")
		case r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "tool"
	}
	return b.String()
}

// hashed is base cut to fit, then "_" and 8 hex digits of the id's SHA-256 (and extra).
func hashed(base, id, extra string) string {
	sum := sha256.Sum256([]byte(id + "\x00" + extra))
	suffix := "_" + hex.EncodeToString(sum[:4])
	if len(base) > maxNameLen-len(suffix) {
		base = base[:maxNameLen-len(suffix)]
	}
	return base + suffix
}
