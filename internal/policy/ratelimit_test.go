package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// limitedPolicy has server "calc" at 3 calls a minute per caller and tool, its tool "div" at 1
// per 10 s, and server "free" without a limit; its clock stands still until the test moves it.
func limitedPolicy(t *testing.T) (*Policy, *time.Time) {
	t.Helper()
	p, err := New(Config{Servers: RulesOf(map[string]mcpconfig.Server{
		"calc": {RateLimit: &mcpconfig.RateLimit{Calls: 3, Per: time.Minute},
			Tools: map[string]mcpconfig.ToolSettings{"div": {RateLimit: &mcpconfig.RateLimit{Calls: 1, Per: 10 * time.Second}}, "add": {MaxResultBytes: 10}}},
		"free": {},
	})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	p.now = func() time.Time { return now }
	return p, &now
}

func TestTake(t *testing.T) {
	p, now := limitedPolicy(t)
	ci, ops := Caller{Token: "ci"}, Caller{Token: "ops"}
	for i := range 3 {
		if _, l := p.Take(ci, "calc.add"); l != nil {
			t.Fatalf("call %d of 3: %v", i+1, l)
		}
	}
	_, l := p.Take(ci, "calc.add")
	if l == nil {
		t.Fatal("the 4th call within the minute was let through")
	}
	if l.Tool != "calc.add" || l.Token != "ci" || l.RetryAfter() != 20 || l.Field != "mcpServers.calc.rateLimit" {
		t.Errorf("refusal %+v (retry %ds); want calc.add for ci, retry after 20s, set by mcpServers.calc.rateLimit", l, l.RetryAfter())
	}
	for _, c := range []struct {
		who Caller
		id  string
	}{{ops, "calc.add"}, {ci, "calc.sub"}, {ci, "free.x"}, {ci, "calc.div"}} {
		if _, l := p.Take(c.who, c.id); l != nil {
			t.Errorf("%s calling %s: %v; another token's or another tool's calls are not limited by ci's calc.add", c.who.Token, c.id, l)
		}
	}
	if _, l := p.Take(ci, "calc.div"); l == nil || l.RetryAfter() != 10 || l.Field != "mcpServers.calc.tools.div.rateLimit" {
		t.Errorf("the tool's own limit: %v; want a refusal for 10s set by tools.div", l)
	}
	*now = now.Add(20 * time.Second)
	if _, l := p.Take(ci, "calc.add"); l != nil {
		t.Errorf("20 s later (a call's worth refilled): %v", l)
	}
	if _, l := p.Take(ci, "calc.add"); l == nil {
		t.Error("a second call 20 s later was let through")
	}
}

func TestTakeAllOrNone(t *testing.T) {
	p, _ := limitedPolicy(t)
	ci := Caller{Token: "ci"}
	if _, l := p.Take(ci, "calc.add", "calc.add", "calc.div", "calc.div"); l == nil || l.Tool != "calc.div" {
		t.Fatalf("two calls of a tool with 1 per 10 s: %v; want calc.div refused", l)
	}
	// Nothing was spent: the three calls of calc.add are still there.
	undo, l := p.Take(ci, "calc.add", "calc.add", "calc.add")
	if l != nil {
		t.Fatalf("after a refused request: %v; want its calls given back", l)
	}
	undo()
	if _, l := p.Take(ci, "calc.add", "calc.add", "calc.add"); l != nil {
		t.Errorf("after undo: %v; want the calls given back", l)
	}
	if _, l := p.Take(ci, "calc.sub", "calc.sub", "calc.sub", "calc.sub"); l == nil || l.RetryAfter() != 60 {
		t.Errorf("4 calls at once with a limit of 3: %v; want a refusal for the whole period", l)
	}
}

func TestTakeReload(t *testing.T) {
	p, _ := limitedPolicy(t)
	ci := Caller{Token: "ci"}
	if _, l := p.Take(ci, "calc.div"); l != nil {
		t.Fatal(l)
	}
	if err := p.SetServers(RulesOf(map[string]mcpconfig.Server{"calc": {RateLimit: &mcpconfig.RateLimit{Calls: 5, Per: time.Minute}}})); err != nil {
		t.Fatal(err)
	}
	if _, l := p.Take(ci, "calc.div", "calc.div"); l != nil {
		t.Errorf("after a reload to 5 a minute: %v", l)
	}
	if err := p.SetServers(RulesOf(map[string]mcpconfig.Server{"calc": {}})); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, l := p.Take(ci, "calc.div"); l != nil {
			t.Fatalf("after a reload without limits: %v", l)
		}
	}
}

// TestTakeBoundedBuckets: a caller naming ever new tools holds at most maxBucketsPerCaller
// buckets; others are not affected.
func TestTakeBoundedBuckets(t *testing.T) {
	p, now := limitedPolicy(t)
	ci := Caller{Token: "ci"}
	for i := range maxBucketsPerCaller {
		if _, l := p.Take(ci, fmt.Sprintf("calc.t%d", i)); l != nil {
			t.Fatalf("tool %d: %v", i, l)
		}
	}
	if _, l := p.Take(ci, "calc.one_more"); l == nil {
		t.Error("a bucket past the bound was made")
	}
	if _, l := p.Take(Caller{Token: "ops"}, "calc.one_more"); l != nil {
		t.Errorf("another token: %v", l)
	}
	*now = now.Add(time.Minute) // every bucket is full again, and may go
	if _, l := p.Take(ci, "calc.one_more"); l != nil {
		t.Errorf("once the buckets are idle: %v", l)
	}
	if n := len(p.calls.callers["ci"].tools); n > maxBucketsPerCaller {
		t.Errorf("%d buckets", n)
	}
}

func TestLimitedStatus(t *testing.T) {
	l := &Limited{Tool: "calc.add", Token: "ci", Limit: mcpconfig.RateLimit{Calls: 3, Per: time.Minute}, Retry: 2500 * time.Millisecond,
		Field: "mcpServers.calc.rateLimit"}
	st := status.Convert(l)
	if st.Code() != codes.ResourceExhausted || errreason.Of(st.Err()) != errreason.ToolRateLimited {
		t.Errorf("status %v %q; want ResourceExhausted, %s", st.Code(), errreason.Of(st.Err()), errreason.ToolRateLimited)
	}
	if n, ok := RetryAfterOf(st); !ok || n != 3 {
		t.Errorf("RetryInfo says %d, %v; want 3 s", n, ok)
	}
	if got := l.Header().Get("retry-after"); len(got) != 1 || got[0] != "3" {
		t.Errorf("header %v", got)
	}
	for _, want := range []string{"calc.add", "token ci", "3 calls per 1m0s", "mcpServers.calc.rateLimit", "retry after 3s"} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not say %q", st.Message(), want)
		}
	}
}

func TestRateLimitChecked(t *testing.T) {
	_, err := New(Config{Servers: map[string]ServerRules{"calc": {RateLimit: &mcpconfig.RateLimit{Calls: 0, Per: time.Minute},
		ToolRateLimits: map[string]*mcpconfig.RateLimit{"add": {Calls: 1}}}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "mcpServers.calc.rateLimit") || !strings.Contains(err.Error(), "mcpServers.calc.tools.add.rateLimit") {
		t.Errorf("got %v; want both bad limits named", err)
	}
}
