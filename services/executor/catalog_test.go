package executor

import (
	"fmt"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

func mustTool(t *testing.T, server, name, desc string) *tool {
	t.Helper()
	tl, err := buildTool(server, mcp.NewTool(name, mcp.WithDescription(desc), mcp.WithNumber("x")), nil, nil, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

func TestCatalogDiffAndRevision(t *testing.T) {
	c := newCatalog(nil, nil)
	sub, snap := c.subscribe()
	defer c.unsubscribe(sub)
	if snap.GetRevision() != 0 || len(snap.GetUpserted()) != 0 {
		t.Fatalf("initial snapshot = %v", snap)
	}
	c.replaceServer("a", []*tool{mustTool(t, "a", "x", "1"), mustTool(t, "a", "y", "1")})
	c.replaceServer("b", []*tool{mustTool(t, "b", "x", "1")})
	// Unchanged list: no event, no revision.
	c.replaceServer("a", []*tool{mustTool(t, "a", "x", "1"), mustTool(t, "a", "y", "1")})
	// y changed, x removed.
	c.replaceServer("a", []*tool{mustTool(t, "a", "y", "2")})

	var evs []*toolmeshv1.WatchToolsResponse
	for len(sub.ch) > 0 {
		evs = append(evs, <-sub.ch)
	}
	if len(evs) != 3 {
		t.Fatalf("got %d events, want 3", len(evs))
	}
	last := evs[2]
	if last.GetRevision() != 3 || len(last.GetUpserted()) != 1 || last.GetUpserted()[0].GetId() != "a.y" ||
		len(last.GetRemovedIds()) != 1 || last.GetRemovedIds()[0] != "a.x" {
		t.Errorf("last event = %v", last)
	}
	if got := len(c.list("")); got != 2 {
		t.Errorf("list = %d tools, want 2", got)
	}
	if c.lookup("b.x") == nil || c.lookup("a.x") != nil {
		t.Errorf("lookup after removal wrong")
	}
}

// TestWatchOverflow: a subscriber that does not read loses its backlog and
// gets a fresh snapshot; publishing never blocks.
func TestWatchOverflow(t *testing.T) {
	c := newCatalog(nil, nil)
	slow, _ := c.subscribe()
	defer c.unsubscribe(slow)
	for i := range watchBuffer * 3 {
		c.replaceServer("s", []*tool{mustTool(t, "s", "t", fmt.Sprint(i))})
	}
	if !slow.resync.Load() {
		t.Fatal("want resync after overflow")
	}
	select {
	case <-slow.kick:
	default:
		t.Fatal("want a kick after overflow")
	}
	snap := c.resnapshot(slow)
	if snap.GetType() != toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT || snap.GetRevision() != uint64(watchBuffer*3) {
		t.Fatalf("resnapshot = type %v revision %d", snap.GetType(), snap.GetRevision())
	}
	if len(slow.ch) != 0 {
		t.Fatalf("backlog not dropped: %d", len(slow.ch))
	}
	// Later changes flow again.
	c.replaceServer("s", []*tool{mustTool(t, "s", "t", "new")})
	if ev := <-slow.ch; ev.GetRevision() != snap.GetRevision()+1 {
		t.Errorf("next revision %d, want %d", ev.GetRevision(), snap.GetRevision()+1)
	}
}

func TestSchemaThatDoesNotCompileIsSkipped(t *testing.T) {
	raw := &rawTool{Name: "bad", InputSchema: []byte(`{"type":"object","properties":{"a":{"$ref":"http://example.com/x.json"}}}`)}
	tl, err := buildTool("s", mcp.NewTool("bad"), raw, nil, testLimits)
	if err == nil || tl == nil || tl.schema != nil {
		t.Fatalf("got tool %v err %v; want the tool, no schema, an error", tl, err)
	}
	if tl.proto.GetInputSchema().GetFields()["properties"] == nil {
		t.Errorf("raw schema not kept: %v", tl.proto.GetInputSchema())
	}
}
