package mcpface

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/toolid"
	"github.com/toolmesh/toolmesh/internal/toolid/toolname"
)

// MetaID is the key of a tool's _meta that holds its toolmesh id (SERVER.TOOL).
const MetaID = "toolmesh/id"

// resyncBackoffMax bounds the wait before following the executor's catalog again.
const resyncBackoffMax = 5 * time.Second

// catalogState is the executor's catalog as the face has heard it, and what it last
// published to its views.
type catalogState struct {
	mu     sync.Mutex
	tools  map[string]*toolmeshv1.Tool // by id
	synced bool                        // a snapshot has come

	// pub is what the views serve; set by the publishing goroutine only.
	pubMu sync.RWMutex
	pub   *published
	// ready is closed once the first snapshot is published; late once requests stop waiting
	// for it (awaitCatalog).
	ready     chan struct{}
	late      chan struct{}
	readyOnce sync.Once
}

// published is one version of the catalog as the views serve it.
type published struct {
	names *toolname.Names
	tools map[string]*toolmeshv1.Tool // by id
	ids   []string                    // sorted
	// defs are the tools' MCP definitions under their catalog names, by id; a tool whose
	// definition mcp-go would refuse is missing.
	defs map[string]*definition
}

// definition is a tool's MCP form, kept from one publication to the next while its id, its
// hash and its catalog name stay the same.
type definition struct {
	hash, name string
	tool       mcp.Tool // under its catalog name
}

func newCatalogState() *catalogState {
	return &catalogState{tools: map[string]*toolmeshv1.Tool{}, ready: make(chan struct{}), late: make(chan struct{}), pub: &published{names: toolname.New(), tools: map[string]*toolmeshv1.Tool{}, defs: map[string]*definition{}}}
}

func (s *catalogState) published() *published {
	s.pubMu.RLock()
	defer s.pubMu.RUnlock()
	return s.pub
}

// follow keeps the catalog in step with the executor's until ctx ends: it subscribes to
// WatchTools, takes the snapshot, applies each change, and on any failure subscribes again
// with backoff. Meanwhile the views keep serving the catalog they have: calls to a tool whose
// executor is away fail on their own.
func (f *Face) follow(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		err := f.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		f.log.Warn("mcp: following the executor's tool catalog stopped; subscribing again", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		}
		backoff = min(backoff*2, resyncBackoffMax)
	}
}

// watch runs one WatchTools subscription until it fails.
func (f *Face) watch(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := f.exec.WatchTools(ctx, &toolmeshv1.WatchToolsRequest{})
	if err != nil {
		return fmt.Errorf("watch the executor's tools: %w", err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("watch the executor's tools: %w", err)
		}
		s := f.state
		s.mu.Lock()
		switch ev.GetType() {
		case toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT:
			s.tools = make(map[string]*toolmeshv1.Tool, len(ev.GetUpserted()))
			s.synced = true
			fallthrough
		case toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_CHANGED:
			for _, t := range ev.GetUpserted() {
				s.tools[t.GetId()] = t
			}
			for _, id := range ev.GetRemovedIds() {
				delete(s.tools, id)
			}
		default:
			s.mu.Unlock()
			return fmt.Errorf("the executor sent a watch event of unknown type %v", ev.GetType())
		}
		s.mu.Unlock()
		select {
		case f.changed <- struct{}{}:
		default:
		}
	}
}

// publishLoop publishes the catalog's changes: the first snapshot at once, later changes
// ListChangedDelay after the first of them, so that a burst makes one notification.
func (f *Face) publishLoop(ctx context.Context) {
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.changed:
		}
		if !first && f.cfg.ListChangedDelay > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(f.cfg.ListChangedDelay):
			}
		}
		f.state.mu.Lock()
		synced := f.state.synced
		tools := make(map[string]*toolmeshv1.Tool, len(f.state.tools))
		for id, t := range f.state.tools {
			tools[id] = t
		}
		f.state.mu.Unlock()
		if !synced {
			continue
		}
		f.publish(tools)
		first = false
	}
}

// publish makes tools what the views serve. A view whose tools did not change is left alone,
// so that its clients get no notifications/tools/list_changed for nothing.
func (f *Face) publish(tools map[string]*toolmeshv1.Tool) {
	prev := f.state.published()
	ids := make([]string, 0, len(tools))
	for id := range tools {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// Sorted, so that which of two colliding ids keeps the plain name does not depend on the
	// order the executor sent them in: the same catalog gets the same names in every replica.
	names := toolname.New(ids...)
	pub := &published{names: names, tools: tools, ids: ids, defs: make(map[string]*definition, len(ids))}
	for _, id := range ids {
		t, name := tools[id], names.Name(id)
		if d := prev.defs[id]; d != nil && d.hash == t.GetHash() && d.name == name && sameLooks(prev.tools[id], t) {
			pub.defs[id] = d
			continue
		}
		mt, err := definitionOf(t, name)
		if err != nil {
			f.log.Warn("mcp: a tool is left out of the MCP endpoints", "tool", id, "err", err)
			continue
		}
		pub.defs[id] = &definition{hash: t.GetHash(), name: name, tool: mt}
	}
	f.state.pubMu.Lock()
	f.state.pub = pub
	f.state.pubMu.Unlock()

	f.catalog.set(pub.ids, func(id string) (server.ServerTool, bool) {
		d := pub.defs[id]
		if d == nil {
			return server.ServerTool{}, false
		}
		return server.ServerTool{Tool: d.tool, Handler: f.callHandler(id)}, true
	}, pub)
	for _, v := range f.views() {
		if v.kind == viewServer {
			f.fillServerView(v, pub)
		}
	}
	f.state.readyOnce.Do(func() { close(f.state.ready) })
}

// awaitCatalog holds a request until the face has the executor's catalog: a client that
// connects while the api is starting gets the tools rather than an empty list. Requests wait at
// most until RPCTimeout after the face started (waitForCatalog): an executor that is away longer
// must not make every request wait.
func (f *Face) awaitCatalog(ctx context.Context) {
	select {
	case <-f.state.ready:
		return
	case <-f.state.late:
		return
	default:
	}
	// Bounded on its own too, for a face that is not running (yet).
	t := time.NewTimer(f.cfg.RPCTimeout)
	defer t.Stop()
	select {
	case <-f.state.ready:
	case <-f.state.late:
	case <-ctx.Done():
	case <-t.C:
	}
}

// waitForCatalog marks the catalog late when it has not come RPCTimeout after the face started.
func (f *Face) waitForCatalog(ctx context.Context) {
	t := time.NewTimer(f.cfg.RPCTimeout)
	defer t.Stop()
	select {
	case <-f.state.ready:
		return
	case <-ctx.Done():
	case <-t.C:
		f.log.Warn("mcp: no tool catalog from the executor yet; the MCP endpoints serve without it until it comes", "waited", f.cfg.RPCTimeout)
	}
	close(f.state.late)
}

// fillServerView gives v its server's tools from pub, under their own names.
func (f *Face) fillServerView(v *view, pub *published) {
	var ids []string
	for _, id := range pub.ids {
		if toolid.Server(id) == v.server {
			ids = append(ids, id)
		}
	}
	v.set(ids, func(id string) (server.ServerTool, bool) {
		d := pub.defs[id]
		if d == nil {
			return server.ServerTool{}, false
		}
		t := d.tool
		t.Name = pub.tools[id].GetName()
		return server.ServerTool{Tool: t, Handler: f.callHandler(id)}, true
	}, pub)
}

// existingServerView is server's view, made now if the catalog has its tools.
func (f *Face) existingServerView(name string) *view {
	f.mu.Lock()
	v := f.servers[name]
	f.mu.Unlock()
	if v != nil {
		return v
	}
	for _, id := range f.state.published().ids {
		if toolid.Server(id) == name {
			return f.serverViewFor(name)
		}
	}
	return nil
}

// serverViewFor returns server's view, making it if it is new; nil once the face is closed.
func (f *Face) serverViewFor(name string) *view {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	v, ok := f.servers[name]
	if !ok {
		v = f.newView(viewServer, name)
		f.servers[name] = v
	}
	f.mu.Unlock()
	if !ok {
		f.fillServerView(v, f.state.published())
		f.ctxMu.Lock()
		l := f.ctxLists
		f.ctxMu.Unlock()
		f.fillContext(v, l)
	}
	return v
}

// visible is the views' tool filter: what the caller's token may both list and call. A tool
// it may not is left out as if it did not exist, at tools/list and at tools/call alike.
func (f *Face) visible(ctx context.Context, tools []mcp.Tool) []mcp.Tool {
	if !f.policy.Scoped() {
		return tools
	}
	c := policy.Caller{Token: auth.Name(ctx)}
	if f.policy.MayList(c) != nil {
		return []mcp.Tool{}
	}
	out := make([]mcp.Tool, 0, len(tools))
	for _, t := range tools {
		if f.mayListAndCall(c, t) {
			out = append(out, t)
		}
	}
	return out
}

// mayUse reports whether the caller in ctx may list and call t, as visible decides for a call
// (mcp-go filters the one tool called).
func (f *Face) mayUse(ctx context.Context, t mcp.Tool) bool {
	if !f.policy.Scoped() {
		return true
	}
	c := policy.Caller{Token: auth.Name(ctx)}
	return f.policy.MayList(c) == nil && f.mayListAndCall(c, t)
}

func (f *Face) mayListAndCall(c policy.Caller, t mcp.Tool) bool {
	id := idOf(t)
	return f.policy.List(c, id) == nil && f.policy.Call(c, id) == nil
}

// idOf is the toolmesh id a tool of the views carries in its _meta.
func idOf(t mcp.Tool) string {
	if t.Meta == nil {
		return ""
	}
	id, _ := t.Meta.AdditionalFields[MetaID].(string)
	return id
}

// definitionOf is t's MCP definition under name: its schemas, title and annotations as the
// server declared them, and its toolmesh id in _meta.
func definitionOf(t *toolmeshv1.Tool, name string) (mcp.Tool, error) {
	in, err := schemaJSON(t.GetInputSchema())
	if err != nil {
		return mcp.Tool{}, fmt.Errorf("input schema: %w", err)
	}
	if in == nil {
		in = json.RawMessage(`{"type":"object"}`)
	}
	out, err := schemaJSON(t.GetOutputSchema())
	if err != nil {
		return mcp.Tool{}, fmt.Errorf("output schema: %w", err)
	}
	mt := mcp.Tool{
		Name:            name,
		Title:           t.GetTitle(),
		Description:     t.GetDescription(),
		RawInputSchema:  in,
		RawOutputSchema: out,
		Meta:            &mcp.Meta{AdditionalFields: map[string]any{MetaID: t.GetId()}},
	}
	if a := t.GetAnnotations(); a != nil {
		mt.Annotations = mcp.ToolAnnotation{ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
			IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint}
	}
	// mcp-go panics on a tool whose x-mcp-header annotations break SEP-2243; leave it out instead.
	if err := mcp.ValidateParamHeaderAnnotations(&mt); err != nil {
		return mcp.Tool{}, err
	}
	return mt, nil
}

func schemaJSON(s *structpb.Struct) (json.RawMessage, error) {
	if s == nil {
		return nil, nil
	}
	b, err := json.Marshal(s.AsMap())
	if err != nil {
		return nil, err
	}
	return b, nil
}

// sameLooks reports whether a and b agree on what the executor's hash leaves out (the title
// and the annotations), so a changed title is published too.
func sameLooks(a, b *toolmeshv1.Tool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.GetTitle() == b.GetTitle() && annotationsKey(a.GetAnnotations()) == annotationsKey(b.GetAnnotations())
}

func annotationsKey(a *toolmeshv1.ToolAnnotations) string {
	if a == nil {
		return ""
	}
	b := func(p *bool) byte {
		switch {
		case p == nil:
			return '-'
		case *p:
			return 't'
		}
		return 'f'
	}
	return string([]byte{b(a.ReadOnlyHint), b(a.DestructiveHint), b(a.IdempotentHint), b(a.OpenWorldHint)})
}
