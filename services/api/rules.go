package api

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/services/api/mcpface"
)

// The executor owns the MCP servers' rules (allowedTools, excludedTools, allowDestructive,
// rateLimit: its mcpServers config) and publishes them with its catalog. The api's policy
// decides by what it publishes: the rules travel on the WatchTools stream the MCP face follows
// (a reload of the executor's config reaches the api as an event), and, until that stream has
// delivered, an answer of ListServers carries them too. Until the executor has answered, and
// while it sends none (an executor older than the rules' fields), the policy refuses every
// call as unavailable: deciding without the rules would allow what they refuse.

// serverRules keeps the api's policy on the executor's rules.
type serverRules struct {
	policy *policy.Policy
	exec   executorClient
	cfg    Config
	log    *slog.Logger
	// answered: the executor has answered with its rules (or said it has none), so a request
	// no longer asks it first (ensure).
	answered atomic.Bool
	// watched: the WatchTools stream has delivered; ListServers answers, which may be older than
	// its events, no longer change the rules.
	watched atomic.Bool
	// mu makes one change of the rules at a time, and guards fetching.
	mu sync.Mutex
	// fetching is closed when the ListServers ensure has in flight ends; nil when none is.
	fetching chan struct{}
}

// executorName says which executor the api asks, for messages.
func executorName(cfg Config) string {
	if cfg.LocalExecutor != nil {
		return "the executor of this process"
	}
	return "the executor at " + cfg.ExecutorAddr
}

// pendingRules is why the policy refuses calls before the executor has answered.
func pendingRules(cfg Config) string {
	return fmt.Sprintf("the api has not had the MCP servers' rules from %s yet (it is starting, or cannot be reached); calls are refused until it answers", executorName(cfg))
}

// noRules is why the policy refuses calls when the executor sends no rules.
func noRules(cfg Config) string {
	return fmt.Sprintf("%s sends no rules for its MCP servers: it is older than this api, and calls are refused rather than made without them; upgrade the executors before the apis", executorName(cfg))
}

// event takes the rules a WatchTools event carries: every SNAPSHOT of an executor that
// publishes them does, and a CHANGED one when a reload changed them.
func (r *serverRules) event(ev *toolmeshv1.WatchToolsResponse) {
	switch {
	case ev.GetRules() != nil:
		r.mu.Lock()
		defer r.mu.Unlock()
		r.watched.Store(true)
		r.set(policy.RulesSetFromProto(ev.GetRules()))
	case ev.GetType() == toolmeshv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT:
		r.mu.Lock()
		defer r.mu.Unlock()
		r.watched.Store(true)
		r.await(noRules(r.cfg))
	}
}

// servers takes the rules of a ListServers answer, until the WatchTools stream has delivered.
// An executor that publishes rules sets them on every server it lists.
func (r *serverRules) servers(resp *toolmeshv1.ExecutorServiceListServersResponse) {
	if r.watched.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watched.Load() {
		return
	}
	rules := make(map[string]policy.ServerRules, len(resp.GetServers()))
	for _, s := range resp.GetServers() {
		if s.GetRules() == nil {
			r.await(noRules(r.cfg))
			return
		}
		rules[s.GetName()] = policy.RulesFromProto(s.GetRules())
	}
	r.set(rules)
}

// set makes rules the policy's; rules it cannot compile leave it refusing, saying why.
func (r *serverRules) set(rules map[string]policy.ServerRules) {
	r.answered.Store(true)
	if err := r.policy.SetServers(rules); err != nil {
		r.log.Error("the executor's rules for its MCP servers do not compile here; calls are refused until it sends others", "err", err)
		r.policy.Await(fmt.Sprintf("the rules %s sent for its MCP servers were refused (%v)", executorName(r.cfg), err))
	}
}

func (r *serverRules) await(why string) {
	r.answered.Store(true)
	if r.policy.Pending() != why {
		r.log.Error("calls are refused: " + why)
	}
	r.policy.Await(why)
}

// ensure asks the executor for the rules (ListServers) when it has not answered yet, so that a
// request that comes before the WatchTools stream has delivered is decided by them rather than
// refused. One request asks at a time; those that come meanwhile wait for its answer (for at
// most their own deadline) rather than ask again.
func (r *serverRules) ensure(ctx context.Context) {
	if r.answered.Load() {
		return
	}
	r.mu.Lock()
	if ch := r.fetching; ch != nil {
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return
	}
	ch := make(chan struct{})
	r.fetching = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.fetching = nil
		r.mu.Unlock()
		close(ch)
	}()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RPCTimeout)
	defer cancel()
	resp, err := r.exec.ListServers(ctx, &toolmeshv1.ExecutorServiceListServersRequest{})
	if err != nil {
		// The policy goes on refusing, saying the executor has not answered.
		r.log.Debug("asking the executor for its MCP servers' rules", "err", err)
		return
	}
	r.servers(resp)
}

// ready is nil when the policy has the servers' rules (asking the executor first when it has
// not answered yet), else the refusal of action a: unavailable, saying why.
func (r *serverRules) ready(ctx context.Context, a policy.Action) error {
	r.ensure(ctx)
	why := r.policy.Pending()
	if why == "" {
		return nil
	}
	return r.policy.Record(ctx, &policy.Denial{Action: a, Rule: policy.RuleServerRules, Reason: why})
}

// watchTap is the executor client the MCP face follows the catalog with: each event it receives
// gives its rules to the policy first, so the api holds one WatchTools stream, not two.
type watchTap struct {
	mcpface.Executor
	rules *serverRules
}

func (t watchTap) WatchTools(ctx context.Context, in *toolmeshv1.WatchToolsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.WatchToolsResponse], error) {
	st, err := t.Executor.WatchTools(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return tappedStream{st, t.rules}, nil
}

type tappedStream struct {
	grpc.ServerStreamingClient[toolmeshv1.WatchToolsResponse]
	rules *serverRules
}

func (s tappedStream) Recv() (*toolmeshv1.WatchToolsResponse, error) {
	ev, err := s.ServerStreamingClient.Recv()
	if err == nil {
		s.rules.event(ev)
	}
	return ev, err
}
