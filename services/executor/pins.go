package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/pinfile"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Pinned tool definitions (issue 27): a server can change what its tool says after the tool
// was trusted ("rug pull"), and a description can be written to steer the model (tool
// poisoning). The executor pins each tool's definition (its hash) the first time it sees it,
// per server with pinning warn or enforce, and judges every listing against the pins before
// the catalog takes it: a definition other than its pin is flagged (warn) or quarantined
// (enforce: left out of the catalog, so it is never listed, indexed, offered or called), and
// waits, with a diff, until it is approved. Under enforce a tool first seen with findings
// (tooltext) is held the same way instead of being pinned.

// pinEventBuffer is how many pin events WatchPinEvents can replay.
const pinEventBuffer = 256

// firstSeen is a pin's PinnedBy when it was trusted on first use.
const firstSeen = "first seen"

// pinBook holds the pins, the definitions waiting for approval and the pin events.
type pinBook struct {
	path string // "" keeps the pins in memory
	poll time.Duration
	log  *slog.Logger
	ins  pinInstruments
	// update is pinfile.Update and read pinfile.Read; a test replaces them.
	update func(path string, change func(*pinfile.File) bool) (*pinfile.File, error)
	read   func(path string) (*pinfile.File, error)
	// republish judges every server's last listing again: a pin changed.
	republish func()

	mu sync.Mutex
	// file is the pin file as last read or written; memory holds the pins it could not take
	// (no file, or one this executor cannot write: a ConfigMap). The file's pin wins.
	file, memory map[string]pinfile.Pin
	// readOnly says why the file cannot be written here; "" while it can.
	readOnly string
	pending  map[string]*pendingTool // by id
	watch    pinfile.Watch           // used by follow only
	events   pinEvents
}

// newInstance names this executor process in its pin events.
func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// pendingTool is a definition waiting for approval.
type pendingTool struct {
	entry       *tool // as listed, cleaned, its pin state set
	mode        mcpconfig.Pinning
	quarantined bool
	since       time.Time
	pinned      *pinfile.Pin // nil: never pinned
}

func newPinBook(path string, poll time.Duration, log *slog.Logger, meter metric.Meter) (*pinBook, error) {
	b := &pinBook{path: path, poll: poll, log: log, ins: newPinInstruments(meter), update: pinfile.Update, read: pinfile.Read,
		file: map[string]pinfile.Pin{}, memory: map[string]pinfile.Pin{}, pending: map[string]*pendingTool{}}
	b.events.instance = newInstance()
	if path == "" {
		log.Info("tool pins are kept in memory: each start trusts the tool definitions it sees first (--config or --executor.pin-file keeps them in a file)")
		return b, nil
	}
	// A pin file in a folder that is not there is a mistyped path: pins would be kept in
	// memory, and forgotten at the next start.
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("pin file %s: its folder %s is not there (--executor.pin-file)", path, filepath.Dir(path))
	}
	// A pin file that does not read stops the start: without its pins every tool would be
	// a first sight, and a rug pull would pass as one.
	f, err := pinfile.Read(path)
	if err != nil {
		return nil, err
	}
	b.file = f.Pins
	b.watch.Changed(path)
	log.Info("tool pins", "file", path, "pins", len(f.Pins))
	return b, nil
}

// pinOf is id's pin, the file's before memory's.
func (b *pinBook) pinOf(id string) (pinfile.Pin, bool) {
	if p, ok := b.file[id]; ok {
		return p, true
	}
	p, ok := b.memory[id]
	return p, ok
}

// judge decides what of server's listing the catalog serves, and records what it found:
// first sights are pinned, a definition other than its pin (or a hostile first sight under
// enforce) becomes pending, and a pending tool that lists its pin again is not pending any
// more. Quarantined tools are left out of what it returns; the others carry their pin state.
func (b *pinBook) judge(server string, mode mcpconfig.Pinning, listed []*tool) []*tool {
	if b == nil {
		return listed
	}
	out := make([]*tool, 0, len(listed))
	if mode == mcpconfig.PinningOff {
		b.mu.Lock()
		b.forgetServer(server, nil)
		b.mu.Unlock()
		for _, t := range listed {
			out = append(out, t.withPin(toolmeshv1.PinState_PIN_STATE_UNSPECIFIED))
		}
		return out
	}
	b.mu.Lock()
	var first []*tool
	for _, t := range listed {
		if _, ok := b.pinOf(t.id); !ok && (mode == mcpconfig.PinningWarn || len(t.proto.GetFindings()) == 0) {
			first = append(first, t)
		}
	}
	recorded := b.recordFirstLocked(first)
	var evs []*toolmeshv1.PinEvent
	now := time.Now()
	seen := make(map[string]bool, len(listed))
	for _, t := range listed {
		seen[t.id] = true
		hash := t.proto.GetHash()
		pin, pinned := b.pinOf(t.id)
		if pinned && pin.Hash == hash {
			if p := b.pending[t.id]; p != nil {
				delete(b.pending, t.id)
				if p.pinned != nil && p.pinned.Hash == hash {
					evs = append(evs, b.event(toolmeshv1.PinEventType_PIN_EVENT_TYPE_RESTORED, t, mode, false, hash))
					b.log.Info("tool lists its pinned definition again", "tool", t.id, "hash", hash)
				} else {
					// Approved elsewhere: by another replica, or in the pin file by hand. Said here
					// too, so that one replica's events miss no approval.
					ev := b.event(toolmeshv1.PinEventType_PIN_EVENT_TYPE_APPROVED, t, mode, false, "")
					if p.pinned != nil {
						ev.PinnedHash = p.pinned.Hash
					}
					ev.ApprovedBy = pin.PinnedBy
					evs = append(evs, ev)
					b.log.Info("tool definition approved in the pin file", "tool", t.id, "hash", hash, "approved_by", pin.PinnedBy)
				}
			}
			if recorded[t.id] {
				evs = append(evs, b.event(toolmeshv1.PinEventType_PIN_EVENT_TYPE_FIRST_SEEN, t, mode, false, ""))
				if len(t.proto.GetFindings()) > 0 {
					b.log.Warn("tool first seen with findings; pinned and flagged (pinning: warn)", "tool", t.id, "hash", hash,
						"findings", findingRules(t.proto.GetFindings()))
				}
			}
			out = append(out, t.withPin(toolmeshv1.PinState_PIN_STATE_PINNED))
			continue
		}
		state, was, typ := toolmeshv1.PinState_PIN_STATE_UNAPPROVED, "", toolmeshv1.PinEventType_PIN_EVENT_TYPE_FIRST_SEEN
		var pinnedCopy *pinfile.Pin
		if pinned {
			state, was, typ = toolmeshv1.PinState_PIN_STATE_CHANGED, pin.Hash, toolmeshv1.PinEventType_PIN_EVENT_TYPE_CHANGED
			pinnedCopy = &pin
		}
		quarantined := mode == mcpconfig.PinningEnforce
		entry := t.withPin(state)
		prev := b.pending[t.id]
		news := prev == nil || prev.entry.proto.GetHash() != hash || (prev.pinned == nil) != (pinnedCopy == nil) ||
			(prev.pinned != nil && prev.pinned.Hash != was)
		since := now
		if !news {
			since = prev.since
		}
		b.pending[t.id] = &pendingTool{entry: entry, mode: mode, quarantined: quarantined, since: since, pinned: pinnedCopy}
		if news {
			evs = append(evs, b.event(typ, entry, mode, quarantined, was))
			action := "flagged; it stays callable until approved (pinning: warn)"
			if quarantined {
				action = "quarantined: not listed, offered or callable until approved (pinning: enforce)"
			}
			what := "tool definition changed since it was pinned; "
			if !pinned {
				what = "tool first seen with findings; "
			}
			b.log.Warn(what+action, "tool", t.id, "pinned_hash", was, "hash", hash,
				"findings", findingRules(t.proto.GetFindings()), "review", "toolmesh tools pending", "approve", "toolmesh tools approve "+t.id)
		}
		if !quarantined {
			out = append(out, entry)
		}
	}
	b.forgetServer(server, seen)
	b.mu.Unlock()
	b.emit(evs)
	return out
}

// forget drops what is pending of server: a reload removed it. Its pins stay in the file.
func (b *pinBook) forget(server string) {
	b.mu.Lock()
	b.forgetServer(server, nil)
	b.mu.Unlock()
}

// forgetServer drops the pending tools of server that are not in keep (nil: all of them): the
// server no longer lists them.
func (b *pinBook) forgetServer(server string, keep map[string]bool) {
	for id, p := range b.pending {
		if p.entry.server == server && !keep[id] {
			delete(b.pending, id)
		}
	}
}

// recordFirstLocked pins the definitions of tools seen for the first time and returns the ids
// pinned as listed. Another replica may have pinned one of them meanwhile: its pin stands and
// the listing is judged against it.
func (b *pinBook) recordFirstLocked(tools []*tool) map[string]bool {
	if len(tools) == 0 {
		return nil
	}
	now := time.Now().UTC()
	add := make(map[string]pinfile.Pin, len(tools))
	for _, t := range tools {
		add[t.id] = pinOf(t, now, firstSeen)
	}
	recorded := make(map[string]bool, len(add))
	if b.path != "" && b.readOnly == "" {
		f, err := b.update(b.path, func(f *pinfile.File) bool {
			changed := false
			for id, p := range add {
				if _, ok := f.Pins[id]; !ok {
					f.Pins[id] = p
					changed = true
				}
			}
			return changed
		})
		if err == nil {
			b.file = f.Pins
			for id, p := range add {
				if b.file[id].Hash == p.Hash {
					recorded[id] = true
				}
			}
			return recorded
		}
		b.writeFailedLocked(err)
	}
	for id, p := range add {
		b.memory[id] = p
		recorded[id] = true
	}
	return recorded
}

// writeFailedLocked notes that the pin file could not be written: read-only for good (first
// sights stay in memory and approvals are refused until the file changes), or for now.
func (b *pinBook) writeFailedLocked(err error) {
	if errors.Is(err, pinfile.ErrReadOnly) {
		if b.readOnly == "" {
			b.log.Warn("the pin file is read-only here (a ConfigMap?): first sights are pinned in memory, approvals go into the file by other means (docs/operations/security.md)",
				"path", b.path, "err", err)
		}
		b.readOnly = err.Error()
		return
	}
	b.log.Warn("the pin file could not be written; pins kept in memory until it can be", "path", b.path, "err", err)
}

// pinOf is t's definition as a pin.
func pinOf(t *tool, at time.Time, by string) pinfile.Pin {
	return pinfile.Pin{Hash: t.proto.GetHash(), PinnedAt: at, PinnedBy: by, Tool: pinfile.Encode(t.withPin(toolmeshv1.PinState_PIN_STATE_UNSPECIFIED).proto)}
}

// notPendingError: an approval of a tool with nothing pending.
type notPendingError struct{ id string }

func (e *notPendingError) Error() string {
	return fmt.Sprintf("tool %q has no definition waiting for approval (toolmesh tools pending lists those that have)", e.id)
}

// staleApprovalError: an approval of another definition than the one listed now.
type staleApprovalError struct{ id, approved, listed string }

func (e *staleApprovalError) Error() string {
	return fmt.Sprintf("tool %q lists definition %s now, not %s, which the approval names: review it again (toolmesh tools pending)", e.id, e.listed, e.approved)
}

// readOnlyError: the pin file cannot take an approval here.
type readOnlyError struct{ path, why string }

func (e *readOnlyError) Error() string {
	return fmt.Sprintf("the pin file %s cannot be written by the executor (%s): approve into a copy with toolmesh tools approve SERVER.TOOL --pin-file FILE and update the file (for a ConfigMap: kubectl create configmap ... --from-file, see docs/operations/security.md)", e.path, e.why)
}

// pinWriteError: the pin file failed to take an approval.
type pinWriteError struct{ err error }

func (e *pinWriteError) Error() string { return "the approval was not recorded: " + e.err.Error() }
func (e *pinWriteError) Unwrap() error { return e.err }

// approve pins the pending definition of id, when hash (if set) names it, and releases it.
func (b *pinBook) approve(id, hash, by string) (*toolmeshv1.Tool, error) {
	if by == "" {
		by = "an executor client"
	}
	b.mu.Lock()
	p := b.pending[id]
	switch {
	case p == nil:
		b.mu.Unlock()
		return nil, &notPendingError{id: id}
	case hash != "" && hash != p.entry.proto.GetHash():
		b.mu.Unlock()
		return nil, &staleApprovalError{id: id, approved: hash, listed: p.entry.proto.GetHash()}
	}
	pin := pinOf(p.entry, time.Now().UTC(), by)
	if b.path != "" {
		if b.readOnly != "" {
			b.mu.Unlock()
			return nil, &readOnlyError{path: b.path, why: b.readOnly}
		}
		f, err := b.update(b.path, func(f *pinfile.File) bool {
			f.Pins[id] = pin
			return true
		})
		if err != nil {
			b.writeFailedLocked(err)
			b.mu.Unlock()
			if errors.Is(err, pinfile.ErrReadOnly) {
				return nil, &readOnlyError{path: b.path, why: err.Error()}
			}
			return nil, &pinWriteError{err}
		}
		b.file = f.Pins
	} else {
		b.memory[id] = pin
	}
	delete(b.pending, id)
	ev := b.event(toolmeshv1.PinEventType_PIN_EVENT_TYPE_APPROVED, p.entry, p.mode, false, "")
	if p.pinned != nil {
		ev.PinnedHash = p.pinned.Hash
	}
	ev.ApprovedBy = by
	b.mu.Unlock()
	b.log.Info("tool definition approved", "tool", id, "hash", pin.Hash, "approved_by", by)
	b.emit([]*toolmeshv1.PinEvent{ev})
	if b.republish != nil {
		b.republish()
	}
	return p.entry.withPin(toolmeshv1.PinState_PIN_STATE_PINNED).proto, nil
}

// quarantinedError: a call of a held tool.
type quarantinedError struct {
	id      string
	changed bool
}

func (e *quarantinedError) Error() string {
	why := "it was first seen with findings"
	if e.changed {
		why = "its definition changed since it was pinned"
	}
	server := toolid.Server(e.id)
	return fmt.Sprintf("tool %q is quarantined: %s (mcpServers.%s pinning: enforce); an admin reviews it with toolmesh tools pending and releases it with toolmesh tools approve %s",
		e.id, why, server, e.id)
}

// quarantined is the error for a call of id when id is held, or nil.
func (b *pinBook) quarantined(id string) *quarantinedError {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.pending[id]; p != nil && p.quarantined {
		return &quarantinedError{id: id, changed: p.pinned != nil}
	}
	return nil
}

// list is the pending tools, of one server or all, by id.
func (b *pinBook) list(server string) []*toolmeshv1.PendingTool {
	b.mu.Lock()
	ps := make([]*pendingTool, 0, len(b.pending))
	for _, p := range b.pending {
		if server == "" || p.entry.server == server {
			ps = append(ps, p)
		}
	}
	b.mu.Unlock()
	out := make([]*toolmeshv1.PendingTool, 0, len(ps))
	for _, p := range ps {
		pt := &toolmeshv1.PendingTool{Tool: p.entry.proto, Quarantined: p.quarantined, Since: timestamppb.New(p.since)}
		var before *toolmeshv1.Tool
		was := ""
		if p.pinned != nil {
			was = p.pinned.Hash
			pt.PinnedAt, pt.PinnedBy = timestamppb.New(p.pinned.PinnedAt), p.pinned.PinnedBy
			if t, err := pinfile.Decode(p.pinned.Tool); err == nil && t != nil {
				before = t
			} else {
				// A pin written by hand has its hash alone: the diff can say only that.
				before = &toolmeshv1.Tool{Id: p.entry.id, Hash: was}
			}
			pt.Pinned = before
		}
		pt.Diff = definitionDiff(p.entry.id, was, before, p.entry.proto)
		out = append(out, pt)
	}
	sortPending(out)
	return out
}

// follow re-reads the pin file when it changes (another replica pinned or approved, an
// operator edited it, a ConfigMap was updated) until ctx ends, and judges every listing again.
func (b *pinBook) follow(ctx context.Context) {
	if b.path == "" {
		return
	}
	t := time.NewTicker(b.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.reread()
	}
}

// reread takes the pin file's pins when it changed. A file that does not read is not taken
// (an editor half way through, a bad edit): the pins in use stay, and a warning says why.
// It reads under mu, as approve writes: a read that an approval overtook would put the
// pins from before it back, and quarantine the approved tool again until the next poll.
func (b *pinBook) reread() {
	b.mu.Lock()
	if !b.watch.Changed(b.path) {
		b.mu.Unlock()
		return
	}
	f, err := b.read(b.path)
	if err != nil {
		b.mu.Unlock()
		b.log.Warn("the pin file changed but does not read; keeping the pins in use", "err", err)
		return
	}
	changed := !maps.EqualFunc(b.file, f.Pins, func(a, c pinfile.Pin) bool { return a.Hash == c.Hash && a.PinnedBy == c.PinnedBy })
	b.file = f.Pins
	// A file that changed may be writable again (a remount, fixed permissions).
	b.readOnly = ""
	b.mu.Unlock()
	if changed {
		b.log.Info("the pin file changed; judging the tools again", "path", b.path, "pins", len(f.Pins))
		if b.republish != nil {
			b.republish()
		}
	}
}

// republish judges every server's last listing again and publishes what it allows.
func (s *Service) republish() {
	for _, sess := range s.set.Load().list() {
		sess.republish()
	}
}

// republish judges the session's last listing again, as publish does.
func (s *session) republish() {
	s.pubMu.Lock()
	if s.retired || s.listed == nil {
		s.pubMu.Unlock()
		return
	}
	tools := s.pins.judge(s.name, s.srv.PinningMode(), s.listed)
	s.mu.Lock() // before the watchers are told, as in publish
	s.toolCount = len(tools)
	s.mu.Unlock()
	up, rm := s.cat.replaceServer(s.name, tools)
	s.pubMu.Unlock()
	if up > 0 || rm > 0 {
		s.log.Info("tools changed by a pin", "upserted", up, "removed", rm, "total", len(tools))
	}
}

// event is a pin event about t (sequence and time are set when it is emitted).
func (b *pinBook) event(typ toolmeshv1.PinEventType, t *tool, mode mcpconfig.Pinning, quarantined bool, was string) *toolmeshv1.PinEvent {
	return &toolmeshv1.PinEvent{Type: typ, ToolId: t.id, Pinning: string(mode), Quarantined: quarantined,
		PinnedHash: was, Hash: t.proto.GetHash(), Findings: t.proto.GetFindings()}
}

// emit records events in the buffer WatchPinEvents follows and counts them.
func (b *pinBook) emit(evs []*toolmeshv1.PinEvent) {
	for _, ev := range evs {
		b.events.add(ev)
		b.ins.events.Add(context.Background(), 1, metric.WithAttributes(
			attrServer.String(toolid.Server(ev.GetToolId())),
			attribute.String("toolmesh.pin.event", pinEventName(ev.GetType())),
			attribute.Bool("toolmesh.pin.quarantined", ev.GetQuarantined())))
	}
}

func findingRules(fs []*toolmeshv1.ToolFinding) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, f.GetField()+":"+f.GetRule())
	}
	return out
}

// pinEvents is the buffer of the last pin events; changed is closed and replaced on every add.
type pinEvents struct {
	instance string
	mu       sync.Mutex
	seq      uint64
	buf      []*toolmeshv1.PinEvent
	changed  chan struct{}
}

func (l *pinEvents) add(ev *toolmeshv1.PinEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	ev.Sequence, ev.Instance = l.seq, l.instance
	ev.Time = timestamppb.Now()
	l.buf = append(l.buf, ev)
	if len(l.buf) > pinEventBuffer {
		l.buf = append(l.buf[:0:0], l.buf[len(l.buf)-pinEventBuffer:]...)
	}
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// since returns the buffered events after sequence after, and a channel closed when another
// is added.
func (l *pinEvents) since(after uint64) ([]*toolmeshv1.PinEvent, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*toolmeshv1.PinEvent
	for _, ev := range l.buf {
		if ev.GetSequence() > after {
			out = append(out, ev)
		}
	}
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return out, l.changed
}

// pinInstruments are the pins' metrics.
type pinInstruments struct {
	meter   metric.Meter
	events  metric.Int64Counter         // toolmesh.tools.pin_events
	pending metric.Int64ObservableGauge // toolmesh.tools.pending
	flagged metric.Int64ObservableGauge // toolmesh.tools.flagged
}

func newPinInstruments(meter metric.Meter) pinInstruments {
	if meter == nil {
		meter = metricnoop.Meter{}
	}
	ins := pinInstruments{meter: meter}
	var err error
	if ins.events, err = meter.Int64Counter("toolmesh.tools.pin_events",
		metric.WithDescription("Changes of what the executor trusts about a tool, by server, event (first_seen, changed, approved, restored) and whether the tool is quarantined after it.")); err != nil {
		ins.events, _ = metricnoop.Meter{}.Int64Counter("")
	}
	if ins.pending, err = meter.Int64ObservableGauge("toolmesh.tools.pending",
		metric.WithDescription("Tool definitions waiting for approval (toolmesh tools pending), by server and whether they are quarantined (pinning: enforce) or only flagged (warn).")); err != nil {
		ins.pending, _ = metricnoop.Meter{}.Int64ObservableGauge("")
	}
	if ins.flagged, err = meter.Int64ObservableGauge("toolmesh.tools.flagged",
		metric.WithDescription("Tools served with findings (hidden characters removed, text that reads as an injection), by server.")); err != nil {
		ins.flagged, _ = metricnoop.Meter{}.Int64ObservableGauge("")
	}
	return ins
}

// observe registers the callback of the pins' gauges, over b and the catalog.
func (b *pinBook) observe(cat *catalog) (metric.Registration, error) {
	return b.ins.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		type key struct {
			server      string
			quarantined bool
		}
		pending := map[key]int64{}
		b.mu.Lock()
		for _, p := range b.pending {
			pending[key{p.entry.server, p.quarantined}]++
		}
		b.mu.Unlock()
		for k, n := range pending {
			o.ObserveInt64(b.ins.pending, n, metric.WithAttributes(attrServer.String(k.server), attribute.Bool("toolmesh.pin.quarantined", k.quarantined)))
		}
		flagged := map[string]int64{}
		for _, t := range cat.list("") {
			if len(t.GetFindings()) > 0 {
				flagged[t.GetServer()]++
			}
		}
		for server, n := range flagged {
			o.ObserveInt64(b.ins.flagged, n, metric.WithAttributes(attrServer.String(server)))
		}
		return nil
	}, b.ins.pending, b.ins.flagged)
}
