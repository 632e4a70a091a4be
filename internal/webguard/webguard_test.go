package webguard

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newGuard(t testing.TB, args ...string) (*Guard, *bytes.Buffer) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var cfg Config
	cfg.RegisterFlags(fs, "api.")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	g, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return g, &logs
}

// TestChecks is the attacks a web page can make on an API on 127.0.0.1:7700, and the requests
// that must still work.
func TestChecks(t *testing.T) {
	const api = "127.0.0.1:7700"
	tests := []struct {
		name        string
		args        []string // flags
		method      string
		path        string
		host        string
		origin      string
		contentType string
		fetch       string // Sec-Fetch-Site, -Mode and -Dest, space-separated, as a browser sends them
		want        int    // 0: passed on (200)
		msg         string
		cors        bool // Access-Control-Allow-Origin set
	}{
		// DNS rebinding: the page's own name resolves to 127.0.0.1.
		{name: "rebound name reads the tools", method: "GET", path: "/v1/tools", host: "evil.example:7700", want: 403, msg: `host "evil.example:7700" is not allowed`},
		{name: "rebound name posts a query", method: "POST", path: "/v1/query", host: "evil.example:7700", origin: "http://evil.example:7700", contentType: "application/json", want: 403, msg: "--api.allowed-hosts"},
		{name: "rebound name, health probe", method: "GET", path: "/healthz", host: "evil.example", want: 403},
		{name: "loopback IP", method: "GET", path: "/v1/tools", host: api},
		{name: "IPv6 loopback", method: "GET", path: "/v1/tools", host: "[::1]:7700"},
		{name: "any IP address", method: "GET", path: "/v1/tools", host: "10.1.2.3:7700"},
		{name: "localhost", method: "GET", path: "/v1/tools", host: "LocalHost:7700"},
		{name: "a .localhost name", method: "GET", path: "/v1/tools", host: "toolmesh.localhost:7700"},
		{name: "no Host (HTTP/1.0)", method: "GET", path: "/v1/tools", host: ""},
		{name: "allowed name", args: []string{"--api.allowed-hosts=toolmesh.example.com"}, method: "GET", path: "/v1/tools", host: "toolmesh.example.com"},
		{name: "allowed name, trailing dot", args: []string{"--api.allowed-hosts=toolmesh.example.com"}, method: "GET", path: "/v1/tools", host: "toolmesh.example.com.:443"},
		{name: "allowed domain", args: []string{"--api.allowed-hosts=*.example.com"}, method: "GET", path: "/v1/tools", host: "a.b.example.com"},
		{name: "allowed domain is not a suffix match", args: []string{"--api.allowed-hosts=*.example.com"}, method: "GET", path: "/v1/tools", host: "evilexample.com", want: 403},
		{name: "any host", args: []string{"--api.allowed-hosts=*"}, method: "GET", path: "/v1/tools", host: "evil.example"},

		// Cross-site requests.
		{name: "cross-site text/plain query", method: "POST", path: "/v1/query", host: api, origin: "https://evil.example", contentType: "text/plain", want: 403, msg: `origin "https://evil.example" is not allowed`},
		{name: "cross-site JSON call", method: "POST", path: "/v1/tools/sqlite/query:call", host: api, origin: "https://evil.example", contentType: "application/json", want: 403},
		{name: "cross-site read", method: "GET", path: "/v1/servers", host: api, origin: "https://evil.example", want: 403},
		{name: "cross-site preflight", method: "OPTIONS", path: "/v1/query", host: api, origin: "https://evil.example", want: 403},
		{name: "null origin", method: "POST", path: "/v1/query", host: api, origin: "null", contentType: "application/json", want: 403},
		{name: "another loopback port is another origin", method: "POST", path: "/v1/query", host: api, origin: "http://127.0.0.1:8080", contentType: "application/json", want: 403},
		{name: "health probe from any page", method: "GET", path: "/healthz", host: api, origin: "https://evil.example"},
		{name: "the console's own origin", method: "POST", path: "/v1/query", host: api, origin: "http://" + api, contentType: "application/json"},
		{name: "the console behind a TLS proxy", args: []string{"--api.allowed-hosts=toolmesh.example.com"}, method: "POST", path: "/v1/query", host: "toolmesh.example.com", origin: "https://toolmesh.example.com", contentType: "application/json"},
		{name: "configured origin", args: []string{"--api.allowed-origins=https://app.example"}, method: "POST", path: "/v1/query", host: api, origin: "https://app.example", contentType: "application/json", cors: true},
		{name: "configured origin, preflight", args: []string{"--api.allowed-origins=https://app.example"}, method: "OPTIONS", path: "/v1/query", host: api, origin: "https://App.Example/", want: 204, cors: true},
		{name: "any origin", args: []string{"--api.allowed-origins=*"}, method: "GET", path: "/v1/tools", host: api, origin: "https://x.example", cors: true},

		// Simple requests: no preflight, so the body type is what stops them.
		{name: "text/plain query without Origin", method: "POST", path: "/v1/query", host: api, contentType: "text/plain", want: 415, msg: `Content-Type "text/plain" is not accepted`},
		{name: "form post", method: "POST", path: "/v1/tools/calculator/add:call", host: api, contentType: "application/x-www-form-urlencoded", want: 415},
		{name: "multipart post", method: "POST", path: "/v1/query", host: api, contentType: "multipart/form-data; boundary=x", want: 415},
		{name: "no Content-Type", method: "POST", path: "/v1/query", host: api, want: 415, msg: "Content-Type is missing"},
		{name: "JSON with charset", method: "POST", path: "/v1/query", host: api, contentType: "Application/JSON; charset=utf-8"},
		{name: "GET needs no Content-Type", method: "GET", path: "/v1/tools", host: api, contentType: "text/plain"},
		{name: "DELETE is left to the router", method: "DELETE", path: "/v1/tools", host: api},
		{name: "PUT is checked", method: "PUT", path: "/v1/tools", host: api, contentType: "text/plain", want: 415},

		// A page's no-cors requests (<img>, <script>, <link>) carry no Origin; the browser says
		// where they come from in Sec-Fetch-Site.
		{name: "<img> from another site", method: "GET", path: "/v1/tools", host: api, fetch: "cross-site no-cors image", want: 403, msg: "Sec-Fetch-Site: cross-site"},
		{name: "<script> from another site", method: "GET", path: "/readyz", host: api, fetch: "cross-site no-cors script", want: 403},
		{name: "<img> from another port of localhost", method: "GET", path: "/v1/tools", host: "localhost:7700", fetch: "same-site no-cors image", want: 403, msg: "Sec-Fetch-Site: same-site"},
		{name: "another site frames the console", method: "GET", path: "/ui/", host: api, fetch: "cross-site navigate iframe", want: 403},
		{name: "another site's <form> GET in a frame", method: "GET", path: "/v1/tools", host: api, fetch: "cross-site navigate iframe", want: 403},
		{name: "another site's link to the console", method: "GET", path: "/ui/", host: api, fetch: "cross-site navigate document"},
		{name: "a link from another port of localhost", method: "GET", path: "/ui/", host: api, fetch: "same-site navigate document"},
		{name: "the console's own fetch", method: "POST", path: "/v1/query", host: api, origin: "http://" + api, contentType: "application/json", fetch: "same-origin cors empty"},
		{name: "the console's own GET (no Origin)", method: "GET", path: "/v1/tools", host: api, fetch: "same-origin cors empty"},
		{name: "a typed URL", method: "GET", path: "/v1/tools", host: api, fetch: "none navigate document"},
		{name: "configured origin's fetch is cross-site", args: []string{"--api.allowed-origins=https://app.example"}, method: "POST", path: "/v1/query", host: api,
			origin: "https://app.example", contentType: "application/json", fetch: "cross-site cors empty", cors: true},
		{name: "configured origin's <img> is not", args: []string{"--api.allowed-origins=https://app.example"}, method: "GET", path: "/v1/tools", host: api, fetch: "cross-site no-cors image", want: 403},
		{name: "health probe from another site's <img>", method: "GET", path: "/healthz", host: api, fetch: "cross-site no-cors image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, logs := newGuard(t, tt.args...)
			next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "passed") })
			h := g.Handler(next, func(r *http.Request) bool { return r.URL.Path == "/healthz" })
			req := httptest.NewRequest(tt.method, "http://"+api+tt.path, strings.NewReader(`{"query":"@calculator.add({\"a\":1,\"b\":2})"}`))
			req.Host = tt.host
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.method == "OPTIONS" {
				req.Header.Set("Access-Control-Request-Method", "POST")
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.fetch != "" {
				f := strings.Fields(tt.fetch)
				req.Header.Set("Sec-Fetch-Site", f[0])
				req.Header.Set("Sec-Fetch-Mode", f[1])
				req.Header.Set("Sec-Fetch-Dest", f[2])
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			want := tt.want
			if want == 0 {
				want = 200
			}
			if rec.Code != want {
				t.Fatalf("got %d %s, want %d", rec.Code, rec.Body, want)
			}
			if got := rec.Header().Get("Access-Control-Allow-Origin") != ""; got != tt.cors {
				t.Errorf("Access-Control-Allow-Origin %q, want set: %v", rec.Header().Get("Access-Control-Allow-Origin"), tt.cors)
			}
			if want < 400 {
				if want == 200 && rec.Body.String() != "passed" {
					t.Errorf("body %q, want the handler's", rec.Body)
				}
				return
			}
			var body struct {
				Code    *int     `json:"code"`
				Message string   `json:"message"`
				Details []string `json:"details"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Code == nil || body.Message == "" || body.Details == nil {
				t.Fatalf("body %s (%v), want {code, message, details}", rec.Body, err)
			}
			if !strings.Contains(body.Message, tt.msg) {
				t.Errorf("message %q, want it to contain %q", body.Message, tt.msg)
			}
			if !strings.Contains(logs.String(), "http request refused") {
				t.Errorf("refusal not logged: %q", logs)
			}
		})
	}
}

// TestRefusalsLoggedSampled: a page that keeps trying makes a few log lines, not one a try.
func TestRefusalsLoggedSampled(t *testing.T) {
	g, logs := newGuard(t)
	h := g.Handler(http.NotFoundHandler(), nil)
	for range 500 {
		req := httptest.NewRequest("POST", "/v1/query", strings.NewReader("x"))
		req.Header.Set("Origin", "https://evil.example")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if n := strings.Count(logs.String(), "\n"); n == 0 || n > 20 {
		t.Errorf("500 refusals made %d log lines, want a few", n)
	}
}

// TestHostAllowed: the Host rule other handlers ask for (the MCP face's) is the one Check
// applies, and DefaultHostAllowed is that of a guard with no --api.allowed-hosts.
func TestHostAllowed(t *testing.T) {
	g, _ := newGuard(t, "--api.allowed-hosts=toolmesh.example.com,*.corp.example")
	for _, tt := range []struct {
		host           string
		byDefault, cfg bool
	}{
		{"localhost:7700", true, true},
		{"LOCALHOST", true, true},
		{"foo.localhost:7700", true, true},
		{"a.b.localhost.", true, true},
		{"127.0.0.1:7700", true, true},
		{"[::1]:7700", true, true},
		{"10.1.2.3", true, true},
		{"", true, true},
		{"toolmesh.example.com:443", false, true},
		{"api.corp.example", false, true},
		{"evil.example:7700", false, false},
		{"localhost.evil.example", false, false},
		{"evillocalhost", false, false},
	} {
		if got := DefaultHostAllowed(tt.host); got != tt.byDefault {
			t.Errorf("DefaultHostAllowed(%q) = %v, want %v", tt.host, got, tt.byDefault)
		}
		if got := g.HostAllowed(tt.host); got != tt.cfg {
			t.Errorf("HostAllowed(%q) = %v, want %v", tt.host, got, tt.cfg)
		}
		req := httptest.NewRequest("GET", "http://127.0.0.1/v1/tools", nil)
		req.Host = tt.host
		if refused := g.Check(req, false) != nil; refused == tt.cfg {
			t.Errorf("Check with Host %q refused: %v, but HostAllowed says %v", tt.host, refused, tt.cfg)
		}
	}
	var none *Guard
	if !none.HostAllowed("evil.example") {
		t.Error("a nil Guard refuses a host; it lets everything through")
	}
}

func TestValidate(t *testing.T) {
	for _, args := range [][]string{
		{"--api.allowed-hosts=http://toolmesh.example.com"},
		{"--api.allowed-hosts=toolmesh.example.com:7700"},
		{"--api.allowed-hosts=*example.com"},
		{"--api.allowed-origins=app.example"},
		{"--api.allowed-origins=https://app.example/path"},
		{"--api.allowed-origins=https://user@app.example"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var cfg Config
		cfg.RegisterFlags(fs, "api.")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		err := cfg.Validate()
		flagName, _, _ := strings.Cut(strings.TrimPrefix(args[0], "--"), "=")
		if err == nil || !strings.Contains(err.Error(), flagName) {
			t.Errorf("%v: Validate() = %v, want an error naming %s", args, err, flagName)
		}
	}
}

// BenchmarkCheck is the cost of the three checks on a request that passes them: a console
// query (same origin, JSON) and a client's GET.
func BenchmarkCheck(b *testing.B) {
	g, _ := newGuard(b, "--api.allowed-hosts=toolmesh.example.com,*.internal.example", "--api.allowed-origins=https://app.example")
	post := httptest.NewRequest("POST", "http://127.0.0.1:7700/v1/query", nil)
	post.Header.Set("Origin", "http://127.0.0.1:7700")
	post.Header.Set("Content-Type", "application/json")
	named := httptest.NewRequest("GET", "http://toolmesh.example.com/v1/tools", nil)
	cross := httptest.NewRequest("POST", "http://api.internal.example/v1/query", nil)
	cross.Header.Set("Origin", "https://app.example")
	cross.Header.Set("Content-Type", "application/json; charset=utf-8")
	for _, bc := range []struct {
		name string
		r    *http.Request
	}{{"console-post", post}, {"named-get", named}, {"cors-post", cross}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			// Each call timed on its own for the median (the clock adds some tens of ns).
			took := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				start := time.Now()
				if g.Check(bc.r, false) != nil {
					b.Fatal("refused")
				}
				if len(took) < cap(took) {
					took = append(took, time.Since(start))
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
