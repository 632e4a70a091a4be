package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHold: a handler that holds its request's place in flight keeps it after it returns,
// until it releases it (once, however often it calls release); a second Hold, a Hold after the
// return and a Hold where no place was taken hold nothing.
func TestHold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		forwarded bool
		holds     int // Holds in the handler
		late      bool
		want      int32 // in flight after the handler returned, before release
	}{
		{name: "not held", cfg: Config{MaxInFlight: 2}, want: 0},
		{name: "held", cfg: Config{MaxInFlight: 2}, holds: 1, want: 1},
		{name: "held twice", cfg: Config{MaxInFlight: 2}, holds: 2, want: 1},
		{name: "held after the return", cfg: Config{MaxInFlight: 2}, late: true, want: 0},
		{name: "a forwarded route takes no place here", cfg: Config{MaxInFlight: 2}, forwarded: true, holds: 1, want: 0},
		{name: "no limit", holds: 1, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newGuard(t, tc.cfg, "")
			var releases []func()
			var ctx context.Context
			h := g.HTTP(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				ctx = r.Context()
				for range tc.holds {
					releases = append(releases, Hold(r.Context()))
				}
			}), nil, func(*http.Request) bool { return tc.forwarded })
			r := httptest.NewRequest("POST", "/sse/message", nil)
			r.Header.Set("Authorization", "Bearer "+tokenCI)
			h.ServeHTTP(httptest.NewRecorder(), r)
			if tc.late {
				releases = append(releases, Hold(ctx))
			}
			inFlight := func() int32 {
				if g.inFlight == nil {
					return 0
				}
				return g.inFlight[g.index["ci"]].Load()
			}
			if got := inFlight(); got != tc.want {
				t.Fatalf("in flight after the handler returned: %d, want %d", got, tc.want)
			}
			for _, release := range releases {
				release()
				release()
			}
			if got := inFlight(); got != 0 {
				t.Errorf("in flight after release: %d, want 0", got)
			}
		})
	}
}
