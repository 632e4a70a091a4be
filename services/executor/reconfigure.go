package executor

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/redact"
)

// maxReloadError bounds the reload error ListServers reports: one bad server in a large
// config is a line, but every server of it could be wrong at once.
const maxReloadError = 4096

// Changes is what a reload did to the servers, each list sorted.
type Changes struct {
	Added, Removed, Changed []string
	// Kept counts the servers whose sessions went on untouched.
	Kept int
}

func (c Changes) empty() bool { return len(c.Added)+len(c.Removed)+len(c.Changed) == 0 }

// Reconfigure applies a new set of MCP servers, as read again from the configuration:
// servers that are new connect; removed ones take no more calls, leave the catalog (and so
// the retrievers' index) at once, and close once their calls in flight are done (or their
// call timeout has passed); changed ones (any field of their entry, allowedTools and
// excludedTools included) get a new session, which the calls made meanwhile wait for,
// while the old one drains as a removed one does; the sessions of unchanged ones go on as
// they are. An invalid set is refused whole, with the servers in use kept; either way the
// outcome is in ListServers' config and in the toolmesh.config.* metrics.
func (s *Service) Reconfigure(servers map[string]mcpconfig.Server) (Changes, error) {
	ch, err := s.reconfigure(servers)
	s.ins.reloaded(err)
	now := time.Now()
	if err != nil {
		s.conf.refused(now, err)
		return ch, err
	}
	s.conf.reloaded(now, !ch.empty())
	if !ch.empty() {
		s.log.Info("mcp servers reconfigured", "added", ch.Added, "removed", ch.Removed, "changed", ch.Changed, "kept", ch.Kept)
	}
	return ch, nil
}

// ReloadServers is Reconfigure for a reload of the configuration (the composition root's
// reloader), saying in the log when no server changed.
func (s *Service) ReloadServers(servers map[string]mcpconfig.Server) error {
	ch, err := s.Reconfigure(servers)
	if err == nil && ch.empty() {
		s.log.Info("mcp server config read again: no server changed", "servers", ch.Kept)
	}
	return err
}

// RefuseConfig records a reload that failed before it reached the executor (the files did
// not read or parse): the servers in use are kept, and err is reported as Reconfigure's are.
func (s *Service) RefuseConfig(err error) {
	s.ins.reloaded(err)
	s.conf.refused(time.Now(), err)
}

func (s *Service) reconfigure(servers map[string]mcpconfig.Server) (Changes, error) {
	var ch Changes
	next := s.cfg
	next.Servers = servers
	if err := next.Validate(); err != nil {
		return ch, fmt.Errorf("executor config: %w", err)
	}
	published := policy.RulesOf(servers)
	rules, err := policy.New(policy.Config{Servers: published}, s.ins.meter)
	if err != nil {
		return ch, fmt.Errorf("executor config: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runDone {
		return ch, errors.New("executor stopped")
	}
	old := s.set.Load()
	ch = diffServers(old.servers, servers)
	if ch.empty() {
		return ch, nil
	}
	set := &sessionSet{servers: make(map[string]mcpconfig.Server, len(servers)), sessions: make(map[string]*session, len(servers))}
	for name, srv := range servers {
		srv.Name = name
		set.servers[name] = srv
		set.names = append(set.names, name)
		set.sessions[name] = old.sessions[name] // replaced below when added or changed
	}
	sort.Strings(set.names)
	var fresh []*session
	for _, name := range slices.Concat(ch.Added, ch.Changed) {
		sess := s.newSession(set.servers[name])
		if _, had := old.servers[name]; had {
			sess.awaitFirst()
		}
		set.sessions[name] = sess
		fresh = append(fresh, sess)
	}

	// The new set first, then retire the old sessions: a call that still finds an old
	// session retired reads the set again and finds the new one.
	s.cat.setRules(rules, published)
	s.set.Store(set)
	retire := func(name string) {
		sess := old.sessions[name]
		idle := sess.retire()
		if s.runCtx != nil {
			s.drainLocked(sess, idle)
		}
	}
	for _, name := range ch.Removed {
		retire(name)
		s.cat.replaceServer(name, nil)
		s.pins.forget(name)
	}
	for _, name := range ch.Changed {
		retire(name)
		// The new session lists the server again; until then its tools stay, but for
		// those its new rules leave out.
		s.cat.readmit(name)
	}
	// Its prompts and resources may now be others (its rules changed, or it is gone).
	for _, name := range slices.Concat(ch.Removed, ch.Changed) {
		s.cat.changes.publish(name, toolmeshv1.ListKind_LIST_KIND_PROMPTS, toolmeshv1.ListKind_LIST_KIND_RESOURCES)
	}
	if s.runCtx != nil {
		for _, sess := range fresh {
			s.startLocked(sess)
		}
	}
	return ch, nil
}

// drainLocked closes a retired session once its calls in flight are done; a call holds its
// session for at most the session's call timeout, so a drain waits no longer than that.
func (s *Service) drainLocked(sess *session, idle <-chan struct{}) {
	stop, runCtx := sess.stop, s.runCtx
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		bound := sess.timeout + time.Second
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-idle:
		case <-runCtx.Done():
		case <-t.C:
			sess.log.Warn("calls still in flight on a removed or changed mcp server; closing its session", "waited", bound)
		}
		stop()
	}()
}

// diffServers is what replacing the servers old with next changes, each list sorted.
func diffServers(old, next map[string]mcpconfig.Server) Changes {
	var ch Changes
	for name, srv := range next {
		srv.Name = name
		prev, had := old[name]
		switch {
		case !had:
			ch.Added = append(ch.Added, name)
		case !sameServer(prev, srv):
			ch.Changed = append(ch.Changed, name)
		default:
			ch.Kept++
		}
	}
	for name := range old {
		if _, ok := next[name]; !ok {
			ch.Removed = append(ch.Removed, name)
		}
	}
	sort.Strings(ch.Added)
	sort.Strings(ch.Removed)
	sort.Strings(ch.Changed)
	return ch
}

// sameServer reports whether two entries configure the same session; the warnings about
// unknown keys do not count.
func sameServer(a, b mcpconfig.Server) bool {
	a.Warnings, b.Warnings = nil, nil
	return reflect.DeepEqual(a, b)
}

// configState is the configuration in use and how its last reload went.
type configState struct {
	mu         sync.Mutex
	generation uint64
	appliedAt  time.Time // the configuration in use was applied
	lastOK     time.Time // the configuration was last loaded successfully
	reloadAt   time.Time // zero before the first reload
	lastErr    string
}

// applied records the configuration the executor starts with.
func (c *configState) applied(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.generation++
	c.appliedAt, c.lastOK = now, now
}

func (c *configState) reloaded(now time.Time, changed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if changed {
		c.generation++
		c.appliedAt = now
	}
	c.lastOK, c.reloadAt, c.lastErr = now, now, ""
}

func (c *configState) refused(now time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reloadAt = now
	// An error may quote a server's URL, with whatever credentials are in it.
	c.lastErr = shorten(redact.Text(err.Error()), maxReloadError)
}

func (c *configState) status() *toolmeshv1.ConfigStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := &toolmeshv1.ConfigStatus{Generation: c.generation, AppliedAt: timestampOf(c.appliedAt), LastReloadError: c.lastErr}
	if !c.reloadAt.IsZero() {
		out.LastReloadAt = timestampOf(c.reloadAt)
	}
	return out
}
