package api

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// A turn that calls the caller's functions spans several requests: the model calls mesh tools
// and a function of the caller's, the caller runs the function and asks again with its result.
// The caller's messages carry its own calls but not the mesh's (they ran inside the mesh, and an
// OpenAI client keeps only what is in the message). turnMemory keeps the mesh calls of such a
// request, under the ids of the function calls it returned, so the next request of the turn
// shows the model everything it did. It is this replica's memory: a request that reaches
// another replica goes on without those calls (the model sees the caller's results only).
type turnMemory struct {
	mu      sync.Mutex
	entries map[string]*turnEntry // by function call id
	order   []string              // ids, oldest first
	bytes   int
	now     func() time.Time
}

// turnEntry is what one request did before it returned function calls.
type turnEntry struct {
	token string
	// calls are the mesh calls the request ran, with its step numbers; fnStep is the step in
	// which the model called the functions.
	calls  []*toolmeshv1.ToolCallRecord
	fnStep int32
	at     time.Time
	size   int
}

// Bounds of the memory: a continuation comes seconds or minutes after its request.
const (
	turnMemoryTTL      = 30 * time.Minute
	turnMemoryEntries  = 4096
	turnMemoryMaxBytes = 32 << 20
)

func newTurnMemory() *turnMemory {
	return &turnMemory{entries: map[string]*turnEntry{}, now: time.Now}
}

// newCallID names a call of a caller's function, as OpenAI's "call_..." ids look: random, so
// that no other caller can guess one and read the calls kept under it.
func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// remember keeps the mesh calls of a request under the first of the function calls it returned.
func (m *turnMemory) remember(token, id string, fnStep int32, calls []*toolmeshv1.ToolCallRecord) {
	if len(calls) == 0 {
		return
	}
	e := &turnEntry{token: token, fnStep: fnStep, size: len(id)}
	for _, c := range calls {
		c = proto.Clone(c).(*toolmeshv1.ToolCallRecord)
		e.calls = append(e.calls, c)
		e.size += proto.Size(c)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e.at = m.now()
	m.expire(e.at)
	for len(m.order) > 0 && (len(m.order) >= turnMemoryEntries || m.bytes+e.size > turnMemoryMaxBytes) {
		m.drop()
	}
	if e.size > turnMemoryMaxBytes {
		return
	}
	m.entries[id] = e
	m.order = append(m.order, id)
	m.bytes += e.size
}

// recall returns the entry kept under id for token, if any.
func (m *turnMemory) recall(token, id string) *turnEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(m.now())
	e := m.entries[id]
	if e == nil || e.token != token {
		return nil
	}
	return e
}

// expire drops the entries older than the TTL; the oldest come first in order.
func (m *turnMemory) expire(now time.Time) {
	for len(m.order) > 0 {
		e := m.entries[m.order[0]]
		if e != nil && now.Sub(e.at) < turnMemoryTTL {
			return
		}
		m.drop()
	}
}

func (m *turnMemory) drop() {
	id := m.order[0]
	m.order = m.order[1:]
	if e := m.entries[id]; e != nil {
		m.bytes -= e.size
		delete(m.entries, id)
	}
}

// turnHistory is this turn's earlier calls for the model: for each round of the caller's
// function calls, the mesh calls the request before it ran (when this replica remembers them),
// then the round's calls with the caller's results. Steps are renumbered from -N to -1, so that
// calls made together stay together and none is mistaken for a step of this request.
func (m *turnMemory) turnHistory(token string, rounds [][]*toolmeshv1.ToolCallRecord) []*toolmeshv1.ToolCallRecord {
	type group struct {
		round int
		step  int32
	}
	var out []*toolmeshv1.ToolCallRecord
	var groups []group
	for i, round := range rounds {
		fnStep := int32(0)
		if e := m.recall(token, round[0].GetCallId()); e != nil {
			fnStep = e.fnStep
			for _, c := range e.calls {
				c = proto.Clone(c).(*toolmeshv1.ToolCallRecord)
				out, groups = append(out, c), append(groups, group{i, c.GetStep()})
			}
		}
		for _, c := range round {
			out, groups = append(out, c), append(groups, group{i, fnStep})
		}
	}
	// Distinct groups in order, numbered -N..-1.
	n := int32(0)
	for i := range groups {
		if i == 0 || groups[i] != groups[i-1] {
			n++
		}
	}
	step := -n - 1
	for i, c := range out {
		if i == 0 || groups[i] != groups[i-1] {
			step++
		}
		c.Step, c.Index, c.StartMs = step, 0, 0
	}
	return out
}
