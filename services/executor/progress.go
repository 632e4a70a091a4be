package executor

import (
	"encoding/json"
	"math"
	"strconv"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// maxProgressMessage bounds a progress report's message: the server writes it, and it goes
// on to every client that follows the call.
const maxProgressMessage = 1024

// progressSink collects one call's progress reports for whoever forwards them. It keeps only
// the latest: the MCP server's reader calls offer and must never wait for a slow receiver, and
// a receiver that missed a report loses nothing it needs, since each report says how far the
// call has come, not what changed.
type progressSink struct {
	mu      sync.Mutex
	pending *toolmeshv1.CallProgress
	last    float64
	seen    bool
	// ready has a value when pending is set.
	ready chan struct{}
}

func newProgressSink() *progressSink {
	return &progressSink{ready: make(chan struct{}, 1)}
}

// offer keeps p as the latest report, unless it does not move forward: MCP requires progress
// to grow with every notification, and clients may treat a report that does not as an error.
func (s *progressSink) offer(p *toolmeshv1.CallProgress) {
	s.mu.Lock()
	if s.seen && p.GetProgress() <= s.last {
		s.mu.Unlock()
		return
	}
	s.seen, s.last, s.pending = true, p.GetProgress(), p
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// take returns the latest report not taken yet, or nil.
func (s *progressSink) take() *toolmeshv1.CallProgress {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending
	s.pending = nil
	return p
}

// progressRoutes routes a session's notifications/progress to the calls that asked for them,
// by the progress token each call sent. Tokens are the session's own, so a server cannot reach
// a call of another server by guessing one.
type progressRoutes struct {
	mu    sync.Mutex
	next  uint64
	sinks map[string]*progressSink
}

// add registers sink and returns the token its call sends.
func (r *progressRoutes) add(sink *progressSink) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	token := "toolmesh-" + strconv.FormatUint(r.next, 10)
	if r.sinks == nil {
		r.sinks = map[string]*progressSink{}
	}
	r.sinks[token] = sink
	return token
}

func (r *progressRoutes) remove(token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sinks, token)
}

// deliver hands a notifications/progress to its call's sink. A report for no running call
// (late, or made up) and one that is not well formed are dropped: progress is advice, and a
// server's mistake in it must not fail the call.
func (r *progressRoutes) deliver(n mcp.JSONRPCNotification) {
	token, p, ok := progressOf(n.Params.AdditionalFields)
	if !ok {
		return
	}
	r.mu.Lock()
	sink := r.sinks[token]
	r.mu.Unlock()
	if sink != nil {
		sink.offer(p)
	}
}

// progressOf reads a notifications/progress's params: its token (ours are strings), progress,
// total and message.
func progressOf(fields map[string]any) (string, *toolmeshv1.CallProgress, bool) {
	token, ok := fields["progressToken"].(string)
	if !ok {
		return "", nil, false
	}
	progress, ok := number(fields["progress"])
	if !ok {
		return "", nil, false
	}
	p := &toolmeshv1.CallProgress{Progress: progress}
	if v, present := fields["total"]; present && v != nil {
		total, ok := number(v)
		if !ok {
			return "", nil, false
		}
		p.Total = &total
	}
	if m, ok := fields["message"].(string); ok {
		p.Message = shorten(m, maxProgressMessage)
	}
	return token, p, true
}

// number is a JSON number as decoded into an any, if v is a finite one.
func number(v any) (float64, bool) {
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case json.Number:
		var err error
		if f, err = n.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	return f, !math.IsNaN(f) && !math.IsInf(f, 0)
}
