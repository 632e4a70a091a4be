// Package toolname maps tool ids (SERVER.TOOL) to names that every popular model API and MCP
// client accepts, and back. OpenAI and Anthropic both require ^[a-zA-Z0-9_-]{1,64}$ of a
// function or tool name, so a dot (the id's separator) is out: SERVER.TOOL becomes SERVER__TOOL,
// any other character outside the set becomes "_", and a name that would run over 64 characters
// or collide with another gets a suffix made from the id's hash.
//
// The OpenAI-compatible inference backend names the functions it offers this way, and so does
// the api's MCP face in its catalog.
package toolname

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// MaxLen is the longest name OpenAI and Anthropic accept.
const MaxLen = 64

// Rule is the pattern every name matches, as messages state it.
const Rule = `^[a-zA-Z0-9_-]{1,64}$`

var validName = regexp.MustCompile(Rule)

// Valid reports whether name matches Rule: OpenAI's function names and Anthropic's tool names
// both follow it.
func Valid(name string) bool { return validName.MatchString(name) }

// Names maps tool ids to names and back. The mapping is one-to-one: a name that would collide
// with another, or run over MaxLen characters, gets a suffix made from the id's hash. Which of
// two colliding ids keeps the plain name depends on the order they are added in; add them in a
// fixed order (sorted, say) where names must not change from one process to the next.
type Names struct {
	toName map[string]string
	toID   map[string]string
}

// New maps ids in order; repeated ids are mapped once.
func New(ids ...string) *Names {
	n := &Names{toName: make(map[string]string, len(ids)), toID: make(map[string]string, len(ids))}
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
	name := Base(id)
	if len(name) > MaxLen || n.toID[name] != "" {
		name = hashed(name, id, "")
	}
	for i := 2; n.toID[name] != ""; i++ { // a hash collision, or a tool named like a hashed one
		name = hashed(Base(id), id, fmt.Sprint(i))
	}
	n.toName[id], n.toID[name] = name, id
	return name
}

// Name is the name of id ("" when id is not mapped).
func (n *Names) Name(id string) string { return n.toName[id] }

// ID is the tool id of a name, exactly as it was added.
func (n *Names) ID(name string) (string, bool) {
	id, ok := n.toID[name]
	return id, ok
}

// Len is how many ids are mapped.
func (n *Names) Len() int { return len(n.toName) }

// Base is the readable part of a tool's name: "." becomes "__" (SERVER.TOOL → SERVER__TOOL) and
// any other character outside [a-zA-Z0-9_-] becomes "_".
func Base(id string) string {
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
	if len(base) > MaxLen-len(suffix) {
		base = base[:MaxLen-len(suffix)]
	}
	return base + suffix
}
