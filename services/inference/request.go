package inference

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/invalid"
	"github.com/toolmesh/toolmesh/internal/toolid"
	"github.com/toolmesh/toolmesh/internal/toolname"
)

// Bounds of a request's conversation, functions and sampling options (the contract's).
const (
	maxMessages     = 256
	maxMessageBytes = 64 << 10
	maxFunctions    = 128
	maxStops        = 4
	maxStopBytes    = 256
)

// checkQuery checks the question both RPCs take.
func checkQuery(q string) error {
	switch {
	case q == "":
		return invalid.Field("query", "is required")
	case len(q) > toolid.MaxQueryBytes:
		return invalid.Field("query", fmt.Sprintf("is %d bytes, more than the %d allowed", len(q), toolid.MaxQueryBytes))
	case !utf8.ValidString(q):
		return invalid.Field("query", "is not valid UTF-8")
	}
	return nil
}

// checkMessages checks the conversation's earlier turns: known roles, bounded valid text. How
// the turns hang together (a tool message answering a call) is the caller's business: the
// prompt shows what it is given.
func checkMessages(msgs []*toolmeshv1.Message) error {
	if len(msgs) > maxMessages {
		return invalid.Field("messages", fmt.Sprintf("has %d messages, more than the %d allowed", len(msgs), maxMessages))
	}
	for i, m := range msgs {
		field := fmt.Sprintf("messages[%d]", i)
		switch m.GetRole() {
		case "system", "developer", "user", "assistant", "tool":
		case "":
			return invalid.Field(field+".role", "is required")
		default:
			return invalid.Field(field+".role", fmt.Sprintf("%q is not system, developer, user, assistant or tool", cut(m.GetRole(), 32)))
		}
		switch c := m.GetContent(); {
		case len(c) > maxMessageBytes:
			return invalid.Field(field+".content", fmt.Sprintf("is %d bytes, more than the %d allowed", len(c), maxMessageBytes))
		case !utf8.ValidString(c):
			return invalid.Field(field+".content", "is not valid UTF-8")
		}
		if len(m.GetToolCalls()) > 0 && m.GetRole() != "assistant" {
			return invalid.Field(field+".tool_calls", "only an assistant message calls functions")
		}
		for j, c := range m.GetToolCalls() {
			if !toolname.Valid(c.GetToolId()) {
				return invalid.Field(fmt.Sprintf("%s.tool_calls[%d].tool_id", field, j), "must be a function name matching "+toolname.Rule)
			}
		}
	}
	return nil
}

// checkFunctions checks the caller's functions: valid names (which have no dot, so none is a
// mesh tool's id), each once.
func checkFunctions(fns []*toolmeshv1.Function) error {
	if len(fns) > maxFunctions {
		return invalid.Field("functions", fmt.Sprintf("has %d functions, more than the %d allowed", len(fns), maxFunctions))
	}
	seen := make(map[string]bool, len(fns))
	for i, f := range fns {
		field := fmt.Sprintf("functions[%d].name", i)
		switch {
		case !toolname.Valid(f.GetName()):
			return invalid.Field(field, "must match "+toolname.Rule)
		case seen[f.GetName()]:
			return invalid.Field(field, fmt.Sprintf("%q is given twice", f.GetName()))
		}
		seen[f.GetName()] = true
	}
	return nil
}

// checkGeneration checks the sampling options against OpenAI's ranges.
func checkGeneration(g *toolmeshv1.GenerationOptions) error {
	switch {
	case g == nil:
		return nil
	case g.GetMaxTokens() < 0:
		return invalid.Field("generation.max_tokens", "must not be negative")
	case g.Temperature != nil && !(g.GetTemperature() >= 0 && g.GetTemperature() <= 2):
		return invalid.Field("generation.temperature", "must be between 0 and 2")
	case g.TopP != nil && !(g.GetTopP() >= 0 && g.GetTopP() <= 1):
		return invalid.Field("generation.top_p", "must be between 0 and 1")
	case len(g.GetStop()) > maxStops:
		return invalid.Field("generation.stop", fmt.Sprintf("has %d strings, more than the %d allowed", len(g.GetStop()), maxStops))
	}
	for i, s := range g.GetStop() {
		if s == "" || len(s) > maxStopBytes || !utf8.ValidString(s) {
			return invalid.Field(fmt.Sprintf("generation.stop[%d]", i), fmt.Sprintf("must be non-empty valid UTF-8 of at most %d bytes", maxStopBytes))
		}
	}
	return nil
}

// cut is s cut to at most n bytes at a character boundary, for quoting it in a message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// functionTools are the caller's functions as tools whose id is the function's name. The hash
// is the function's definition, so the catalog cache serves them as it serves mesh tools.
func functionTools(fns []*toolmeshv1.Function) []*toolmeshv1.Tool {
	out := make([]*toolmeshv1.Tool, 0, len(fns))
	for _, f := range fns {
		def, _ := proto.MarshalOptions{Deterministic: true}.Marshal(f)
		sum := sha256.Sum256(def)
		out = append(out, &toolmeshv1.Tool{Id: f.GetName(), Name: f.GetName(), Description: f.GetDescription(),
			InputSchema: f.GetParameters(), Hash: "function:" + hex.EncodeToString(sum[:])})
	}
	return out
}

// bound is the tighter of two token bounds, 0 meaning none.
func bound(a, b int) int {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
