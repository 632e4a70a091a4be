package auth

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// countingBody records whether anyone read it.
type countingBody struct {
	io.Reader
	read *atomic.Bool
}

func (b countingBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.Reader.Read(p)
}

// TestTokenBeforeBody: a request without a good token is refused before its body is read, on
// the plain handlers and on the gateway's routes alike.
func TestTokenBeforeBody(t *testing.T) {
	g, _ := newGuard(t, Config{}, "")
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	h := g.HTTP(next, Paths("/healthz"), Paths("/v1/"))
	for _, path := range []string{"/v1/query", "/readyz"} {
		for _, auth := range []string{"", "Bearer not-a-configured-token-123"} {
			var read atomic.Bool
			r := httptest.NewRequest("POST", "http://api"+path, countingBody{strings.NewReader(`{"query":"x"}`), &read})
			if auth != "" {
				r.Header.Set("Authorization", auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusUnauthorized || read.Load() {
				t.Errorf("POST %s with %q: status %d, body read: %v; want 401 before the body is read", path, auth, w.Code, read.Load())
			}
		}
	}
}

// TestFailureThrottle: an address that keeps failing is refused with 429 and Retry-After, good
// token (never seen from it) or not, until its budget comes back; other addresses are not
// affected.
func TestFailureThrottle(t *testing.T) {
	g, _ := newGuard(t, Config{FailuresPerMinute: 3}, "")
	now := time.Unix(1_700_000_000, 0)
	g.now = func() time.Time { return now }
	h := g.HTTP(whoami, nil, nil)
	get := func(remote, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://api/readyz", nil)
		r.RemoteAddr = remote
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	const attacker, other = "203.0.113.7:40000", "198.51.100.1:1234"
	for i := range 3 {
		if w := get(attacker, "wrong-token-wrong-token"); w.Code != 401 {
			t.Fatalf("failure %d within the budget: %d, want 401", i+1, w.Code)
		}
	}
	for _, token := range []string{"wrong-token-wrong-token", tokenCI} {
		w := get("203.0.113.7:40001", token) // another port of the same host
		secs, err := strconv.Atoi(w.Header().Get("Retry-After"))
		if w.Code != 429 || err != nil || secs < 1 || secs > 20 || !strings.Contains(w.Body.String(), "too many failed authentication attempts") {
			t.Fatalf("over the budget with %s: %d Retry-After %q %s; want 429, Retry-After ≤ 20 s", token, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	if w := get(other, tokenCI); w.Code != 200 {
		t.Errorf("another address: %d, want 200", w.Code)
	}
	now = now.Add(20 * time.Second) // one attempt a 20 s comes back
	if w := get(attacker, tokenCI); w.Code != 200 {
		t.Errorf("after 20 s: %d, want 200", w.Code)
	}
	// IPv6: one host is one /64.
	for i := range 3 {
		get("[2001:db8:1:2::"+strconv.Itoa(i+1)+"]:443", "wrong-token-wrong-token")
	}
	if w := get("[2001:db8:1:2::99]:443", tokenCI); w.Code != 429 {
		t.Errorf("another address of the same /64: %d, want 429", w.Code)
	}
	if w := get("[2001:db8:1:3::1]:443", tokenCI); w.Code != 200 {
		t.Errorf("another /64: %d, want 200", w.Code)
	}
}

// TestFailuresLoggedSampled: a thousand failed attempts make a few log lines, the next of
// which says how many were left out.
func TestFailuresLoggedSampled(t *testing.T) {
	g, logs := newGuard(t, Config{FailuresPerMinute: 0}, "")
	h := g.HTTP(whoami, nil, nil)
	for i := range 1000 {
		r := httptest.NewRequest("GET", "http://api/readyz", nil)
		r.RemoteAddr = "203.0.113." + strconv.Itoa(i%200) + ":1"
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if n := strings.Count(logs.String(), "api call refused"); n == 0 || n > 15 {
		t.Fatalf("1000 failures logged %d lines, want a few:\n%s", n, logs)
	}
}

// TestThrottleBounded: past maxTracked addresses the new ones share a bucket, so the map
// stays bounded and many addresses together get no more tries than one.
func TestThrottleBounded(t *testing.T) {
	th := newThrottle(2)
	now := time.Unix(1_700_000_000, 0)
	for i := range maxTracked + 500 {
		th.fail("10."+strconv.Itoa(i>>16)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255), now)
	}
	if len(th.byAddr) > maxTracked {
		t.Fatalf("%d addresses tracked, want at most %d", len(th.byAddr), maxTracked)
	}
	if th.wait("192.0.2.200", now) == 0 {
		t.Error("a new address past the bound may try although the shared bucket is spent")
	}
	// Once budgets are whole again, the sweep makes room.
	later := now.Add(time.Hour)
	th.fail("192.0.2.201", later)
	if _, ok := th.byAddr["192.0.2.201"]; !ok || len(th.byAddr) != 1 {
		t.Errorf("after an hour: %d addresses tracked, want just the new one", len(th.byAddr))
	}
}

// TestGatewayCallsNotThrottledAsLoopback: the REST gateway reaches the gRPC server from
// loopback on behalf of every REST client. A loopback gRPC client that keeps failing must not
// lock REST clients elsewhere out, while it is itself refused.
func TestGatewayCallsNotThrottledAsLoopback(t *testing.T) {
	g, _ := newGuard(t, Config{FailuresPerMinute: 2}, "")
	ts := startREST(t, g, slogDiscard())
	conn := startGRPC(t, g, slogDiscard())
	tools := toolmeshv1.NewToolServiceClient(conn)
	for range 3 {
		_, _ = tools.ListTools(withAuth("Bearer wrong-token-wrong-token"), &toolmeshv1.ListToolsRequest{})
	}
	var header metadata.MD
	_, err := tools.ListTools(withAuth("Bearer "+tokenCI), &toolmeshv1.ListToolsRequest{}, grpc.Header(&header))
	checkCall(t, err, codes.ResourceExhausted, "too many failed authentication attempts", func() string { return "" })
	if v := header.Get("retry-after"); len(v) != 1 || v[0] == "0" {
		t.Errorf("retry-after = %v, want whole seconds", v)
	}

	req, _ := http.NewRequestWithContext(context.Background(), "GET", ts.URL+"/v1/tools", nil)
	req.Header.Set("Authorization", "Bearer "+tokenCI)
	req.Header.Set("X-Test-Remote", "198.51.100.1:1234")
	// A REST client cannot pass as the gateway by sending the header itself.
	req.Header.Set("Grpc-Metadata-X-Toolmesh-Gateway", "guess")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("REST client elsewhere after loopback failures: %d %s, want 200", resp.StatusCode, body)
	}
}

// throttledGet is a request to h from remote with the given Authorization values, its answer.
func throttledGet(h http.Handler, remote string, authorization ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "http://api/readyz", nil)
	r.RemoteAddr = remote
	for _, a := range authorization {
		r.Header.Add("Authorization", a)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestMissingCredentialCostsNothing: a request that presents no token guesses nothing, so it
// is refused 401 without spending its address's budget of failures. A web page's no-cors
// requests (<img src>) can send no Authorization at all: counting them let any page lock every
// token out of the browser's address.
func TestMissingCredentialCostsNothing(t *testing.T) {
	const attacker = "203.0.113.7:40000"
	for _, tc := range []struct {
		name          string
		authorization []string
		want          string // in the 401's message
	}{
		{name: "no Authorization", want: "missing Authorization header"},
		{name: "another scheme", authorization: []string{"Basic dXNlcjpwYXNzd29yZA=="}, want: "not a Bearer token"},
		{name: "empty Bearer", authorization: []string{"Bearer "}, want: "empty Bearer token"},
		{name: "two headers", authorization: []string{"Bearer wrong-token-wrong-token", "Bearer " + tokenCI}, want: "more than one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newGuard(t, Config{FailuresPerMinute: 3}, "")
			now := time.Unix(1_700_000_000, 0)
			g.now = func() time.Time { return now }
			h := g.HTTP(whoami, nil, nil)
			for i := range 20 {
				if w := throttledGet(h, attacker, tc.authorization...); w.Code != 401 || !strings.Contains(w.Body.String(), tc.want) {
					t.Fatalf("request %d: %d %s, want 401 with %q", i+1, w.Code, w.Body, tc.want)
				}
			}
			if w := throttledGet(h, attacker, "Bearer "+tokenCI); w.Code != 200 {
				t.Fatalf("a good token after 20 requests without one: %d %s, want 200", w.Code, w.Body)
			}
			// The budget is whole: three guesses are told they are wrong, the fourth waits.
			for i := range 3 {
				if w := throttledGet(h, attacker, "Bearer wrong-token-wrong-token"); w.Code != 401 {
					t.Fatalf("guess %d: %d, want 401", i+1, w.Code)
				}
			}
			if w := throttledGet(h, attacker, "Bearer wrong-token-wrong-token"); w.Code != 429 {
				t.Errorf("guess 4: %d, want 429", w.Code)
			}
		})
	}
}

// TestKnownTokenWhileThrottled: someone else's failures never lock out a token that has
// authenticated from the address before, while a token never seen from it waits like any guess:
// the throttled address cannot tell a right guess from a wrong one faster than its budget.
func TestKnownTokenWhileThrottled(t *testing.T) {
	g, _ := newGuard(t, Config{FailuresPerMinute: 3}, "")
	now := time.Unix(1_700_000_000, 0)
	g.now = func() time.Time { return now }
	h := g.HTTP(whoami, nil, nil)
	const shared, other = "203.0.113.7:40000", "198.51.100.1:1234"
	if w := throttledGet(h, shared, "Bearer "+tokenCI); w.Code != 200 {
		t.Fatalf("ci before any failure: %d", w.Code)
	}
	for range 4 {
		throttledGet(h, "203.0.113.7:5555", "Bearer wrong-token-wrong-token") // a guesser on the same host
	}
	guess := throttledGet(h, shared, "Bearer wrong-token-wrong-token")
	if guess.Code != 429 {
		t.Fatalf("a guess over the budget: %d, want 429", guess.Code)
	}
	if w := throttledGet(h, "203.0.113.7:40001", "Bearer "+tokenCI); w.Code != 200 || w.Body.String() != "name=ci" {
		t.Errorf("ci, seen from this address, while it is throttled: %d %s, want 200", w.Code, w.Body)
	}
	// ops is right, but was never seen from here: the answer must be the guess's, to the byte.
	ops := throttledGet(h, shared, "Bearer "+tokenOps)
	if ops.Code != 429 || ops.Body.String() != guess.Body.String() || ops.Header().Get("Retry-After") != guess.Header().Get("Retry-After") {
		t.Errorf("ops, never seen from here: %d Retry-After %q %s; want what a wrong guess gets: %d %q %s",
			ops.Code, ops.Header().Get("Retry-After"), ops.Body, guess.Code, guess.Header().Get("Retry-After"), guess.Body)
	}
	// Seen from another address does not count here.
	if w := throttledGet(h, other, "Bearer "+tokenOps); w.Code != 200 {
		t.Fatalf("ops from another address: %d, want 200", w.Code)
	}
	if w := throttledGet(h, shared, "Bearer "+tokenOps); w.Code != 429 {
		t.Errorf("ops from the throttled address after it was seen elsewhere: %d, want 429", w.Code)
	}
	// The budget comes back (one try every 20 s): ops gets in, and is known from then on.
	now = now.Add(20 * time.Second)
	if w := throttledGet(h, shared, "Bearer "+tokenOps); w.Code != 200 {
		t.Fatalf("ops after 20 s: %d, want 200", w.Code)
	}
	throttledGet(h, shared, "Bearer wrong-token-wrong-token")
	if w := throttledGet(h, shared, "Bearer wrong-token-wrong-token"); w.Code != 429 {
		t.Fatalf("guesses after 20 s: %d, want 429 again", w.Code)
	}
	if w := throttledGet(h, shared, "Bearer "+tokenOps); w.Code != 200 {
		t.Errorf("ops, now seen from here, while throttled: %d, want 200", w.Code)
	}
	// A known token is forgotten a while after its last use.
	now = now.Add(knownFor + time.Minute)
	for range 4 {
		throttledGet(h, shared, "Bearer wrong-token-wrong-token")
	}
	if w := throttledGet(h, shared, "Bearer "+tokenCI); w.Code != 429 {
		t.Errorf("ci, last seen from here %s ago: %d, want 429", knownFor, w.Code)
	}
}

// TestKnownTokensBounded: the tokens remembered per address are bounded like the failures;
// once every slot is taken, a new address's token is not remembered (it waits like a guess if
// its address is throttled) until the sweep finds expired ones.
func TestKnownTokensBounded(t *testing.T) {
	th := newThrottle(2)
	now := time.Unix(1_700_000_000, 0)
	for i := range maxTracked + 500 {
		th.succeed("10."+strconv.Itoa(i>>16)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255), 0, now)
	}
	if n := th.knownAddrs(); n > maxTracked {
		t.Fatalf("%d addresses remembered, want at most %d", n, maxTracked)
	}
	if !th.knows("10.0.0.1", 0, now) || th.knows("10.0.0.1", 1, now) {
		t.Error("10.0.0.1 should know token 0 only")
	}
	later := now.Add(knownFor + time.Hour)
	th.succeed("192.0.2.201", 1, later)
	if n := th.knownAddrs(); !th.knows("192.0.2.201", 1, later) || n != 1 {
		t.Errorf("after the old ones expired: %d addresses remembered, want just the new one", n)
	}
}
