package gorilla

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// conversation reads testdata/conversation.json: instructions, then three turns (calls of a
// caller's function answered out of order; words long enough to be summarized, holding prompt
// markers; a tool message that answers no call and a system message inside a turn).
func conversation(t testing.TB) Conversation {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "conversation.json"))
	if err != nil {
		t.Fatal(err)
	}
	var req toolmeshv1.GenerateRequest
	if err := protojson.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	return NewConversation(req.GetMessages())
}

// questionLine finds the question as a reader of the prompt should: on the line that starts
// with the marker (an earlier turn's words may hold the marker inside a string literal).
var questionLine = regexp.MustCompile(`(?m)^<<question>> ?(.*)$`)

// TestPromptConversationGolden pins how earlier turns are shown (our format; the reference has
// none): whole, with the oldest summarized, with the oldest dropped, with and without tools.
func TestPromptConversationGolden(t *testing.T) {
	conv := conversation(t)
	if conv.Turns() != 3 {
		t.Fatalf("%d turns, want 3", conv.Turns())
	}
	history := []Step{{ToolID: "get_current_weather", Arguments: map[string]any{"location": "Nice, FR"}, Output: "{\"temp\": 24}"}}
	for _, tc := range []struct {
		name    string
		tools   []*toolmeshv1.Tool
		variant int
		history []Step
	}{
		{"conversation", weatherTools(t), 0, nil},
		{"conversation-notools", nil, 0, nil},
		{"conversation-history", weatherTools(t), 0, history},
		{"conversation-summarized", weatherTools(t), 2, nil},
		{"conversation-dropped", weatherTools(t), 5, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const query = "And in Nice?"
			got := mustBuild(t, tc.tools).ConversationPrompt(conv.Variant(tc.variant), query, tc.history)
			checkGolden(t, tc.name+".prompt.golden", got)
			if m := questionLine.FindAllStringSubmatch(got, -1); len(m) != 1 || m[0][1] != query {
				t.Errorf("question lines %q, want one holding %q", m, query)
			}
			if strings.Count(got, "\n### Response: ") != 1 || !strings.HasSuffix(got, "\n### Response: ") {
				t.Errorf("a turn broke the template: %q", got)
			}
		})
	}
}

// TestPromptWithoutConversation: no turns, no instructions is the prompt of old, byte for byte.
func TestPromptWithoutConversation(t *testing.T) {
	for _, tools := range [][]*toolmeshv1.Tool{nil, weatherTools(t), mappedTools(t)} {
		c := mustBuild(t, tools)
		history := []Step{{ToolID: "a.b", Output: "x"}}
		for _, conv := range []Conversation{{}, NewConversation(nil), NewConversation(nil).Variant(3)} {
			if got, want := c.ConversationPrompt(conv, "q", history), c.Prompt("q", history); got != want {
				t.Errorf("ConversationPrompt with no conversation = %q, want Prompt's %q", got, want)
			}
		}
	}
}

// TestConversationVariants: variant k summarizes the oldest min(k, n) turns, then drops the
// oldest k−n; each prompt is no longer than the one before, and the last has no turn left.
func TestConversationVariants(t *testing.T) {
	conv := conversation(t)
	cat := mustBuild(t, weatherTools(t))
	want := []struct{ summarized, dropped int }{{0, 0}, {1, 0}, {2, 0}, {3, 0}, {2, 1}, {1, 2}, {0, 3}}
	if conv.Variants() != len(want) {
		t.Fatalf("%d variants, want %d", conv.Variants(), len(want))
	}
	prev := ""
	for k, w := range want {
		v := conv.Variant(k)
		if v.Summarized() != w.summarized || v.Dropped() != w.dropped || v.Turns() != 3 {
			t.Errorf("variant %d: %d turns, %d summarized, %d dropped; want 3, %d, %d", k, v.Turns(), v.Summarized(), v.Dropped(), w.summarized, w.dropped)
		}
		p := cat.ConversationPrompt(v, "q", nil)
		if k > 0 && len(p) > len(prev) {
			t.Errorf("variant %d is %d bytes, longer than variant %d's %d", k, len(p), k-1, len(prev))
		}
		prev = p
	}
	last := conv.Variant(conv.Variants() - 1)
	p := cat.ConversationPrompt(last, "q", nil)
	if strings.Contains(p, "<<user>>") || strings.Contains(p, "<<assistant>>") || !strings.Contains(p, "<<system>>'You are terse.") {
		t.Errorf("with every turn dropped the prompt still shows a turn, or lost the instructions: %q", p)
	}
	if v := conv.Variant(-1); v.Summarized() != 0 || v.Dropped() != 0 {
		t.Errorf("variant -1 is not clamped to 0")
	}
	if v := conv.Variant(99); v.Dropped() != 3 {
		t.Errorf("variant 99 is not clamped to every turn dropped")
	}
}

// TestConversationTurns: where turns start and what belongs to the instructions.
func TestConversationTurns(t *testing.T) {
	msg := func(role, content string) *toolmeshv1.Message {
		return &toolmeshv1.Message{Role: role, Content: content}
	}
	for _, tc := range []struct {
		name  string
		msgs  []*toolmeshv1.Message
		turns int
		shown []string // the conversation's lines, in order
	}{
		{"none", nil, 0, nil},
		{"instructions only", []*toolmeshv1.Message{msg("system", "s"), msg("developer", "d")}, 0,
			[]string{"<<system>>'s'", "<<system>>'d'"}},
		{"a greeting before the first question", []*toolmeshv1.Message{msg("system", "s"), msg("assistant", "Hi!"), msg("user", "u"), msg("assistant", "a")}, 2,
			[]string{"<<system>>'s'", "<<assistant>>'Hi!'", "<<user>>'u'", "<<assistant>>'a'"}},
		{"two user messages in a row", []*toolmeshv1.Message{msg("user", "1"), msg("user", "2")}, 2,
			[]string{"<<user>>'1'", "<<user>>'2'"}},
		{"a late system message stays in its turn", []*toolmeshv1.Message{msg("user", "u"), msg("system", "late")}, 1,
			[]string{"<<user>>'u'", "<<system>>'late'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conv := NewConversation(tc.msgs)
			if conv.Turns() != tc.turns {
				t.Errorf("%d turns, want %d", conv.Turns(), tc.turns)
			}
			got := string(mustBuild(t, nil).appendConversation(nil, conv))
			if want := strings.Join(append(tc.shown, ""), "\n"); got != want {
				t.Errorf("shown as %q, want %q", got, want)
			}
		})
	}
}
