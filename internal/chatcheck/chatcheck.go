// Package chatcheck holds the bounds and checks of the conversation fields the api and
// inference both take (messages, the caller's functions, generation options), so that both
// refuse the same input with the same INVALID_ARGUMENT naming the same field. How messages hang
// together (a tool message answering a call) is the api's to check: it alone sees a whole turn.
package chatcheck

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/searchbounds"
	"github.com/toolmesh/toolmesh/internal/toolid/toolname"
)

// Bounds of one request. The model sees a few thousand tokens of a conversation at most; these
// keep a request from holding a service's memory and time.
const (
	MaxMessages     = 256
	MaxMessageBytes = 64 << 10
	// MaxHistoryBytes bounds the messages of one request together.
	MaxHistoryBytes  = 512 << 10
	MaxFunctions     = 128
	MaxCallIDBytes   = 128
	MaxFunctionCalls = 64 // calls in one assistant message
	MaxStops         = 4
	MaxStopBytes     = 256
	// MaxAnswerTokens bounds generation.max_tokens.
	MaxAnswerTokens = 1 << 20
)

// The roles of a message, as OpenAI names them.
const (
	RoleSystem    = "system"
	RoleDeveloper = "developer"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

const roleList = "system, developer, user, assistant or tool"

// Messages checks each of msgs on its own (Message) and their number and total size.
func Messages(msgs []*toolmeshv1.Message) error {
	if len(msgs) > MaxMessages {
		return errreason.InvalidField("messages", fmt.Sprintf("has %d messages, more than the %d allowed", len(msgs), MaxMessages))
	}
	total := 0
	for i, m := range msgs {
		n, err := Message(i, m)
		if err != nil {
			return err
		}
		if total += n; total > MaxHistoryBytes {
			return errreason.InvalidField("messages", fmt.Sprintf("hold more than the %d bytes allowed in one request", MaxHistoryBytes))
		}
	}
	return nil
}

// Message checks message i on its own and returns its size in bytes.
func Message(i int, m *toolmeshv1.Message) (int, error) {
	field := func(f string) string { return fmt.Sprintf("messages[%d].%s", i, f) }
	if m == nil {
		return 0, errreason.InvalidField(fmt.Sprintf("messages[%d]", i), "is null")
	}
	switch r := m.GetRole(); r {
	case RoleSystem, RoleDeveloper, RoleUser, RoleAssistant, RoleTool:
	case "":
		return 0, errreason.InvalidField(field("role"), "is required: "+roleList)
	default:
		return 0, errreason.InvalidField(field("role"), fmt.Sprintf("%q is not a role: %s", Cut(r, 32), roleList))
	}
	content := m.GetContent()
	switch {
	case len(content) > MaxMessageBytes:
		return 0, errreason.InvalidField(field("content"), fmt.Sprintf("is %d bytes, more than the %d allowed", len(content), MaxMessageBytes))
	case !utf8.ValidString(content):
		return 0, errreason.InvalidField(field("content"), "is not valid UTF-8")
	case m.GetRole() != RoleAssistant && len(m.GetToolCalls()) > 0:
		return 0, errreason.InvalidField(field("tool_calls"), "are only for an assistant message")
	case m.GetRole() != RoleTool && m.GetToolCallId() != "":
		return 0, errreason.InvalidField(field("tool_call_id"), "is only for a tool message")
	case len(m.GetToolCalls()) > MaxFunctionCalls:
		return 0, errreason.InvalidField(field("tool_calls"), fmt.Sprintf("has %d calls, more than the %d allowed", len(m.GetToolCalls()), MaxFunctionCalls))
	}
	switch m.GetRole() {
	case RoleSystem, RoleDeveloper, RoleUser:
		if strings.TrimSpace(content) == "" {
			return 0, errreason.InvalidField(field("content"), "is required for a "+m.GetRole()+" message")
		}
	case RoleAssistant:
		if strings.TrimSpace(content) == "" && len(m.GetToolCalls()) == 0 {
			return 0, errreason.InvalidField(field("content"), "is required for an assistant message without tool_calls")
		}
	case RoleTool:
		if m.GetToolCallId() == "" {
			return 0, errreason.InvalidField(field("tool_call_id"), "is required for a tool message: it names the call whose result this is")
		}
	}
	size := len(content) + len(m.GetToolCallId())
	ids := map[string]bool{}
	for k, call := range m.GetToolCalls() {
		f := func(s string) string { return field(fmt.Sprintf("tool_calls[%d].%s", k, s)) }
		switch id := call.GetId(); {
		case id == "":
			return 0, errreason.InvalidField(f("id"), "is required: the tool message with the call's result names it")
		case len(id) > MaxCallIDBytes || !utf8.ValidString(id):
			return 0, errreason.InvalidField(f("id"), fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxCallIDBytes))
		case ids[id]:
			return 0, errreason.InvalidField(f("id"), fmt.Sprintf("%q is used twice in one message", id))
		case !toolname.Valid(call.GetToolId()):
			return 0, errreason.InvalidField(f("tool_id"), "must be a function name matching "+toolname.Rule)
		}
		ids[call.GetId()] = true
		size += len(call.GetId()) + len(call.GetToolId()) + structSize(call.GetArguments())
	}
	return size, nil
}

// Functions checks the caller's functions: valid names, each once (a name has no dot, so none
// is a mesh tool's id), bounded descriptions and object schemas.
func Functions(fns []*toolmeshv1.Function) error {
	if len(fns) > MaxFunctions {
		return errreason.InvalidField("functions", fmt.Sprintf("has %d functions, more than the %d allowed", len(fns), MaxFunctions))
	}
	seen := make(map[string]bool, len(fns))
	for i, f := range fns {
		field := func(s string) string { return fmt.Sprintf("functions[%d].%s", i, s) }
		switch {
		case f == nil:
			return errreason.InvalidField(fmt.Sprintf("functions[%d]", i), "is null")
		case !toolname.Valid(f.GetName()):
			return errreason.InvalidField(field("name"), "must match "+toolname.Rule)
		case seen[f.GetName()]:
			return errreason.InvalidField(field("name"), fmt.Sprintf("%q is given twice", f.GetName()))
		case !utf8.ValidString(f.GetDescription()) || len(f.GetDescription()) > searchbounds.MaxQueryBytes:
			return errreason.InvalidField(field("description"), fmt.Sprintf("must be valid UTF-8 of at most %d bytes", searchbounds.MaxQueryBytes))
		}
		seen[f.GetName()] = true
		if t, ok := f.GetParameters().GetFields()["type"]; ok && t.GetStringValue() != "object" {
			return errreason.InvalidField(field("parameters"), `must be a JSON Schema of an object ("type": "object")`)
		}
	}
	return nil
}

// Generation checks the sampling options against OpenAI's ranges.
func Generation(g *toolmeshv1.GenerationOptions) error {
	switch {
	case g == nil:
		return nil
	case g.GetMaxTokens() < 0 || g.GetMaxTokens() > MaxAnswerTokens:
		return errreason.InvalidField("generation.max_tokens", fmt.Sprintf("must be between 1 and %d (0: no bound)", MaxAnswerTokens))
	case g.Temperature != nil && !(g.GetTemperature() >= 0 && g.GetTemperature() <= 2):
		return errreason.InvalidField("generation.temperature", "must be between 0 and 2")
	case g.TopP != nil && !(g.GetTopP() >= 0 && g.GetTopP() <= 1):
		return errreason.InvalidField("generation.top_p", "must be between 0 and 1")
	case len(g.GetStop()) > MaxStops:
		return errreason.InvalidField("generation.stop", fmt.Sprintf("has %d sequences, more than the %d allowed", len(g.GetStop()), MaxStops))
	}
	for i, s := range g.GetStop() {
		if s == "" || len(s) > MaxStopBytes || !utf8.ValidString(s) {
			return errreason.InvalidField(fmt.Sprintf("generation.stop[%d]", i), fmt.Sprintf("must be non-empty valid UTF-8 of at most %d bytes", MaxStopBytes))
		}
	}
	return nil
}

// Cut is s cut to at most n bytes at a character boundary, for quoting it in a message.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// structSize is a Struct's size for the history budget: its JSON length.
func structSize(s *structpb.Struct) int {
	if s == nil {
		return 0
	}
	b, err := s.MarshalJSON()
	if err != nil {
		return 0
	}
	return len(b)
}
