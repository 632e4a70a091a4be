package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/internal/gobuild"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLoadShort runs the load for 2 s at a low rate and wants every answer right.
func TestLoadShort(t *testing.T) {
	mix, err := parseMix("search=1,direct=1,call=1,question=1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	r, err := run(ctx, options{Duration: 2 * time.Second, Warmup: 200 * time.Millisecond, Rate: 20, Mix: mix})
	if err != nil {
		t.Fatal(err)
	}
	rows := r.rows()
	if len(rows) != 5 || rows[4].sent != 40 {
		t.Fatalf("rows = %+v; want 4 kinds and all, 40 sent", rows)
	}
	if n := r.errors(); n > 0 {
		t.Errorf("%d errors: %v\n%s", n, r.sampleErrors, r.table())
	}
}

func TestParseMixAndSchedule(t *testing.T) {
	mix, err := parseMix("search=2,question=1")
	if err != nil {
		t.Fatal(err)
	}
	if got := schedule(mix); len(got) != 3 || got[0] != "search" || got[1] != "question" || got[2] != "search" {
		t.Errorf("schedule = %v", got)
	}
	for _, bad := range []string{"", "search", "nope=1", "search=-1", "search=0"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("parseMix(%q) = nil error", bad)
		}
	}
}

// TestLoadRollingRestart runs the rolling-restart phase briefly (4 s at 40 req/s, 8 s under
// -race, two restarts of the executor process): nothing sent before a stop fails, what is sent
// while the executor is away fails fast with 503, and nothing fails once it served again.
func TestLoadRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds toolmesh and restarts an executor process; skipped with -short")
	}
	mix, err := parseMix("search=1,direct=1,call=1,question=1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	load := 4 * time.Second
	if gobuild.Race() {
		// The executor is built with -race as this test is: it starts and drains about a
		// second slower, and two restarts must still end before the load does. Beside make
		// test's other test binaries a restart took 2.5 s and the last one ended 0.3 s after
		// 8 s of load.
		load = 12 * time.Second
	}
	r, err := restartPhase(ctx, restartOptions{Duration: load, Restarts: 2, Rate: 40, Mix: mix, Warmup: 200 * time.Millisecond})
	if r != nil {
		t.Logf("\n%s", r.table())
	}
	if err != nil {
		t.Fatal(err)
	}
	f := r.figures()
	if len(f.Cycles) != 2 || f.Before == 0 || f.After == 0 {
		t.Fatalf("%d restarts, %d requests before a stop, %d after the last; want 2 and some of each", len(f.Cycles), f.Before, f.After)
	}
	if f.BeforeFailed > 0 {
		t.Errorf("%d of %d requests sent before a stop failed (%d of the %d in flight); want none", f.BeforeFailed, f.Before, f.InFlightFailed, f.InFlight)
	}
	if f.Gap503 != f.GapFailed || f.GapFailMaxMs > 1000 {
		t.Errorf("while the executor was away %d requests failed, %d with 503, the slowest in %.0f ms; want all 503 within 1 s", f.GapFailed, f.Gap503, f.GapFailMaxMs)
	}
	if f.AfterFailed > 0 {
		t.Errorf("%d of %d requests sent after the last restart failed; want none", f.AfterFailed, f.After)
	}
}

// TestRestartTally: each request counts by when it was sent against the stops: before a stop
// (in flight when it answered after the stop began), in a gap, or after the last restart.
func TestRestartTally(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := &restartReport{cycles: []cycle{{stop: at(100), served: at(200)}, {stop: at(300), served: at(400)}}}
	fail := errors.New("503 executor unreachable")
	refusedErr := errors.New(`503 {"code":14,"message":"executor at 127.0.0.1:1 is unreachable: connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\""}`)
	for _, x := range []struct {
		sent, took, code int
		err              error
	}{
		{10, 5, 200, nil},        // before stop 1
		{95, 10, 200, nil},       // before stop 1, in flight at it
		{98, 10, 0, fail},        // before stop 1, in flight, failed without an answer
		{99, 10, 503, fail},      // before stop 1, in flight, failed with 503 (not a refused connection)
		{97, 3, 503, refusedErr}, // before stop 1, refused: its call reached the executor after the stop
		{150, 2, 503, fail},      // gap 1
		{160, 2, 200, nil},       // gap 1, answered (a search)
		{250, 5, 200, nil},       // before stop 2
		{350, 900, 504, fail},    // gap 2, slow and not 503
		{450, 5, 200, nil},       // after
		{460, 5, 500, fail},      // after, failed
	} {
		r.results = append(r.results, result{kind: "call", at: at(x.sent), latency: time.Duration(x.took) * time.Millisecond, code: x.code, err: x.err})
	}
	got := r.tally()
	if got.before != 6 || got.beforeFailed != 2 || got.before503 != 1 || got.inFlight != 3 || got.inFlightFailed != 2 {
		t.Errorf("before: sent %d failed %d (refused with 503: %d), in flight %d failed %d; want 6 2 (1), 3 2", got.before, got.beforeFailed, got.before503, got.inFlight, got.inFlightFailed)
	}
	if got.gap != 3 || got.gapFailed != 2 || got.gap503 != 1 || len(got.gapFailLatency) != 2 || got.gapFailLatency[1] != 900*time.Millisecond {
		t.Errorf("gap: sent %d failed %d, 503 %d, latencies %v; want 3 2 1, [2ms 900ms]", got.gap, got.gapFailed, got.gap503, got.gapFailLatency)
	}
	if got.after != 2 || got.afterFailed != 1 {
		t.Errorf("after: sent %d failed %d; want 2 1", got.after, got.afterFailed)
	}
}

// TestLoadSSEShort runs the legacy SSE phase briefly (1 s each way): the other token's calls
// all answered, alone and beside the flood; the flood has calls accepted and calls refused
// (its token may have 8 requests in flight, far fewer than 48).
func TestLoadSSEShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a mesh and floods it for a few seconds; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := ssePhase(ctx, sseOptions{Calls: 48, Duration: time.Second, Rate: 8})
	if r != nil {
		t.Logf("\n%s", r.table())
	}
	if err != nil {
		t.Fatal(err)
	}
	f := r.figures()
	if f.Alone.Sent != 8 || f.Beside.Sent != 8 || f.Alone.Errors+f.Beside.Errors > 0 {
		t.Errorf("the other token: %d and %d calls sent, %d and %d failed; want 8 and 8, none failed", f.Alone.Sent, f.Beside.Sent, f.Alone.Errors, f.Beside.Errors)
	}
	if f.Accepted == 0 || f.Refused == 0 || f.Failed > 0 || f.Posted != f.Accepted+f.Refused+f.Failed {
		t.Errorf("the flood: %d posted, %d accepted, %d refused, %d failed; want some accepted, some refused, none failed", f.Posted, f.Accepted, f.Refused, f.Failed)
	}
}
