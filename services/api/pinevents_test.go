package api

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/server"
)

// eventExecutor is a test double of the executor's pin event stream: each subscription sends
// the next script's events and then breaks, as a restarted or replaced executor does.
type eventExecutor struct {
	toolmeshv1.UnimplementedExecutorServiceServer
	mu      sync.Mutex
	scripts [][]*toolmeshv1.PinEvent
	asked   []uint64
}

func (e *eventExecutor) WatchPinEvents(req *toolmeshv1.WatchPinEventsRequest, st grpc.ServerStreamingServer[toolmeshv1.WatchPinEventsResponse]) error {
	e.mu.Lock()
	e.asked = append(e.asked, req.GetAfter())
	var script []*toolmeshv1.PinEvent
	if len(e.scripts) > 0 {
		script, e.scripts = e.scripts[0], e.scripts[1:]
	}
	e.mu.Unlock()
	if script == nil {
		<-st.Context().Done()
		return nil
	}
	for _, ev := range script {
		if ev.GetSequence() <= req.GetAfter() {
			continue
		}
		if err := st.Send(&toolmeshv1.WatchPinEventsResponse{Event: ev}); err != nil {
			return err
		}
	}
	return status.Error(codes.Unavailable, "executor stopping")
}

func pinEv(instance string, seq uint64) *toolmeshv1.PinEvent {
	return &toolmeshv1.PinEvent{Instance: instance, Sequence: seq, ToolId: fmt.Sprintf("calc.t%d", seq), Type: toolmeshv1.PinEventType_PIN_EVENT_TYPE_CHANGED}
}

// TestFollowPinEvents: the follower hands each pin event over once, in order, across broken
// streams (the executor replays its buffer) and a new executor process (its sequence starts
// again).
func TestFollowPinEvents(t *testing.T) {
	exec := &eventExecutor{scripts: [][]*toolmeshv1.PinEvent{
		{pinEv("a", 1), pinEv("a", 2)},
		{pinEv("a", 1), pinEv("a", 2), pinEv("a", 3)},
		{pinEv("b", 1)},
	}}
	conn, err := grpc.NewClient(startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) }), server.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		followPinEvents(ctx, toolmeshv1.NewExecutorServiceClient(conn), slog.New(slog.DiscardHandler), func(_ context.Context, ev *toolmeshv1.PinEvent) {
			mu.Lock()
			got = append(got, fmt.Sprintf("%s%d", ev.GetInstance(), ev.GetSequence()))
			mu.Unlock()
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if strings.Join(got, ",") != "a1,a2,a3,b1" {
		t.Errorf("handed over %v, want a1,a2,a3,b1", got)
	}
}

// TestPinEventAudit: a pin event as the audit trail records it.
func TestPinEventAudit(t *testing.T) {
	kind, tool, detail := pinEventAudit(&toolmeshv1.PinEvent{
		Instance: "e1", Sequence: 7, Type: toolmeshv1.PinEventType_PIN_EVENT_TYPE_CHANGED, ToolId: "calc.add",
		Pinning: "enforce", Quarantined: true, PinnedHash: "h1", Hash: "h2",
		Findings: []*toolmeshv1.ToolFinding{{Kind: toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, Field: "description", Rule: "instruction_tag"}},
	})
	if kind != "pin.changed" || tool != "calc.add" {
		t.Errorf("kind %q, tool %q", kind, tool)
	}
	for _, w := range []string{"hash h2", "pinned h1", "pinning enforce", "quarantined", "findings description:instruction_tag", "executor e1 event 7"} {
		if !strings.Contains(detail, w) {
			t.Errorf("detail %q lacks %q", detail, w)
		}
	}
	_, _, detail = pinEventAudit(&toolmeshv1.PinEvent{Type: toolmeshv1.PinEventType_PIN_EVENT_TYPE_APPROVED, ToolId: "calc.add", Hash: "h2", ApprovedBy: "token admin"})
	if !strings.Contains(detail, "approved by token admin") || strings.Contains(detail, "quarantined") {
		t.Errorf("approval detail %q", detail)
	}
}
