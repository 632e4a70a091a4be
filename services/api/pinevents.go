package api

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// The executor reports what changes in its trust of tools (a definition first seen, changed
// since its pin, approved, listed as pinned again) on its WatchPinEvents stream. The audit
// trail follows it with followPinEvents and records each event as pinEventAudit words it:
//
//	go followPinEvents(ctx, executorClient, logger, func(ctx context.Context, ev *toolmeshv1.PinEvent) {
//		kind, tool, detail := pinEventAudit(ev)
//		recorder.Event(ctx, kind, tool, detail)
//	})
//
// Every executor replica reports the changes it lists and every approval (its own, or one it
// reads from the shared pin file), so following whichever replica the connection reaches misses
// none; with several replicas, or api replicas each following one, an event may be recorded
// more than once, each naming its executor and sequence.

// pinEventSource is the part of the executor the pin events come from.
type pinEventSource interface {
	WatchPinEvents(ctx context.Context, in *toolmeshv1.WatchPinEventsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.WatchPinEventsResponse], error)
}

// followPinEvents hands each of the executor's pin events to record, in order and once, until
// ctx ends. A broken stream is subscribed again with backoff; the executor sends its buffer
// (its last 256 events) again and those already handed over are skipped, by the executor
// process they came from (a restarted one numbers from 1 again) and their sequence.
func followPinEvents(ctx context.Context, src pinEventSource, log *slog.Logger, record func(context.Context, *toolmeshv1.PinEvent)) {
	var instance string
	var last uint64
	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		err := func() error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			st, err := src.WatchPinEvents(ctx, &toolmeshv1.WatchPinEventsRequest{})
			if err != nil {
				return err
			}
			for {
				m, err := st.Recv()
				if err != nil {
					return err
				}
				ev := m.GetEvent()
				if ev.GetInstance() == instance && ev.GetSequence() <= last {
					continue
				}
				instance, last = ev.GetInstance(), ev.GetSequence()
				record(ctx, ev)
			}
		}()
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		log.Debug("following the executor's pin events again", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// pinEventAudit is a pin event as the audit trail's event records take it: kind
// "pin.first_seen", "pin.changed", "pin.approved" or "pin.restored", the tool id, and the
// rest in words.
func pinEventAudit(ev *toolmeshv1.PinEvent) (kind, tool, detail string) {
	kind = "pin." + strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "PIN_EVENT_TYPE_"))
	parts := []string{"hash " + ev.GetHash()}
	if ev.GetPinnedHash() != "" {
		parts = append(parts, "pinned "+ev.GetPinnedHash())
	}
	if ev.GetPinning() != "" {
		parts = append(parts, "pinning "+ev.GetPinning())
	}
	if ev.GetQuarantined() {
		parts = append(parts, "quarantined")
	}
	if fs := ev.GetFindings(); len(fs) > 0 {
		rules := make([]string, 0, len(fs))
		for _, f := range fs {
			rules = append(rules, f.GetField()+":"+f.GetRule())
		}
		parts = append(parts, "findings "+strings.Join(rules, ","))
	}
	if ev.GetApprovedBy() != "" {
		parts = append(parts, "approved by "+ev.GetApprovedBy())
	}
	if ev.GetInstance() != "" {
		parts = append(parts, fmt.Sprintf("executor %s event %d", ev.GetInstance(), ev.GetSequence()))
	}
	return kind, ev.GetToolId(), strings.Join(parts, "; ")
}
