package policy

import (
	"fmt"
	"slices"
	"testing"
	"time"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// benchPolicy is a policy at the scale: 1,000 tools on 50 servers, a token scope of
// 100 patterns of every shape (30 whole servers, 40 exact ids, 30 with wildcards), every server
// with an allowedTools and an excludedTools glob, and a request bounded to 10 servers.
func benchPolicy(b *testing.B) (*Policy, Caller, []string) {
	b.Helper()
	const servers, perServer = 50, 20
	var ids []string
	rules := map[string]ServerRules{}
	for s := range servers {
		name := fmt.Sprintf("srv%02d", s)
		rules[name] = ServerRules{AllowedTools: []string{"*_tool_*"}, ExcludedTools: []string{"*_tool_19"}}
		for i := range perServer {
			ids = append(ids, fmt.Sprintf("%s.get_tool_%d", name, i))
		}
	}
	var scope []string
	for i := range 30 {
		scope = append(scope, fmt.Sprintf("srv%02d", i))
	}
	for i := range 40 {
		scope = append(scope, fmt.Sprintf("srv%02d.get_tool_%d", 30+i%20, i%20))
	}
	for i := range 30 {
		scope = append(scope, fmt.Sprintf("srv%d?.get_tool_%d*", i%5, i%10))
	}
	if len(scope) != 100 {
		b.Fatalf("%d rules", len(scope))
	}
	p, err := New(Config{Tokens: map[string]Scope{"bench": {Call: scope, Query: true}}, Servers: rules}, nil)
	if err != nil {
		b.Fatal(err)
	}
	var bound []string
	for i := range 10 {
		bound = append(bound, fmt.Sprintf("srv%02d", i*5))
	}
	return p, Caller{Token: "bench", Servers: bound}, ids
}

// BenchmarkDecideCall is the cost of one call's decision (Call, as the api asks before every
// call; a mix of allowed and denied ones); p50-ns and p99-ns are per decision, the target
// being p50 ≤ 5 µs.
func BenchmarkDecideCall(b *testing.B) {
	p, c, ids := benchPolicy(b)
	benchDecisions(b, ids, func(id string) bool { return p.Call(c, id) == nil })
}

// BenchmarkDecideCallUnbounded is Call for requests without a servers list: most decisions
// allow, so this is the cost of the common path.
func BenchmarkDecideCallUnbounded(b *testing.B) {
	p, c, ids := benchPolicy(b)
	c.Servers = nil
	benchDecisions(b, ids, func(id string) bool { return p.Call(c, id) == nil })
}

// BenchmarkDecideOffer is Offer, as the agent loop asks for each retrieved tool.
func BenchmarkDecideOffer(b *testing.B) {
	p, c, ids := benchPolicy(b)
	tools := make(map[string]*toolmeshv1.Tool, len(ids))
	for i, id := range ids {
		tools[id] = tool(id, boolp(i%2 == 0), nil)
	}
	benchDecisions(b, ids, func(id string) bool { return p.Offer(c, tools[id]) == nil })
}

func benchDecisions(b *testing.B, ids []string, decide func(string) bool) {
	const samples = 1 << 16
	lat := make([]time.Duration, 0, samples)
	allowed := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		id := ids[i%len(ids)]
		if len(lat) < samples {
			start := time.Now()
			ok := decide(id)
			lat = append(lat, time.Since(start))
			if ok {
				allowed++
			}
			continue
		}
		decide(id)
	}
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		b.ReportMetric(float64(allowed)/float64(len(lat)), "allowed")
	}
}
