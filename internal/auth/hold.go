package auth

import (
	"context"
	"sync"
	"sync/atomic"
)

// slot is the place in flight that Guard.HTTP took for one request. It is given back when the
// handler returns, unless the handler holds it (Hold) for work that goes on after its answer.
type slot struct {
	g    *Guard
	i    int
	held atomic.Bool // taken over by Hold, or already given back at the handler's return
}

type slotKey struct{}

// end gives the slot back at the handler's return, unless Hold took it over.
func (s *slot) end() {
	if s.held.CompareAndSwap(false, true) {
		s.g.leave(s.i)
	}
}

// Hold keeps the place in flight of the request in ctx (taken by Guard.HTTP) after the handler
// returns, until release is called: for a request whose work goes on after its answer, such as
// a call posted to a legacy MCP SSE session, answered 202 while its result travels on another
// request's stream. Without Hold such a token could start any number of calls while never
// having more than one request in flight.
//
// Only the first Hold of a request holds; a later one, one after the handler returned, and one
// for a request that took no place (auth off, no MaxInFlight, a route whose place the gRPC
// interceptor takes) get a release that does nothing. release may be called more than once.
func Hold(ctx context.Context) (release func()) {
	s, ok := ctx.Value(slotKey{}).(*slot)
	if !ok || !s.held.CompareAndSwap(false, true) {
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(func() { s.g.leave(s.i) }) }
}
