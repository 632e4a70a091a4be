package serve

import (
	"errors"
	"testing"
)

func TestSessionIDs(t *testing.T) {
	s := newSessionIDs()
	a, b := s.Generate(), s.Generate()
	if a == b {
		t.Fatalf("two sessions got the same id %q", a)
	}
	if _, err := s.Terminate(a); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		id         string
		terminated bool
		err        error
	}{
		{"live", b, false, nil},
		{"ended by the client", a, true, nil},
		{"never handed out", "mcp-session-" + "x", false, errUnknownSession},
		{"empty", "", false, errUnknownSession},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			terminated, err := s.Validate(tc.id)
			if terminated != tc.terminated || !errors.Is(err, tc.err) {
				t.Errorf("Validate(%q) = %v, %v; want %v, %v", tc.id, terminated, err, tc.terminated, tc.err)
			}
		})
	}
}

// A server that runs for months must not remember every id it handed out.
func TestSessionIDsBounded(t *testing.T) {
	s := newSessionIDs()
	first := s.Generate()
	for range maxLiveSessions + 10 {
		if _, err := s.Terminate(s.Generate()); err != nil {
			t.Fatal(err)
		}
	}
	for range maxLiveSessions {
		s.Generate()
	}
	if len(s.live) > maxLiveSessions || len(s.liveOrder) > 2*maxLiveSessions+1 || len(s.ended) > maxEndedSessions {
		t.Errorf("live %d (order %d), ended %d; want at most %d, %d", len(s.live), len(s.liveOrder), len(s.ended), maxLiveSessions, maxEndedSessions)
	}
	if _, err := s.Validate(first); !errors.Is(err, errUnknownSession) {
		t.Errorf("the oldest id is still known after %d newer ones: %v", 2*maxLiveSessions, err)
	}
}
