package logsample

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSampler(t *testing.T) {
	var buf bytes.Buffer
	s := New(slog.New(slog.NewTextHandler(&buf, nil)), 3, time.Hour)
	logged := 0
	for range 1000 {
		if s.Log(context.Background(), slog.LevelInfo, "refused", "remote", "10.0.0.1") {
			logged++
		}
	}
	if logged != 3 || strings.Count(buf.String(), "\n") != 3 {
		t.Fatalf("1000 events logged %d lines, want the burst of 3:\n%s", logged, buf.String())
	}
	s.limit.SetBurstAt(time.Now(), 4) // as if time had passed: one more line is due
	s.limit.SetLimit(1e6)
	time.Sleep(time.Millisecond)
	if !s.Log(context.Background(), slog.LevelInfo, "refused") {
		t.Fatal("no line logged once the budget came back")
	}
	if !strings.Contains(buf.String(), "suppressed=997") {
		t.Errorf("the line after a gap does not say how many were left out:\n%s", buf.String())
	}
	// Below the logger's level nothing is counted or logged.
	quiet := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), 1, time.Hour)
	if quiet.Log(context.Background(), slog.LevelInfo, "x") || quiet.suppressed.Load() != 0 {
		t.Error("a line below the level was logged or counted")
	}
}
