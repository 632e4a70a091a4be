package serve

import (
	"crypto/rand"
	"errors"
	"sync"
)

// Bounds of sessionIDs: a client that never sends DELETE leaves its id behind, so the sets are
// capped; the oldest id goes first. A client whose id was dropped gets 404 and, as the spec
// asks of it, starts a new session.
const (
	maxLiveSessions  = 1 << 16
	maxEndedSessions = 1 << 12
)

var errUnknownSession = errors.New("unknown session id")

// sessionIDs is the streamable HTTP session-id manager: it remembers the ids it handed out and
// the ones clients ended, so a request with an ended or unknown id gets 404 as the spec requires
// (mcp-go's default manager checks only an id's format; its stateful one never forgets).
type sessionIDs struct {
	mu        sync.Mutex
	live      map[string]struct{}
	liveOrder []string // ids in the order handed out; may hold ids since ended
	ended     map[string]struct{}
	endedRing []string // the ended ids, oldest first
}

func newSessionIDs() *sessionIDs {
	return &sessionIDs{live: map[string]struct{}{}, ended: map[string]struct{}{}}
}

func (s *sessionIDs) Generate() string {
	id := "mcp-session-" + rand.Text()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live[id] = struct{}{}
	s.liveOrder = append(s.liveOrder, id)
	for len(s.live) > maxLiveSessions {
		delete(s.live, s.liveOrder[0])
		s.liveOrder = s.liveOrder[1:]
	}
	if len(s.liveOrder) > 2*maxLiveSessions {
		kept := make([]string, 0, len(s.live))
		for _, id := range s.liveOrder {
			if _, ok := s.live[id]; ok {
				kept = append(kept, id)
			}
		}
		s.liveOrder = kept
	}
	return id
}

func (s *sessionIDs) Validate(id string) (terminated bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ended[id]; ok {
		return true, nil
	}
	if _, ok := s.live[id]; !ok {
		return false, errUnknownSession
	}
	return false, nil
}

func (s *sessionIDs) Terminate(id string) (notAllowed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live[id]; !ok {
		return false, nil
	}
	delete(s.live, id)
	s.ended[id] = struct{}{}
	s.endedRing = append(s.endedRing, id)
	if len(s.endedRing) > maxEndedSessions {
		delete(s.ended, s.endedRing[0])
		s.endedRing = s.endedRing[1:]
	}
	return false, nil
}
