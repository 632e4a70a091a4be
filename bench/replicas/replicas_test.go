package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReplicasShareTheLoad runs the program briefly (2 s a phase): calls spread over both
// executors, a drained executor costs no request, and a restarted one takes calls again.
func TestReplicasShareTheLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds toolmesh and runs eight processes; skipped with -short")
	}
	r, err := run(context.Background(), options{Phase: 2 * time.Second, Workers: 4})
	if r != nil {
		t.Logf("\n%s", r.table())
	}
	if err != nil {
		t.Fatal(err)
	}
	total := r.Spread[0] + r.Spread[1]
	if total < 20 || r.Spread[0] < total/5 || r.Spread[1] < total/5 {
		t.Errorf("calls per executor while both ran: %v; want each at least a fifth of %d", r.Spread, total)
	}
	if r.Failed[0] > 0 || r.Failed[2] > 0 {
		t.Errorf("failed requests with both executors up: %d before the stop, %d after the restart", r.Failed[0], r.Failed[2])
	}
	if r.FailedAfterStop > 0 && r.Window > time.Second {
		t.Errorf("%d requests sent after the drain began failed, the last %s after it; want none beyond 1 s", r.FailedAfterStop, r.Window)
	}
	if r.Failed[1] > r.FailedAfterStop {
		t.Errorf("%d requests sent before the stop failed: the drain should have finished them", r.Failed[1]-r.FailedAfterStop)
	}
	if r.DrainExit > 6*time.Second {
		t.Errorf("the drained executor took %s to exit (drain timeout 5 s)", r.DrainExit)
	}
	if r.RejoinSpread[0] == 0 {
		t.Errorf("the restarted executor took no call in the last phase: %v", r.RejoinSpread)
	}
}
