package api

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/invalid"
	"github.com/toolmesh/toolmesh/internal/toolid"
	"github.com/toolmesh/toolmesh/internal/toolname"
)

// Bounds on a conversation: the model sees a few thousand tokens of it at most, so these only
// keep one request from holding the api's memory and the inference service's time.
const (
	maxMessages       = 256
	maxMessageBytes   = 64 << 10
	maxHistoryBytes   = 512 << 10
	maxFunctions      = 128
	maxCallIDBytes    = 128
	maxFunctionCalls  = 64 // calls in one assistant message
	maxStopSequences  = 4
	maxStopBytes      = 256
	maxAnswerMaxToken = 1 << 20
)

// Roles a message may have, as OpenAI names them.
const (
	roleSystem    = "system"
	roleDeveloper = "developer"
	roleUser      = "user"
	roleAssistant = "assistant"
	roleTool      = "tool"
)

// conversation is a checked request's dialogue: the question of this turn, the turns before
// it, and the calls of the caller's functions this turn has already made, with their results.
type conversation struct {
	question string
	// questionField names the question in messages ("query" or "messages[N].content").
	questionField string
	earlier       []*toolmeshv1.Message
	// rounds are this turn's earlier rounds of function calls: the assistant's calls, each
	// with the caller's result, one round per assistant message after the question.
	rounds [][]*toolmeshv1.ToolCallRecord
}

// splitConversation checks messages (plus query, the user's new message, when set) and splits
// them at the last user message: before it the earlier turns, after it the rounds of function
// calls the caller has run for this turn. Every error names the message and field.
func splitConversation(query string, messages []*toolmeshv1.Message) (conversation, error) {
	var c conversation
	if len(messages) > maxMessages {
		return c, invalid.Field("messages", fmt.Sprintf("has %d messages, more than the %d allowed", len(messages), maxMessages))
	}
	total := len(query)
	last := -1 // the last user message
	for i, m := range messages {
		if m == nil {
			return c, invalid.Field(fmt.Sprintf("messages[%d]", i), "is null")
		}
		n, err := checkMessage(i, m)
		if err != nil {
			return c, err
		}
		if total += n; total > maxHistoryBytes {
			return c, invalid.Field("messages", fmt.Sprintf("hold more than the %d bytes allowed in one request", maxHistoryBytes))
		}
		if m.GetRole() == roleUser {
			last = i
		}
	}
	if err := checkToolMessages(messages); err != nil {
		return c, err
	}
	if query != "" {
		if n := len(messages); n > 0 && messages[n-1].GetRole() == roleTool {
			// The model has not yet seen the results it asked for: a new question would start
			// a turn on top of an unfinished one.
			return c, invalid.Field("query", "must be empty when messages end with the results of function calls: the turn goes on with them")
		}
		c.question, c.questionField, c.earlier = query, "query", messages
		return c, nil
	}
	if last < 0 {
		if len(messages) == 0 {
			return c, invalid.Field("query", "is required")
		}
		return c, invalid.Field("messages", "needs a user message (the question)")
	}
	c.question, c.questionField, c.earlier = messages[last].GetContent(), fmt.Sprintf("messages[%d].content", last), messages[:last]
	after := messages[last+1:]
	for j := 0; j < len(after); {
		m := after[j]
		i := last + 1 + j
		if m.GetRole() != roleAssistant || len(m.GetToolCalls()) == 0 {
			return c, invalid.Field(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf(
				"a %s message after the last user message: a conversation ends with the user's message, or with an assistant's function calls and the tool messages of their results", describeRole(m)))
		}
		results := map[string]string{}
		j++
		for ; j < len(after) && after[j].GetRole() == roleTool; j++ {
			results[after[j].GetToolCallId()] = after[j].GetContent()
		}
		round := make([]*toolmeshv1.ToolCallRecord, len(m.GetToolCalls()))
		for k, call := range m.GetToolCalls() {
			round[k] = &toolmeshv1.ToolCallRecord{Tool: call.GetToolId(), Arguments: call.GetArguments(),
				CallId: call.GetId(), Output: results[call.GetId()]}
		}
		c.rounds = append(c.rounds, round)
	}
	return c, nil
}

func describeRole(m *toolmeshv1.Message) string {
	if m.GetRole() == roleAssistant {
		return "plain assistant"
	}
	return m.GetRole()
}

// checkMessage checks one message on its own and returns its size in bytes.
func checkMessage(i int, m *toolmeshv1.Message) (int, error) {
	field := func(f string) string { return fmt.Sprintf("messages[%d].%s", i, f) }
	content := m.GetContent()
	switch {
	case len(content) > maxMessageBytes:
		return 0, invalid.Field(field("content"), fmt.Sprintf("is %d bytes, more than the %d allowed", len(content), maxMessageBytes))
	case !utf8.ValidString(content):
		return 0, invalid.Field(field("content"), "is not valid UTF-8")
	}
	size := len(content)
	switch m.GetRole() {
	case roleSystem, roleDeveloper, roleUser:
		if strings.TrimSpace(content) == "" {
			return 0, invalid.Field(field("content"), "is required for a "+m.GetRole()+" message")
		}
	case roleAssistant:
		if strings.TrimSpace(content) == "" && len(m.GetToolCalls()) == 0 {
			return 0, invalid.Field(field("content"), "is required for an assistant message without tool_calls")
		}
	case roleTool:
		if m.GetToolCallId() == "" {
			return 0, invalid.Field(field("tool_call_id"), "is required for a tool message: it names the call whose result this is")
		}
	case "":
		return 0, invalid.Field(field("role"), "is required: system, developer, user, assistant or tool")
	default:
		return 0, invalid.Field(field("role"), fmt.Sprintf("%q is not a role: system, developer, user, assistant or tool", truncateUTF8(m.GetRole(), 32)))
	}
	if m.GetRole() != roleTool && m.GetToolCallId() != "" {
		return 0, invalid.Field(field("tool_call_id"), "is only for a tool message")
	}
	if m.GetRole() != roleAssistant && len(m.GetToolCalls()) > 0 {
		return 0, invalid.Field(field("tool_calls"), "are only for an assistant message")
	}
	if len(m.GetToolCalls()) > maxFunctionCalls {
		return 0, invalid.Field(field("tool_calls"), fmt.Sprintf("has %d calls, more than the %d allowed", len(m.GetToolCalls()), maxFunctionCalls))
	}
	ids := map[string]bool{}
	for k, call := range m.GetToolCalls() {
		f := func(s string) string { return field(fmt.Sprintf("tool_calls[%d].%s", k, s)) }
		switch id := call.GetId(); {
		case id == "":
			return 0, invalid.Field(f("id"), "is required: the tool message with the call's result names it")
		case len(id) > maxCallIDBytes || !utf8.ValidString(id):
			return 0, invalid.Field(f("id"), fmt.Sprintf("must be valid UTF-8 of at most %d bytes", maxCallIDBytes))
		case ids[id]:
			return 0, invalid.Field(f("id"), fmt.Sprintf("%q is used twice in one message", id))
		}
		ids[call.GetId()] = true
		if !toolname.Valid(call.GetToolId()) {
			return 0, invalid.Field(f("name"), "must match "+toolname.Rule)
		}
		size += len(call.GetId()) + len(call.GetToolId()) + structSize(call.GetArguments())
	}
	return size + len(m.GetToolCallId()), nil
}

// checkToolMessages checks that every tool message answers a call of the assistant message
// before it, once, and that every such call is answered before the conversation goes on, as
// OpenAI requires.
func checkToolMessages(messages []*toolmeshv1.Message) error {
	var open map[string]bool // calls of the last assistant message not answered yet
	openAt := -1
	for i, m := range messages {
		if m.GetRole() == roleTool {
			id := m.GetToolCallId()
			if !open[id] {
				if openAt < 0 {
					return invalid.Field(fmt.Sprintf("messages[%d].tool_call_id", i), fmt.Sprintf(
						"%q answers no call: a tool message follows the assistant message whose tool_calls name it", truncateUTF8(id, maxCallIDBytes)))
				}
				return invalid.Field(fmt.Sprintf("messages[%d].tool_call_id", i), fmt.Sprintf(
					"%q is not a call of messages[%d] still waiting for its result", truncateUTF8(id, maxCallIDBytes), openAt))
			}
			delete(open, id)
			continue
		}
		if len(open) > 0 {
			return unanswered(openAt, open)
		}
		open, openAt = nil, -1
		if len(m.GetToolCalls()) > 0 {
			open, openAt = map[string]bool{}, i
			for _, c := range m.GetToolCalls() {
				open[c.GetId()] = true
			}
		}
	}
	if len(open) > 0 {
		return unanswered(openAt, open)
	}
	return nil
}

func unanswered(at int, open map[string]bool) error {
	var ids []string
	for _, c := range slices.Sorted(maps.Keys(open)) {
		ids = append(ids, fmt.Sprintf("%q", c))
	}
	return invalid.Field(fmt.Sprintf("messages[%d].tool_calls", at), fmt.Sprintf(
		"an assistant message with tool_calls must be followed by a tool message for each call; none answers %s", strings.Join(ids, ", ")))
}

// checkFunctions checks the caller's functions: valid, distinct names and object schemas.
func checkFunctions(fns []*toolmeshv1.Function) error {
	if len(fns) > maxFunctions {
		return invalid.Field("functions", fmt.Sprintf("has %d functions, more than the %d allowed", len(fns), maxFunctions))
	}
	seen := map[string]bool{}
	for i, f := range fns {
		field := func(s string) string { return fmt.Sprintf("functions[%d].%s", i, s) }
		switch {
		case f == nil:
			return invalid.Field(fmt.Sprintf("functions[%d]", i), "is null")
		case !toolname.Valid(f.GetName()):
			return invalid.Field(field("name"), "must match "+toolname.Rule)
		case seen[f.GetName()]:
			return invalid.Field(field("name"), fmt.Sprintf("%q is given twice", f.GetName()))
		case !utf8.ValidString(f.GetDescription()) || len(f.GetDescription()) > toolid.MaxQueryBytes:
			return invalid.Field(field("description"), fmt.Sprintf("must be valid UTF-8 of at most %d bytes", toolid.MaxQueryBytes))
		}
		seen[f.GetName()] = true
		if p := f.GetParameters(); p != nil {
			if t, ok := p.GetFields()["type"]; ok && t.GetStringValue() != "object" {
				return invalid.Field(field("parameters"), `must be a JSON Schema of an object ("type": "object")`)
			}
		}
	}
	return nil
}

// checkGeneration checks the sampling options against OpenAI's ranges.
func checkGeneration(g *toolmeshv1.GenerationOptions) error {
	if g == nil {
		return nil
	}
	switch {
	case g.GetMaxTokens() < 0 || g.GetMaxTokens() > maxAnswerMaxToken:
		return invalid.Field("generation.max_tokens", fmt.Sprintf("must be between 1 and %d", maxAnswerMaxToken))
	case g.Temperature != nil && !(g.GetTemperature() >= 0 && g.GetTemperature() <= 2):
		return invalid.Field("generation.temperature", "must be between 0 and 2")
	case g.TopP != nil && !(g.GetTopP() >= 0 && g.GetTopP() <= 1):
		return invalid.Field("generation.top_p", "must be between 0 and 1")
	case len(g.GetStop()) > maxStopSequences:
		return invalid.Field("generation.stop", fmt.Sprintf("has %d sequences, more than the %d allowed", len(g.GetStop()), maxStopSequences))
	}
	for i, s := range g.GetStop() {
		if s == "" || len(s) > maxStopBytes || !utf8.ValidString(s) {
			return invalid.Field(fmt.Sprintf("generation.stop[%d]", i), fmt.Sprintf("must be non-empty valid UTF-8 of at most %d bytes", maxStopBytes))
		}
	}
	return nil
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
