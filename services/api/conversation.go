package api

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/chatcheck"
	"github.com/toolmesh/toolmesh/internal/errreason"
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
	if err := chatcheck.Messages(messages); err != nil {
		return c, err
	}
	last := -1 // the last user message
	for i, m := range messages {
		if m.GetRole() == chatcheck.RoleUser {
			last = i
		}
	}
	if err := checkToolMessages(messages); err != nil {
		return c, err
	}
	if query != "" {
		if n := len(messages); n > 0 && messages[n-1].GetRole() == chatcheck.RoleTool {
			// The model has not yet seen the results it asked for: a new question would start
			// a turn on top of an unfinished one.
			return c, errreason.InvalidField("query", "must be empty when messages end with the results of function calls: the turn goes on with them")
		}
		c.question, c.questionField, c.earlier = query, "query", messages
		return c, nil
	}
	if last < 0 {
		if len(messages) == 0 {
			return c, errreason.InvalidField("query", "is required")
		}
		return c, errreason.InvalidField("messages", "needs a user message (the question)")
	}
	c.question, c.questionField, c.earlier = messages[last].GetContent(), fmt.Sprintf("messages[%d].content", last), messages[:last]
	after := messages[last+1:]
	for j := 0; j < len(after); {
		m := after[j]
		i := last + 1 + j
		if m.GetRole() != chatcheck.RoleAssistant || len(m.GetToolCalls()) == 0 {
			return c, errreason.InvalidField(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf(
				"a %s message after the last user message: a conversation ends with the user's message, or with an assistant's function calls and the tool messages of their results", describeRole(m)))
		}
		results := map[string]string{}
		j++
		for ; j < len(after) && after[j].GetRole() == chatcheck.RoleTool; j++ {
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
	if m.GetRole() == chatcheck.RoleAssistant {
		return "plain assistant"
	}
	return m.GetRole()
}

// checkToolMessages checks that every tool message answers a call of the assistant message
// before it, once, and that every such call is answered before the conversation goes on, as
// OpenAI requires.
func checkToolMessages(messages []*toolmeshv1.Message) error {
	var open map[string]bool // calls of the last assistant message not answered yet
	openAt := -1
	for i, m := range messages {
		if m.GetRole() == chatcheck.RoleTool {
			id := m.GetToolCallId()
			if !open[id] {
				if openAt < 0 {
					return errreason.InvalidField(fmt.Sprintf("messages[%d].tool_call_id", i), fmt.Sprintf(
						"%q answers no call: a tool message follows the assistant message whose tool_calls name it", chatcheck.Cut(id, chatcheck.MaxCallIDBytes)))
				}
				return errreason.InvalidField(fmt.Sprintf("messages[%d].tool_call_id", i), fmt.Sprintf(
					"%q is not a call of messages[%d] still waiting for its result", chatcheck.Cut(id, chatcheck.MaxCallIDBytes), openAt))
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
	return errreason.InvalidField(fmt.Sprintf("messages[%d].tool_calls", at), fmt.Sprintf(
		"an assistant message with tool_calls must be followed by a tool message for each call; none answers %s", strings.Join(ids, ", ")))
}
