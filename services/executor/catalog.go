package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/toolid"
	"github.com/toolmesh/toolmesh/internal/tooltext"
)

// tool is one catalog entry. It is immutable once published.
type tool struct {
	id     string
	server string
	name   string // the name the MCP server knows; proto.Name is it without hidden characters
	proto  *toolmeshv1.Tool
	schema *argSchema // nil: the schema did not compile; call unvalidated
}

// withPin is t with its pin state set: t itself when it has that state, otherwise a copy whose
// proto is a new message sharing t's fields (published messages are never changed).
func (t *tool) withPin(state toolmeshv1.PinState) *tool {
	if t.proto.GetPin() == state {
		return t
	}
	p := t.proto
	c := *t
	c.proto = &toolmeshv1.Tool{
		Id: p.GetId(), Server: p.GetServer(), Name: p.GetName(), Title: p.GetTitle(), Description: p.GetDescription(),
		InputSchema: p.GetInputSchema(), OutputSchema: p.GetOutputSchema(), Annotations: p.GetAnnotations(), Hash: p.GetHash(),
		Pin: state, Findings: p.GetFindings(),
	}
	return &c
}

// watchBuffer is how many change events a WatchTools subscriber may lag behind
// before it is resynchronised with a fresh snapshot.
const watchBuffer = 64

// catalog holds every server's tools under SERVER.TOOL ids, and fans changes
// out to WatchTools subscribers.
type catalog struct {
	// rules are the servers' allowedTools and excludedTools (a tool they leave out
	// never enters the catalog, so it is never listed, indexed, offered or called)
	// and allowDestructive (for the model's calls: denied). A reload replaces them.
	rules atomic.Pointer[policy.Policy]

	mu       sync.RWMutex
	tools    map[string]*tool
	revision uint64
	// published is the servers' rules as ListServers and WatchTools carry them: the api's
	// policy decides by them, so the executor's config is the one that holds them.
	published *toolmeshv1.ServerRulesSet
	sorted    []*toolmeshv1.Tool // cache of all tools by id; nil when stale
	subs      map[*subscriber]struct{}

	// changes fans the servers' prompts and resources list_changed out to WatchListChanged
	// (prompts.go): the catalog of those is the servers' own, asked each time.
	changes listChanges
}

func newCatalog(rules *policy.Policy, published map[string]policy.ServerRules) *catalog {
	c := &catalog{tools: map[string]*tool{}, subs: map[*subscriber]struct{}{}, published: policy.RulesSetProto(published)}
	c.rules.Store(rules)
	return c
}

// setRules makes rules (compiled from published) the servers' rules. When the published rules
// changed, the revision grows by one and subscribers get a CHANGED event carrying them: before
// the tools the new rules leave out are dropped (readmit), so the api refuses a newly excluded
// tool no later than the catalog drops it.
func (c *catalog) setRules(rules *policy.Policy, published map[string]policy.ServerRules) {
	set := policy.RulesSetProto(published)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rules.Store(rules)
	if proto.Equal(set, c.published) {
		return
	}
	c.published = set
	c.revision++
	ev := &toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED, Revision: c.revision, Rules: set}
	for s := range c.subs {
		s.offer(ev)
	}
}

// serverRules is server's rules as published; an empty set for a server without rules, so that
// every server ListServers names says the executor publishes rules.
func (c *catalog) serverRules(server string) *toolmeshv1.ServerRules {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if r := c.published.GetServers()[server]; r != nil {
		return r
	}
	return &toolmeshv1.ServerRules{}
}

// admits reports whether server's rules let its tool name into the catalog.
func (c *catalog) admits(server, name string) bool { return c.rules.Load().Exists(server, name) }

// denied is the servers' rules' refusal of a call of id, or nil. It is the executor's own
// check of every call, whoever reached its port, and the one place that check lives (to grow
// into the only owner of the rules). allowedTools and excludedTools decide by the tool's name,
// so before it is looked up (t nil): a tool they leave out is not in the catalog. Once it is
// (t set), a call the model chose (byModel) is also refused a tool that may be destructive
// unless its server sets allowDestructive, as the api's offer is. Tokens and scopes stay the
// api's: the executor does not know who asks.
func (c *catalog) denied(id string, t *tool, byModel bool) error {
	rules := c.rules.Load()
	if !byModel || t == nil {
		if d := rules.Call(policy.Caller{}, id); d != nil {
			return d
		}
		return nil
	}
	if d := rules.Offer(policy.Caller{}, t.proto); d != nil {
		// The model's call of what it should not have been offered: the same reason the api
		// gives for withholding the offer, for a call.
		d.Action = policy.Call
		return d
	}
	return nil
}

// readmit drops the tools of server that its rules no longer admit (they changed with a
// reload), until the server is listed again.
func (c *catalog) readmit(server string) (removed int) {
	var keep []*tool
	for _, t := range c.serverTools(server) {
		if c.admits(server, t.name) {
			keep = append(keep, t)
		}
	}
	_, removed = c.replaceServer(server, keep)
	return removed
}

func (c *catalog) lookup(id string) *tool {
	c.mu.RLock()
	t := c.tools[id]
	c.mu.RUnlock()
	return t
}

// list returns the tools sorted by id, of one server or of all when server is "".
func (c *catalog) list(server string) []*toolmeshv1.Tool {
	c.mu.RLock()
	all := c.sorted
	c.mu.RUnlock()
	if all == nil {
		c.mu.Lock()
		all = c.sortedLocked()
		c.mu.Unlock()
	}
	if server == "" {
		return all
	}
	out := make([]*toolmeshv1.Tool, 0)
	for _, t := range all {
		if t.GetServer() == server {
			out = append(out, t)
		}
	}
	return out
}

func (c *catalog) sortedLocked() []*toolmeshv1.Tool {
	if c.sorted != nil {
		return c.sorted
	}
	out := make([]*toolmeshv1.Tool, 0, len(c.tools))
	for _, t := range c.tools {
		out = append(out, t.proto)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	c.sorted = out
	return out
}

// serverTools returns the current entries of one server by id.
func (c *catalog) serverTools(server string) map[string]*tool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := map[string]*tool{}
	for id, t := range c.tools {
		if t.server == server {
			out[id] = t
		}
	}
	return out
}

// replaceServer makes tools the whole tool set of server. When anything
// changed, the revision grows by one and subscribers get one CHANGED event.
func (c *catalog) replaceServer(server string, tools []*tool) (upserted, removed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev := &toolmeshv1.WatchToolsResponse{Type: toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED}
	seen := make(map[string]bool, len(tools))
	for _, t := range tools {
		seen[t.id] = true
		if old, ok := c.tools[t.id]; ok && old.proto.GetHash() == t.proto.GetHash() && old.proto.GetPin() == t.proto.GetPin() {
			continue
		}
		c.tools[t.id] = t
		ev.Upserted = append(ev.Upserted, t.proto)
	}
	for id, t := range c.tools {
		if t.server == server && !seen[id] {
			delete(c.tools, id)
			ev.RemovedIds = append(ev.RemovedIds, id)
		}
	}
	if len(ev.Upserted) == 0 && len(ev.RemovedIds) == 0 {
		return 0, 0
	}
	sort.Slice(ev.Upserted, func(i, j int) bool { return ev.Upserted[i].GetId() < ev.Upserted[j].GetId() })
	sort.Strings(ev.RemovedIds)
	c.sorted = nil
	c.revision++
	ev.Revision = c.revision
	for s := range c.subs {
		s.offer(ev)
	}
	return len(ev.Upserted), len(ev.RemovedIds)
}

// subscriber is one WatchTools stream. Publishing never blocks: when the
// buffer is full, the backlog is dropped and the subscriber is sent a fresh
// snapshot instead (see resync).
type subscriber struct {
	ch     chan *toolmeshv1.WatchToolsResponse
	kick   chan struct{}
	resync atomic.Bool
}

// offer is called with the catalog lock held.
func (s *subscriber) offer(ev *toolmeshv1.WatchToolsResponse) {
	if s.resync.Load() {
		return // a snapshot is coming anyway
	}
	select {
	case s.ch <- ev:
	default:
		s.resync.Store(true)
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// subscribe registers a subscriber and returns it with the current snapshot.
func (c *catalog) subscribe() (*subscriber, *toolmeshv1.WatchToolsResponse) {
	s := &subscriber{ch: make(chan *toolmeshv1.WatchToolsResponse, watchBuffer), kick: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs[s] = struct{}{}
	return s, c.snapshotLocked()
}

func (c *catalog) unsubscribe(s *subscriber) {
	c.mu.Lock()
	delete(c.subs, s)
	c.mu.Unlock()
}

// resnapshot drops s's backlog and returns a snapshot; events published after
// it carry higher revisions and go to s's buffer again.
func (c *catalog) resnapshot(s *subscriber) *toolmeshv1.WatchToolsResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		select {
		case <-s.ch:
			continue
		default:
		}
		break
	}
	s.resync.Store(false)
	return c.snapshotLocked()
}

func (c *catalog) snapshotLocked() *toolmeshv1.WatchToolsResponse {
	return &toolmeshv1.WatchToolsResponse{
		Type:     toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT,
		Upserted: c.sortedLocked(),
		Revision: c.revision,
		Rules:    c.published,
	}
}

// rawTool is the part of a tools/list entry we keep verbatim.
type rawTool struct {
	Name         string          `json:"name"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	Annotations  json.RawMessage `json:"annotations"`
}

// shownName is a tool's name as toolmesh shows it and as its id has it: without hidden
// characters (tooltext). Calls still use the name the server listed.
func shownName(name string) string {
	clean, _ := tooltext.Clean("name", name)
	return clean
}

// buildTool turns one listed tool into a catalog entry. prev is the entry the
// catalog has for the id, if any: when the definition is unchanged, its
// compiled schema and proto are reused. A tool over the schema limits is
// refused: no entry, and a *refusedError saying why. A tool whose schema does
// not compile gets an entry without a schema (called unvalidated) and the error.
//
// What the views get is cleaned first: hidden characters leave the name, title, description
// and the texts inside the schemas, and what was removed, and any injection pattern the texts
// match, becomes the tool's findings (tooltext). The hash is over the definition as listed,
// hidden characters included, so adding some is a change like any other.
func buildTool(server string, t mcp.Tool, raw *rawTool, prev *tool, lim schemaLimits) (*tool, error) {
	name, nameFinding := tooltext.Clean("name", t.Name)
	if name == "" {
		return nil, &refusedError{reason: "its name is made of hidden characters only"}
	}
	id := toolid.Join(server, name)
	var in, out, ann json.RawMessage
	if raw != nil {
		in, out, ann = raw.InputSchema, raw.OutputSchema, raw.Annotations
	}
	if len(in) == 0 || string(in) == "null" {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, err
		}
		in = b
	}
	if err := checkSchemaText(in, lim); err != nil {
		return nil, err
	}
	if (len(out) == 0 || string(out) == "null") && t.OutputSchema.Type != "" {
		if b, err := json.Marshal(t.OutputSchema); err == nil {
			out = b
		}
	}
	if len(ann) == 0 || string(ann) == "null" {
		if b, err := json.Marshal(t.Annotations); err == nil {
			ann = b
		}
	}
	inMap := decodeObject(in)
	outMap := decodeObject(out)
	hash := toolHash(t.Name, t.Title, t.Description, inMap, outMap, decodeObject(ann))
	if prev != nil && prev.proto.GetHash() == hash {
		return prev, nil
	}
	title := t.Title
	if title == "" {
		title = t.Annotations.Title
	}
	p := &toolmeshv1.Tool{
		Id:     id,
		Server: server,
		Name:   name,
		Hash:   hash,
	}
	if nameFinding != nil {
		p.Findings = append(p.Findings, nameFinding)
	}
	var found []*toolmeshv1.ToolFinding
	p.Title, found = tooltext.Inspect("title", title)
	p.Findings = append(p.Findings, found...)
	p.Description, found = tooltext.Inspect("description", t.Description)
	p.Findings = append(p.Findings, found...)
	if inMap != nil {
		shown, found := tooltext.Schema("input_schema", inMap)
		p.Findings = append(p.Findings, found...)
		if s, err := structpb.NewStruct(shown); err == nil {
			p.InputSchema = s
		}
	}
	if outMap != nil {
		shown, found := tooltext.Schema("output_schema", outMap)
		p.Findings = append(p.Findings, found...)
		if s, err := structpb.NewStruct(shown); err == nil {
			p.OutputSchema = s
		}
	}
	a := t.Annotations
	if a.ReadOnlyHint != nil || a.DestructiveHint != nil || a.IdempotentHint != nil || a.OpenWorldHint != nil {
		p.Annotations = &toolmeshv1.ToolAnnotations{
			ReadOnlyHint:    a.ReadOnlyHint,
			DestructiveHint: a.DestructiveHint,
			IdempotentHint:  a.IdempotentHint,
			OpenWorldHint:   a.OpenWorldHint,
		}
	}
	entry := &tool{id: id, server: server, name: t.Name, proto: p}
	sch, err := compileSchema(id, in, lim)
	var refused *refusedError
	switch {
	case errors.As(err, &refused):
		return nil, err
	case err != nil:
		// The caller logs it; the tool stays callable, unvalidated.
		return entry, err
	}
	entry.schema = sch
	return entry, nil
}

func decodeObject(raw json.RawMessage) map[string]any {
	if len(raw) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil
	}
	return m
}

// toolHash is a definition's fingerprint, the pin: sha256 over name, title, description, the
// schemas and the annotations (its title and hints) in canonical JSON (sorted keys), as listed,
// hex of the first 16 bytes.
func toolHash(name, title, desc string, in, out, annotations map[string]any) string {
	h := sha256.New()
	for _, s := range []string{name, title, desc} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	for _, m := range []map[string]any{in, out, annotations} {
		if m != nil {
			b, _ := json.Marshal(m) // maps marshal with sorted keys
			h.Write(b)
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
