package mcpface

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/server"
)

// sessionPrefix starts every 2025-era session id the face hands out.
const sessionPrefix = "toolmesh-"

var errSessionID = errors.New("not a session id of this server")

// statelessIDs is the streamable HTTP session-id manager: ids are random and checked for form
// only, so any replica, or this one after a restart, takes them (see the package comment for
// why that is safe). A client's DELETE is refused with 405: no replica could remember it.
type statelessIDs struct{}

func (statelessIDs) Generate() string { return sessionPrefix + rand.Text() }

func (statelessIDs) Validate(id string) (terminated bool, err error) {
	rest, ok := strings.CutPrefix(id, sessionPrefix)
	// rand.Text is 26 characters of the base32 alphabet.
	if !ok || len(rest) != 26 || strings.Trim(rest, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") != "" {
		return false, errSessionID
	}
	return false, nil
}

func (statelessIDs) Terminate(string) (notAllowed bool, err error) { return true, nil }

// registry bounds the sessions an MCP server keeps for notifications. mcp-go registers a
// session for each initialize over streamable HTTP and keeps it until it has been idle for
// Config.SessionIdle; a client that initializes over and over would otherwise fill memory
// (each session holds a buffered channel of 100 notifications). Past maxSessions the oldest
// such session is dropped. Sessions of open GET streams end with their stream and are not
// counted.
type registry struct {
	mu    sync.Mutex
	srv   *server.MCPServer
	live  map[string]struct{}
	order []string // ids in the order registered; may hold ids since unregistered
	max   int
}

func newRegistry(max int) *registry {
	return &registry{live: map[string]struct{}{}, max: max}
}

func (r *registry) hooks(h *server.Hooks) {
	h.AddOnRegisterSession(r.registered)
	h.AddOnUnregisterSession(func(_ context.Context, s server.ClientSession) {
		r.mu.Lock()
		delete(r.live, s.SessionID())
		r.mu.Unlock()
	})
}

func (r *registry) registered(ctx context.Context, s server.ClientSession) {
	p := peerOf(ctx)
	if p != nil && p.method == http.MethodGet && s.SessionID() != "" && !strings.HasPrefix(p.path, SSEPath) {
		// A GET stream: its session id came from an initialize, here or on another replica
		// (ServeHTTP checked its form). mcp-go sends notifications only to initialized sessions
		// and marks a session so only while answering initialize: a GET that opens before the
		// initialize response has registered the session, or on another replica, would never
		// hear of a change.
		s.Initialize()
		return
	}
	if p == nil || p.method != http.MethodPost {
		return
	}
	var evict []string
	r.mu.Lock()
	r.live[s.SessionID()] = struct{}{}
	r.order = append(r.order, s.SessionID())
	for len(r.live) > r.max && len(r.order) > 0 {
		id := r.order[0]
		r.order = r.order[1:]
		if _, ok := r.live[id]; ok {
			delete(r.live, id)
			evict = append(evict, id)
		}
	}
	if len(r.order) > 2*r.max {
		kept := make([]string, 0, len(r.live))
		for _, id := range r.order {
			if _, ok := r.live[id]; ok {
				kept = append(kept, id)
			}
		}
		r.order = kept
	}
	srv := r.srv
	r.mu.Unlock()
	for _, id := range evict {
		srv.UnregisterSession(ctx, id)
	}
}
