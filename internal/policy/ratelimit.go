package policy

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// A tool's rateLimit {calls: N, per: D} is a token bucket per caller (API token) and tool: N
// calls at once, refilled at N per D, so a caller that stays within N calls a window of D is
// never refused and over any long span makes at most N per D. Each caller has its own buckets
// (other tokens are not slowed by one that is), and each tool its own (one busy tool does not
// stop the others); without API tokens every caller is the same caller. The buckets live in
// the process: replicas of the api each count their own calls.

// RuleRateLimit is the rule a *Limited applies, for metrics.
const RuleRateLimit Rule = "rateLimit"

// maxBucketsPerCaller bounds the buckets one caller holds: a caller can name tools that do not
// exist, and each would be a bucket. Past it, buckets that are full again (as good as new) are
// let go; if none is, the caller's calls of further tools are refused until one is.
const maxBucketsPerCaller = 1024

// callLimits holds the buckets, by caller and then tool id.
type callLimits struct {
	mu      sync.Mutex
	callers map[string]*callerBuckets
}

type callerBuckets struct {
	tools     map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	limit mcpconfig.RateLimit // the rule it was made for: a reload that changes it starts over
	lim   *rate.Limiter
}

func newBucket(l mcpconfig.RateLimit) *bucket {
	return &bucket{limit: l, lim: rate.NewLimiter(rate.Limit(float64(l.Calls)/l.Per.Seconds()), l.Calls)}
}

// full reports whether b is as good as new at now.
func (b *bucket) full(now time.Time) bool { return b.lim.TokensAt(now) >= float64(b.limit.Calls) }

// Limited is a call refused by its tool's rate limit. As an error it is a gRPC
// ResourceExhausted status (HTTP 429) with errreason.ToolRateLimited (metadata tool, calls,
// per) and a google.rpc.RetryInfo; Header is the "retry-after" header to send with it.
type Limited struct {
	Tool  string
	Token string // the caller's token name; "" without API tokens
	Limit mcpconfig.RateLimit
	// Retry is how long until the call would be let through; at least a second.
	Retry time.Duration
	// Field is where the limit is set, for messages: mcpServers.S.rateLimit or
	// mcpServers.S.tools.T.rateLimit.
	Field string
}

// RetryAfter is Retry in whole seconds, rounded up, as Retry-After takes it.
func (l *Limited) RetryAfter() int { return max(1, int(math.Ceil(l.Retry.Seconds()))) }

func (l *Limited) Error() string {
	who := "this caller"
	if l.Token != "" {
		who = "token " + l.Token
	}
	return fmt.Sprintf("rate limit of %s reached for %s: %d calls per %s (%s); retry after %ds",
		l.Tool, who, l.Limit.Calls, l.Limit.Per, l.Field, l.RetryAfter())
}

// GRPCStatus makes a *Limited returned by a gRPC handler a ResourceExhausted status.
func (l *Limited) GRPCStatus() *status.Status {
	st := status.New(codes.ResourceExhausted, l.Error())
	info := &errdetails.ErrorInfo{Reason: errreason.ToolRateLimited, Domain: errreason.Domain, Metadata: map[string]string{
		"tool": l.Tool, "calls": strconv.Itoa(l.Limit.Calls), "per": l.Limit.Per.String()}}
	retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(l.RetryAfter()) * time.Second)}
	if ds, err := st.WithDetails(info, retry); err == nil {
		return ds
	}
	return st
}

// Header is the response header metadata to send with the refusal: "retry-after" in whole
// seconds, which the REST gateway turns into Retry-After.
func (l *Limited) Header() metadata.MD {
	return metadata.Pairs("retry-after", strconv.Itoa(l.RetryAfter()))
}

// RetryAfterOf is the wait, in whole seconds, a status's google.rpc.RetryInfo asks for; ok is
// false when it has none.
func RetryAfterOf(st *status.Status) (int, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return max(1, int(math.Ceil(ri.GetRetryDelay().AsDuration().Seconds()))), true
		}
	}
	return 0, false
}

// RateLimitOf is the rate limit of the tool id and where it is set; nil when it has none.
func (p *Policy) RateLimitOf(id string) (*mcpconfig.RateLimit, string) {
	server, name, ok := toolid.Split(id)
	if p == nil || !ok {
		return nil, ""
	}
	r := p.rulesOf(server)
	if r == nil {
		return nil, ""
	}
	if l := r.toolRate[name]; l != nil {
		return l, fmt.Sprintf("mcpServers.%s.tools.%s.rateLimit", server, name)
	}
	if r.rate != nil {
		return r.rate, fmt.Sprintf("mcpServers.%s.rateLimit", server)
	}
	return nil, ""
}

// Take spends one call of each of ids (a tool id may repeat) from c's rate limits: all of
// them, or, when one is over its limit, none and the first refusal. undo gives back what it
// took, for calls that are not made after all (a later check refused the request); it is
// never nil.
func (p *Policy) Take(c Caller, ids ...string) (undo func(), refused *Limited) {
	if p == nil {
		return func() {}, nil
	}
	now := p.clock()
	type want struct {
		limit *mcpconfig.RateLimit
		field string
		n     int
	}
	wants := map[string]*want{}
	var order []string
	for _, id := range ids {
		if w := wants[id]; w != nil {
			w.n++
			continue
		}
		l, field := p.RateLimitOf(id)
		if l == nil {
			continue
		}
		wants[id] = &want{limit: l, field: field, n: 1}
		order = append(order, id)
	}
	if len(order) == 0 {
		return func() {}, nil
	}
	p.calls.mu.Lock()
	defer p.calls.mu.Unlock()
	var taken []*rate.Reservation
	cancel := func(at time.Time) {
		for _, r := range taken {
			r.CancelAt(at)
		}
	}
	for _, id := range order {
		w := wants[id]
		b, full := p.calls.bucket(c.Token, id, *w.limit, now)
		var wait time.Duration
		switch {
		case full:
			// The caller holds as many buckets as it may, none of them idle: its calls of
			// another tool wait until one is.
			wait = w.limit.Per / time.Duration(w.limit.Calls)
		case w.n > w.limit.Calls:
			wait = w.limit.Per // never at once: a request names more calls than the limit
		default:
			r := b.lim.ReserveN(now, w.n)
			if d := r.DelayFrom(now); d > 0 {
				r.CancelAt(now)
				wait = d
			} else {
				taken = append(taken, r)
			}
		}
		if wait > 0 {
			cancel(now)
			return func() {}, &Limited{Tool: id, Token: c.Token, Limit: *w.limit, Retry: wait, Field: w.field}
		}
	}
	return func() {
		p.calls.mu.Lock()
		defer p.calls.mu.Unlock()
		cancel(p.clock())
	}, nil
}

// bucket is the bucket of token's calls of id under limit l; full is true when the caller
// holds maxBucketsPerCaller and none can go. calls.mu is held.
func (cl *callLimits) bucket(token, id string, l mcpconfig.RateLimit, now time.Time) (*bucket, bool) {
	if cl.callers == nil {
		cl.callers = map[string]*callerBuckets{}
	}
	cb := cl.callers[token]
	if cb == nil {
		cb = &callerBuckets{tools: map[string]*bucket{}}
		cl.callers[token] = cb
	}
	if b := cb.tools[id]; b != nil && b.limit == l {
		return b, false
	}
	if _, ok := cb.tools[id]; !ok && len(cb.tools) >= maxBucketsPerCaller {
		if now.Sub(cb.lastSweep) >= time.Second {
			cb.lastSweep = now
			for k, b := range cb.tools {
				if b.full(now) {
					delete(cb.tools, k)
				}
			}
		}
		if len(cb.tools) >= maxBucketsPerCaller {
			return nil, true
		}
	}
	b := newBucket(l)
	cb.tools[id] = b
	return b, false
}

// clock is the time the buckets read; tests stop it.
func (p *Policy) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// checkRateLimit says what is wrong with a rate limit given in code (the config's are checked
// when it is parsed).
func checkRateLimit(field string, l *mcpconfig.RateLimit) []string {
	if l == nil || l.Calls >= 1 && l.Per > 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s: %d calls per %s is not a rate: calls must be at least 1 and per above 0", field, l.Calls, l.Per)}
}

// RecordLimited counts l as Record counts a denial (action call, rule rateLimit) and marks it
// on the span in ctx. It returns l.
func (p *Policy) RecordLimited(ctx context.Context, l *Limited) *Limited {
	p.Record(ctx, &Denial{Action: Call, Tool: l.Tool, Rule: RuleRateLimit})
	return l
}
