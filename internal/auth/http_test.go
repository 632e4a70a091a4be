package auth

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// whoami answers with the token name the guard put in the request context.
var whoami = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "name=%s", Name(r.Context()))
})

type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Details []any  `json:"details"`
}

func TestHTTP(t *testing.T) {
	g, _ := newGuard(t, Config{}, "env:"+tokenEnv)
	h := g.HTTP(whoami, Paths("/healthz"), Paths("/v1/"))
	tests := []struct {
		name     string
		path     string
		auth     []string // Authorization values
		wantCode int
		wantBody string // the 200 body, or a substring of the error message
	}{
		{name: "no header", path: "/readyz", wantCode: 401, wantBody: "missing Authorization header"},
		{name: "wrong scheme", path: "/readyz", auth: []string{"Basic " + tokenCI}, wantCode: 401, wantBody: "not a Bearer token"},
		{name: "bare token without scheme", path: "/readyz", auth: []string{tokenCI}, wantCode: 401, wantBody: "not a Bearer token"},
		{name: "empty bearer", path: "/readyz", auth: []string{"Bearer "}, wantCode: 401, wantBody: "empty Bearer token"},
		{name: "unknown token", path: "/readyz", auth: []string{"Bearer not-a-configured-token-123"}, wantCode: 401, wantBody: "unknown token"},
		{name: "prefix of a good token", path: "/readyz", auth: []string{"Bearer " + tokenCI[:20]}, wantCode: 401, wantBody: "unknown token"},
		{name: "two headers", path: "/readyz", auth: []string{"Bearer " + tokenCI, "Bearer " + tokenOps}, wantCode: 401, wantBody: "more than one"},
		{name: "first token", path: "/readyz", auth: []string{"Bearer " + tokenCI}, wantCode: 200, wantBody: "name=ci"},
		{name: "second token", path: "/openapi.json", auth: []string{"Bearer " + tokenOps}, wantCode: 200, wantBody: "name=ops"},
		{name: "env token", path: "/metrics", auth: []string{"Bearer " + tokenEnv}, wantCode: 200, wantBody: "name=env"},
		{name: "scheme is case-insensitive", path: "/readyz", auth: []string{"bearer  " + tokenCI}, wantCode: 200, wantBody: "name=ci"},
		{name: "healthz skipped", path: "/healthz", wantCode: 200, wantBody: "name="},
		{name: "gateway route checked", path: "/v1/tools", wantCode: 401, wantBody: "missing Authorization header"},
		{name: "gateway route admitted", path: "/v1/tools", auth: []string{"Bearer " + tokenCI}, wantCode: 200, wantBody: "name=ci"},
		{name: "dot-dot out of a skipped path", path: "/v1/../readyz", wantCode: 401, wantBody: "missing Authorization header"},
		{name: "healthz lookalike", path: "/healthzz", wantCode: 401, wantBody: "missing Authorization header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "http://api"+tt.path, nil)
			for _, v := range tt.auth {
				r.Header.Add("Authorization", v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.wantCode {
				t.Fatalf("status = %d, want %d (body %s)", w.Code, tt.wantCode, w.Body)
			}
			if tt.wantCode == 200 {
				if got := w.Body.String(); got != tt.wantBody {
					t.Errorf("body = %q, want %q", got, tt.wantBody)
				}
				return
			}
			if got := w.Header().Get("WWW-Authenticate"); got != "Bearer" {
				t.Errorf("WWW-Authenticate = %q, want Bearer", got)
			}
			if got := w.Header().Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", got)
			}
			var body errorBody
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			if body.Code != 16 || !strings.Contains(body.Message, tt.wantBody) || body.Details == nil {
				t.Errorf("body = %+v, want code 16, a message containing %q and details []", body, tt.wantBody)
			}
			for _, secret := range []string{tokenCI, tokenOps, tokenCI[:20]} {
				if strings.Contains(w.Body.String(), secret) {
					t.Errorf("body %s contains a token", w.Body)
				}
			}
		})
	}
}

func TestHTTPRateLimit(t *testing.T) {
	// 0.01/s: once the burst is spent, the next request is 100 s away.
	g, _ := newGuard(t, Config{RateLimit: 0.01, RateBurst: 2}, "")
	h := g.HTTP(whoami, nil, nil)
	get := func(token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://api/readyz", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 2 {
		if w := get(tokenCI); w.Code != 200 {
			t.Fatalf("request %d within the burst: status %d, want 200", i+1, w.Code)
		}
	}
	w := get(tokenCI)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("request over the burst: status %d, want 429", w.Code)
	}
	secs, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil || secs < 90 || secs > 100 {
		t.Errorf("Retry-After = %q, want whole seconds near 100", w.Header().Get("Retry-After"))
	}
	var body errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Code != 8 || !strings.Contains(body.Message, "rate limit exceeded for ci") {
		t.Errorf("body = %s (%v), want code 8 and a message naming the client", w.Body, err)
	}
	if got := w.Header().Get("WWW-Authenticate"); got != "" {
		t.Errorf("WWW-Authenticate = %q on a 429, want none", got)
	}
	// Another token has its own bucket.
	if w := get(tokenOps); w.Code != 200 {
		t.Errorf("other token after the first is limited: status %d, want 200", w.Code)
	}
	// Refused requests do not use up the bucket further: an unknown token is 401, not 429.
	if w := get("not-a-configured-token-123"); w.Code != 401 {
		t.Errorf("unknown token: status %d, want 401", w.Code)
	}
}

// TestRetryAfterAtLeastOne: a wait under a second still says 1, never 0.
func TestRetryAfterAtLeastOne(t *testing.T) {
	g, _ := newGuard(t, Config{RateLimit: 1000, RateBurst: 1}, "")
	stopped := time.Now()
	g.now = func() time.Time { return stopped } // the 1 ms refill never comes
	_, _, d := g.admit([]string{"Bearer " + tokenCI}, "", true)
	if d != nil {
		t.Fatalf("first call refused: %v", d)
	}
	_, _, d = g.admit([]string{"Bearer " + tokenCI}, "", true)
	if d == nil {
		t.Fatal("second call at the same instant admitted with a burst of 1")
	}
	if d.retry != 1 {
		t.Errorf("retry = %d for a 1 ms wait, want 1", d.retry)
	}
}

func TestAuthOff(t *testing.T) {
	g, err := New(Config{RateLimit: 5}, "", slogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	if g.Enabled() {
		t.Error("Enabled with no tokens")
	}
	if g.ServerOptions() != nil {
		t.Error("ServerOptions not nil with auth off")
	}
	var nilGuard *Guard
	for _, g := range []*Guard{g, nilGuard} {
		w := httptest.NewRecorder()
		g.HTTP(whoami, nil, nil).ServeHTTP(w, httptest.NewRequest("GET", "http://api/readyz", nil))
		if w.Code != 200 {
			t.Errorf("status %d with auth off, want 200", w.Code)
		}
	}
}

// TestLookupComparesEveryToken checks the constant-time path: however the token matches (first,
// last, none), every configured digest is compared. Timing itself cannot be tested here.
func TestLookupComparesEveryToken(t *testing.T) {
	var env []string
	for i := range 8 {
		env = append(env, fmt.Sprintf("t%d:token-number-%d-0123456789", i, i))
	}
	g, _ := newGuard(t, Config{}, strings.Join(env, ","))
	calls := 0
	orig := compare
	compare = func(x, y []byte) int { calls++; return orig(x, y) }
	t.Cleanup(func() { compare = orig })

	tests := []struct {
		secret string
		want   int
	}{
		{tokenCI, 0},
		{tokenOps, 1},
		{"token-number-7-0123456789", 9},
		{"token-number-3-0123456789", 5},
		{"unknown-token-0123456789", -1},
		{"", -1},
	}
	for _, tt := range tests {
		calls = 0
		if got := g.lookup(tt.secret); got != tt.want {
			t.Errorf("lookup(%q) = %d, want %d", tt.secret, got, tt.want)
		}
		if calls != len(g.tokens) {
			t.Errorf("lookup(%q) compared %d digests, want all %d", tt.secret, calls, len(g.tokens))
		}
	}
}

func TestPaths(t *testing.T) {
	skip := Paths("/healthz", "/v1/")
	tests := map[string]bool{
		"/healthz": true, "/healthz/": false, "/v1/tools": true, "/v1": true, "/v1/": true,
		"/v1/tools/calc/add:call": true, "/readyz": false, "/v1/../readyz": false, "//healthz": false, "/v1/./tools": false,
		"/v10/x": false, "/": false,
	}
	for p, want := range tests {
		r := httptest.NewRequest("GET", "http://api/", nil)
		r.URL.Path = p
		if got := skip(r); got != want {
			t.Errorf("Paths(...)(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestRegisterFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs, "api.")
	if err := fs.Parse([]string{"--api.tokens-file=x", "--api.rate-limit=2.5", "--api.rate-burst=4"}); err != nil {
		t.Fatal(err)
	}
	if c.TokensFile != "x" || c.RateLimit != 2.5 || c.RateBurst != 4 {
		t.Errorf("config = %+v", c)
	}
	c.RateLimit = -1
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "api.rate-limit:") {
		t.Errorf("Validate = %v, want an error naming api.rate-limit", err)
	}
}
