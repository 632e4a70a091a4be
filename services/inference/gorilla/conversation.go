package gorilla

import (
	"strconv"
	"unicode/utf8"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// SummaryBytes is how much of a summarized turn's words the prompt keeps: each user, assistant
// and system text of the turn is cut to this many bytes.
const SummaryBytes = 200

// Conversation is the earlier turns of a conversation as the prompt shows them: the caller's
// leading instructions, always whole, then the turns, oldest first, some of the oldest maybe
// summarized or left out (Variant). The zero value is no conversation. It is immutable.
type Conversation struct {
	instructions []string
	turns        [][]line
	summarized   int // the oldest turns shown summarized, after the dropped ones
	dropped      int // the oldest turns left out
}

// line is one line of an earlier turn.
type line struct {
	kind lineKind
	text string // the words, or a tool message's content
	call Step   // for lineCall: the call; its Output is not used
}

type lineKind int

const (
	lineSystem lineKind = iota
	lineUser
	lineAssistant
	lineCall
	lineOutput
)

// NewConversation reads a conversation's earlier turns (OpenAI's messages, oldest first). The
// leading "system" and "developer" messages are the caller's instructions; the rest is cut into
// turns, each starting at a "user" message (messages before the first user message that follows
// the instructions form a turn of their own). An assistant's calls are shown each followed by
// the output of the "tool" message that answers it (by tool_call_id); a tool message that
// answers no call of its turn is shown where it stands. Roles are not checked here: "developer"
// is shown as "system", anything unknown as "user".
func NewConversation(msgs []*toolmeshv1.Message) Conversation {
	var c Conversation
	i := 0
	for ; i < len(msgs); i++ {
		if r := msgs[i].GetRole(); r != "system" && r != "developer" {
			break
		}
		c.instructions = append(c.instructions, msgs[i].GetContent())
	}
	var turn []*toolmeshv1.Message
	for _, m := range msgs[i:] {
		if m.GetRole() == "user" && len(turn) > 0 {
			c.turns = append(c.turns, turnLines(turn))
			turn = nil
		}
		turn = append(turn, m)
	}
	if len(turn) > 0 {
		c.turns = append(c.turns, turnLines(turn))
	}
	return c
}

// turnLines lays out one turn's messages, each call next to its output.
func turnLines(msgs []*toolmeshv1.Message) []line {
	answers := map[string]int{} // tool_call_id -> the first tool message answering it
	for i, m := range msgs {
		if id := m.GetToolCallId(); m.GetRole() == "tool" && id != "" {
			if _, seen := answers[id]; !seen {
				answers[id] = i
			}
		}
	}
	shown := make([]bool, len(msgs))
	var out []line
	for i, m := range msgs {
		switch m.GetRole() {
		case "system", "developer":
			out = append(out, line{kind: lineSystem, text: m.GetContent()})
		case "assistant":
			if m.GetContent() != "" || len(m.GetToolCalls()) == 0 {
				out = append(out, line{kind: lineAssistant, text: m.GetContent()})
			}
			for _, fc := range m.GetToolCalls() {
				var args map[string]any
				if fc.GetArguments() != nil {
					args = fc.GetArguments().AsMap()
				}
				out = append(out, line{kind: lineCall, call: Step{ToolID: fc.GetToolId(), Arguments: args}})
				if j, ok := answers[fc.GetId()]; ok && fc.GetId() != "" && j > i && !shown[j] {
					shown[j] = true
					out = append(out, line{kind: lineOutput, text: msgs[j].GetContent()})
				}
			}
		case "tool":
			if !shown[i] {
				shown[i] = true
				out = append(out, line{kind: lineOutput, text: m.GetContent()})
			}
		default:
			out = append(out, line{kind: lineUser, text: m.GetContent()})
		}
	}
	return out
}

// Turns is how many earlier turns the conversation has (instructions are not a turn).
func (c Conversation) Turns() int { return len(c.turns) }

// Summarized and Dropped say how many of the oldest turns this variant shows summarized and
// leaves out.
func (c Conversation) Summarized() int { return c.summarized }
func (c Conversation) Dropped() int    { return c.dropped }

// Variants is how many ways Variant shows the conversation: 2×Turns()+1.
func (c Conversation) Variants() int { return 2*len(c.turns) + 1 }

// Variant is the conversation shown the k-th way (0 ≤ k < Variants(), clamped): k ≤ Turns()
// summarizes the oldest k turns; beyond that the oldest k−Turns() turns are left out as well,
// the rest staying summarized. Each variant's prompt is no longer than the one before, so the
// first that fits a context can be found by bisection. A summarized turn keeps its words cut to
// SummaryBytes each and its calls without their outputs.
func (c Conversation) Variant(k int) Conversation {
	n := len(c.turns)
	k = max(0, min(k, 2*n))
	c.dropped = max(0, k-n)
	c.summarized = min(k, n) - c.dropped
	return c
}

// appendConversation writes the instructions and the shown turns, each line followed by "\n".
func (c *Catalog) appendConversation(b []byte, conv Conversation) []byte {
	for _, s := range conv.instructions {
		b = append(b, "<<system>>"...)
		b = appendPyString(b, s)
		b = append(b, '\n')
	}
	for t := conv.dropped; t < len(conv.turns); t++ {
		summary := t < conv.dropped+conv.summarized
		for _, l := range conv.turns[t] {
			text := l.text
			if summary {
				text = shorten(text, SummaryBytes)
			}
			switch l.kind {
			case lineSystem:
				b = append(b, "<<system>>"...)
			case lineUser:
				b = append(b, "<<user>>"...)
			case lineAssistant:
				b = append(b, "<<assistant>>"...)
			case lineCall:
				b = append(b, "<<call>>"...)
				b = append(c.appendCallOrName(b, l.call), '\n')
				continue
			case lineOutput:
				if summary {
					continue
				}
				b = append(b, "<<output>>"...)
				text = cutText(l.text, c.opts.MaxOutputBytes)
			}
			b = append(appendPyString(b, text), '\n')
		}
	}
	return b
}

// appendCallOrName writes a call as the model would write it, or its name with "(...)" when an
// argument has no Python literal (NaN, say).
func (c *Catalog) appendCallOrName(b []byte, s Step) []byte {
	start := len(b)
	nb, err := c.appendCall(b, s.ToolID, s.Arguments)
	if err == nil {
		return nb
	}
	name := dottedName(s.ToolID)
	if f := c.byID[s.ToolID]; f != nil {
		name = f.name
	}
	return append(append(b[:start], name...), "(...)"...)
}

// shorten is cutText, but s itself when the cut text would be no shorter: a summary never
// makes a turn longer.
func shorten(s string, max int) string {
	if out := cutText(s, max); len(out) < len(s) {
		return out
	}
	return s
}

// cutText cuts s to at most max bytes at a character boundary and says how much was cut; it
// returns s when max is 0 or s is no longer.
func cutText(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[" + strconv.Itoa(len(s)-cut) + " more bytes]"
}
