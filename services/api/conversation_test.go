package api

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/chatcheck"
	"github.com/toolmesh/toolmesh/internal/errreason"
)

func msg(role, content string) *toolmeshv1.Message {
	return &toolmeshv1.Message{Role: role, Content: content}
}

func calls(ids ...string) *toolmeshv1.Message {
	m := &toolmeshv1.Message{Role: chatcheck.RoleAssistant}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, &toolmeshv1.FunctionCall{Id: id, ToolId: "get_weather",
			Arguments: &structpb.Struct{Fields: map[string]*structpb.Value{"city": structpb.NewStringValue("Paris")}}})
	}
	return m
}

func result(id, content string) *toolmeshv1.Message {
	return &toolmeshv1.Message{Role: chatcheck.RoleTool, ToolCallId: id, Content: content}
}

// fieldOf is the field an INVALID_ARGUMENT names.
func fieldOf(t *testing.T, err error) string {
	t.Helper()
	f, ok := errreason.FieldOf(err)
	if !ok {
		t.Fatalf("%v names no field", err)
	}
	return f
}

func TestSplitConversation(t *testing.T) {
	earlier := []*toolmeshv1.Message{msg(chatcheck.RoleSystem, "Be brief."), msg(chatcheck.RoleUser, "Weather in London?"), msg(chatcheck.RoleAssistant, "12 degrees.")}
	t.Run("query after the messages", func(t *testing.T) {
		c, err := splitConversation("And in Paris?", earlier)
		if err != nil {
			t.Fatal(err)
		}
		if c.question != "And in Paris?" || c.questionField != "query" || len(c.earlier) != 3 || len(c.rounds) != 0 {
			t.Errorf("%+v", c)
		}
	})
	t.Run("question is the last user message", func(t *testing.T) {
		c, err := splitConversation("", append(earlier, msg(chatcheck.RoleUser, "And in Paris?")))
		if err != nil {
			t.Fatal(err)
		}
		if c.question != "And in Paris?" || c.questionField != "messages[3].content" || len(c.earlier) != 3 {
			t.Errorf("%+v", c)
		}
	})
	t.Run("the turn goes on with the caller's results", func(t *testing.T) {
		msgs := append(earlier, msg(chatcheck.RoleUser, "And in Paris and Rome?"), calls("c1", "c2"), result("c2", "sunny"), result("c1", "rain"),
			calls("c3"), result("c3", "windy"))
		c, err := splitConversation("", msgs)
		if err != nil {
			t.Fatal(err)
		}
		if c.question != "And in Paris and Rome?" || len(c.earlier) != 3 || len(c.rounds) != 2 {
			t.Fatalf("%+v", c)
		}
		r := c.rounds[0]
		if len(r) != 2 || r[0].GetCallId() != "c1" || r[0].GetOutput() != "rain" || r[1].GetOutput() != "sunny" || r[0].GetTool() != "get_weather" ||
			r[0].GetArguments().GetFields()["city"].GetStringValue() != "Paris" || c.rounds[1][0].GetOutput() != "windy" {
			t.Errorf("rounds %v", c.rounds)
		}
	})

	bad := []struct {
		name  string
		query string
		msgs  []*toolmeshv1.Message
		field string
		says  string
	}{
		{"nothing", "", nil, "query", "required"},
		{"no user message", "", []*toolmeshv1.Message{msg(chatcheck.RoleSystem, "hi")}, "messages", "user message"},
		{"unknown role", "", []*toolmeshv1.Message{msg("robot", "hi")}, "messages[0].role", "not a role"},
		{"no role", "", []*toolmeshv1.Message{msg("", "hi")}, "messages[0].role", "required"},
		{"empty user", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, " ")}, "messages[0].content", "required"},
		{"empty assistant", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), msg(chatcheck.RoleAssistant, ""), msg(chatcheck.RoleUser, "b")}, "messages[1].content", "required"},
		{"tool without id", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), calls("c1"), {Role: chatcheck.RoleTool, Content: "x"}}, "messages[2].tool_call_id", "required"},
		{"tool answering nothing", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), result("c9", "x")}, "messages[1].tool_call_id", "answers no call"},
		{"tool answering another call", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), calls("c1"), result("c2", "x")}, "messages[2].tool_call_id", "still waiting"},
		{"tool answering twice", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), calls("c1"), result("c1", "x"), result("c1", "y")}, "messages[3].tool_call_id", "still waiting"},
		{"call left unanswered", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), calls("c1", "c2"), result("c1", "x"), msg(chatcheck.RoleUser, "b")}, "messages[1].tool_calls", `"c2"`},
		{"ends with open calls", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), calls("c1")}, "messages[1].tool_calls", `"c1"`},
		{"ends with the assistant", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), msg(chatcheck.RoleAssistant, "b")}, "messages[1].role", "ends with the user's message"},
		{"query after results", "next", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), calls("c1"), result("c1", "x")}, "query", "turn goes on"},
		{"duplicate call ids", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), calls("c1", "c1")}, "messages[1].tool_calls[1].id", "twice"},
		{"bad function name", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "a"), {Role: chatcheck.RoleAssistant, ToolCalls: []*toolmeshv1.FunctionCall{{Id: "c", ToolId: "calc.add"}}}},
			"messages[1].tool_calls[0].tool_id", "function name matching"},
		{"tool_calls on a user message", "", []*toolmeshv1.Message{{Role: chatcheck.RoleUser, Content: "a", ToolCalls: calls("c").GetToolCalls()}}, "messages[0].tool_calls", "only for an assistant"},
		{"message too long", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, strings.Repeat("x", chatcheck.MaxMessageBytes+1))}, "messages[0].content", "more than"},
		{"not UTF-8", "", []*toolmeshv1.Message{msg(chatcheck.RoleUser, "\xff")}, "messages[0].content", "UTF-8"},
		{"too many messages", "", make([]*toolmeshv1.Message, chatcheck.MaxMessages+1), "messages", "more than"},
		{"history too large", "", func() []*toolmeshv1.Message {
			var out []*toolmeshv1.Message
			for range chatcheck.MaxHistoryBytes/chatcheck.MaxMessageBytes + 1 {
				out = append(out, msg(chatcheck.RoleUser, strings.Repeat("x", chatcheck.MaxMessageBytes)))
			}
			return out
		}(), "messages", "bytes allowed"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := splitConversation(tc.query, tc.msgs)
			if err == nil {
				t.Fatal("accepted")
			}
			if f := fieldOf(t, err); f != tc.field || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("field %q (%v), want %q saying %q", f, err, tc.field, tc.says)
			}
		})
	}
}

func TestTurnMemory(t *testing.T) {
	m := newTurnMemory()
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	mesh := []*toolmeshv1.ToolCallRecord{
		{Tool: "geo.capital", Output: "Paris", Step: 1, Index: 0},
		{Tool: "geo.population", Output: "2M", Step: 2, Index: 1},
		{Tool: "geo.area", Output: "105 km2", Step: 2, Index: 2},
	}
	m.remember("alice", "call_1", 2, mesh)
	round := func(ids ...string) []*toolmeshv1.ToolCallRecord {
		var out []*toolmeshv1.ToolCallRecord
		for _, id := range ids {
			out = append(out, &toolmeshv1.ToolCallRecord{Tool: "get_weather", CallId: id, Output: "sunny"})
		}
		return out
	}
	steps := func(recs []*toolmeshv1.ToolCallRecord) (tools []string, st []int32) {
		for _, r := range recs {
			tools, st = append(tools, r.GetTool()), append(st, r.GetStep())
		}
		return tools, st
	}

	got := m.turnHistory("alice", [][]*toolmeshv1.ToolCallRecord{round("call_1", "call_2")})
	tools, st := steps(got)
	// Step 1's call alone, step 2's mesh calls with the functions the model called beside them.
	if strings.Join(tools, ",") != "geo.capital,geo.population,geo.area,get_weather,get_weather" || !equalInts(st, []int32{-2, -1, -1, -1, -1}) {
		t.Errorf("history %v steps %v", tools, st)
	}
	if mesh[1].GetStep() != 2 {
		t.Error("turnHistory changed the remembered calls")
	}

	// Another token does not see them; nor does anyone after the TTL.
	if got := m.turnHistory("bob", [][]*toolmeshv1.ToolCallRecord{round("call_1")}); len(got) != 1 {
		t.Errorf("bob sees %d calls", len(got))
	}
	now = now.Add(turnMemoryTTL)
	if got := m.turnHistory("alice", [][]*toolmeshv1.ToolCallRecord{round("call_1")}); len(got) != 1 {
		t.Errorf("after the TTL: %d calls", len(got))
	}

	// Two rounds, one remembered: steps stay apart.
	m.remember("alice", "call_3", 1, mesh[:1])
	got = m.turnHistory("alice", [][]*toolmeshv1.ToolCallRecord{round("call_x"), round("call_3")})
	if tools, st := steps(got); strings.Join(tools, ",") != "get_weather,geo.capital,get_weather" || !equalInts(st, []int32{-2, -1, -1}) {
		t.Errorf("history %v steps %v", tools, st)
	}

	// The memory is bounded in entries.
	for i := range turnMemoryEntries + 10 {
		m.remember("alice", newCallID()+string(rune('a'+i%26)), 1, mesh[:1])
	}
	if n := len(m.entries); n > turnMemoryEntries || len(m.order) != n {
		t.Errorf("%d entries, order %d", n, len(m.order))
	}
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
