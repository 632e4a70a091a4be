package executor

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// TestRulesPublished: the executor publishes each server's rules with its catalog, as the api's
// policy reads them: on every server ListServers names (none set is an empty set, so an api
// can tell this executor from an older one) and in WatchTools' snapshot; a reload that changes
// them sends them in a CHANGED event ahead of the tools they leave out.
func TestRulesPublished(t *testing.T) {
	a, b := streamable(t, "a"), streamable(t, "b")
	a.ExcludedTools, a.AllowDestructive = []string{"secret_*"}, true
	a.RateLimit = &mcpconfig.RateLimit{Calls: 3, Per: time.Minute}
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"a": a, "b": b}})
	h.waitReady(t)

	wantA := &toolmeshv1.ServerRules{ExcludedTools: []string{"secret_*"}, AllowDestructive: true,
		RateLimit: &toolmeshv1.RateLimit{Calls: 3, Per: durationpb.New(time.Minute)}}
	if got := h.serverNamed(t, "a").GetRules(); !proto.Equal(got, wantA) {
		t.Errorf("ListServers: a's rules %v, want %v", got, wantA)
	}
	if got := h.serverNamed(t, "b").GetRules(); got == nil || !proto.Equal(got, &toolmeshv1.ServerRules{}) {
		t.Errorf("ListServers: b's rules %v, want an empty set", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := h.client.WatchTools(ctx, &toolmeshv1.WatchToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.GetRules().GetServers(); !proto.Equal(got["a"], wantA) || got["b"] == nil || len(got) != 2 {
		t.Errorf("snapshot's rules %v, want a's and b's", snap.GetRules())
	}

	b.ExcludedTools = []string{"add"}
	if _, err := h.svc.Reconfigure(map[string]mcpconfig.Server{"a": a, "b": b}); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := ev.GetRules().GetServers()["b"]; ev.GetType() != toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED || !slices.Equal(got.GetExcludedTools(), []string{"add"}) {
		t.Errorf("first event after the reload: %v; want CHANGED with b's new rules", ev)
	}
	if len(ev.GetRemovedIds()) != 0 {
		t.Errorf("the rules' event removes %v: the rules go first", ev.GetRemovedIds())
	}
	if ev, err = w.Recv(); err != nil || !slices.Contains(ev.GetRemovedIds(), "b.add") {
		t.Errorf("the next event: %v, %v; want b.add removed", ev, err)
	}
}
