package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHandler(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET "+Prefix, Handler(Config{JaegerURL: "http://jaeger.example:16686/"}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	cases := []struct {
		path     string
		code     int
		ctype    string
		contains string
	}{
		{"/ui/", 200, "text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		{"/ui/app.js", 200, "text/javascript; charset=utf-8", "'use strict';"},
		{"/ui/style.css", 200, "text/css; charset=utf-8", ":focus-visible"},
		{"/ui/config.json", 200, "application/json", `{"jaeger_url":"http://jaeger.example:16686"}`},
		{"/ui/index.html", 404, "", ""},
		{"/ui/nope.js", 404, "", ""},
		{"/ui/static/app.js", 404, "", ""},
	}
	for _, tc := range cases {
		resp, err := client.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("GET %s: %d, want %d", tc.path, resp.StatusCode, tc.code)
			continue
		}
		if tc.code != 200 {
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: body does not contain %q", tc.path, tc.contains)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
	}

	// /ui redirects to /ui/ (the mux does it), where the page's relative links work.
	resp, err := client.Get(srv.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestHandlerRevalidates(t *testing.T) {
	h := Handler(Config{})
	get := func(etag string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/ui/app.js", nil)
		if etag != "" {
			r.Header.Set("If-None-Match", etag)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	first := get("")
	etag := first.Header().Get("ETag")
	if first.Code != 200 || etag == "" || first.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("first GET: %d, ETag %q, Cache-Control %q", first.Code, etag, first.Header().Get("Cache-Control"))
	}
	if again := get(etag); again.Code != http.StatusNotModified || again.Body.Len() != 0 {
		t.Errorf("GET with If-None-Match %s: %d with %d bytes, want 304 and no body", etag, again.Code, again.Body.Len())
	}
	if other := get(`"0000"`); other.Code != 200 {
		t.Errorf("GET with a stale ETag: %d, want 200", other.Code)
	}

	r := httptest.NewRequest(http.MethodGet, "/ui/config.json", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if got := w.Body.String(); got != `{"jaeger_url":""}` {
		t.Errorf("config.json without a Jaeger URL: %s", got)
	}
}

func TestPublic(t *testing.T) {
	cases := []struct {
		method, path string
		want         bool
	}{
		{"GET", "/ui", true},
		{"GET", "/ui/", true},
		{"HEAD", "/ui/", true},
		{"GET", "/ui/app.js", true},
		{"GET", "/ui/style.css", true},
		// The settings, and anything else, need the token like the API.
		{"GET", "/ui/config.json", false},
		{"GET", "/ui/index.html", false},
		{"GET", "/ui/other", false},
		{"POST", "/ui/", false},
		{"GET", "/ui/../readyz", false},
		{"GET", "//ui/app.js", false},
		{"GET", "/v1/servers", false},
		{"GET", "/readyz", false},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, "http://x/", nil)
		r.URL.Path = tc.path
		if got := Public(r); got != tc.want {
			t.Errorf("Public(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestRedirectBrowsers(t *testing.T) {
	const firefox = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no route", http.StatusNotFound) })
	h := RedirectBrowsers(next)
	cases := []struct {
		method, path, accept string
		code                 int
		public               bool // ui.Public: a token is not asked for
	}{
		{"GET", "/", firefox, http.StatusFound, true},
		{"HEAD", "/", "text/html", http.StatusFound, true},
		{"GET", "/", "TEXT/HTML; charset=utf-8", http.StatusFound, true},
		// JSON clients and curl keep the 404 (or the 401 without a token).
		{"GET", "/", "application/json", http.StatusNotFound, false},
		{"GET", "/", "*/*", http.StatusNotFound, false},
		{"GET", "/", "", http.StatusNotFound, false},
		{"GET", "/", "text/html;q=0", http.StatusNotFound, false},
		{"GET", "/", "text/htmlx", http.StatusNotFound, false},
		{"POST", "/", "text/html", http.StatusNotFound, false},
		{"GET", "/other", "text/html", http.StatusNotFound, false},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.accept != "" {
			r.Header.Set("Accept", tc.accept)
		}
		w := httptest.NewRecorder()
		// Mounted at GET /{$}: other methods and paths never reach it.
		if tc.method == "GET" || tc.method == "HEAD" {
			h.ServeHTTP(w, r)
		} else {
			next.ServeHTTP(w, r)
		}
		if w.Code != tc.code {
			t.Errorf("%s %s Accept %q: %d, want %d", tc.method, tc.path, tc.accept, w.Code, tc.code)
		}
		if tc.code == http.StatusFound && w.Header().Get("Location") != Prefix {
			t.Errorf("%s %s Accept %q: Location %q, want %s", tc.method, tc.path, tc.accept, w.Header().Get("Location"), Prefix)
		}
		if got := Public(r); got != tc.public {
			t.Errorf("Public(%s %s Accept %q) = %v, want %v", tc.method, tc.path, tc.accept, got, tc.public)
		}
	}
}
