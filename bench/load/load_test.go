package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
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
