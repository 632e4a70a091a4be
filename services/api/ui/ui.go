// Package ui is the api's web console, served at /ui: a servers page, a tool catalog with
// search and a call form, and a playground: a chat whose every answer shows its steps, tool
// calls and a waterfall of where the time went.
//
// It is plain HTML, CSS and JavaScript in static/, embedded in the binary as written: nothing is
// generated, there is no build step, and the page talks to the same REST API as any other
// client, with the same bearer token (asked once, kept for the tab).
package ui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed static
var static embed.FS

// Config is what the page needs to know about the deployment.
type Config struct {
	// JaegerURL is the Jaeger UI's base URL; when set, each query links to JaegerURL/trace/ID.
	JaegerURL string
}

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Prefix is where the console is mounted.
const Prefix = "/ui/"

// publicAssets are the files a browser must load before it can ask for a token. They carry
// no data of the mesh, so they are served without one (Public); everything the page shows
// comes from API calls that need the token.
var publicAssets = map[string]string{
	"index.html": "text/html; charset=utf-8",
	"app.js":     "text/javascript; charset=utf-8",
	"style.css":  "text/css; charset=utf-8",
}

var assets = func() map[string]asset {
	out := map[string]asset{}
	for name, ctype := range publicAssets {
		body, err := fs.ReadFile(static, path.Join("static", name))
		if err != nil {
			panic("ui: embedded asset missing: " + err.Error())
		}
		sum := sha256.Sum256(body)
		out[name] = asset{body: body, contentType: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return out
}()

// Public reports whether r asks for one of the console's static files, which load without a
// token so that the page can ask for one, or is a browser opening the api's root, which
// RedirectBrowsers sends here. /ui/config.json is not public: it needs the token like the
// API does.
func Public(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	switch p := r.URL.Path; p {
	case "/ui", Prefix:
		return true
	case "/":
		return wantsHTML(r)
	default:
		name, ok := strings.CutPrefix(p, Prefix)
		_, isAsset := publicAssets[name]
		return ok && isAsset && name != "index.html"
	}
}

// Handler serves the console under Prefix: the page at /ui/, its script and style sheet, and
// /ui/config.json with the settings the page reads at start.
func Handler(cfg Config) http.Handler {
	conf, err := json.Marshal(map[string]string{"jaeger_url": strings.TrimRight(cfg.JaegerURL, "/")})
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		// Mounted at Prefix, the mux redirects /ui to /ui/ (the page's relative links need
		// the slash) and sends nothing else outside Prefix here.
		name, _ := strings.CutPrefix(r.URL.Path, Prefix)
		if name == "config.json" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			_, _ = w.Write(conf)
			return
		}
		if name == "" {
			name = "index.html"
		}
		a, ok := assets[name]
		if !ok || name == "index.html" && r.URL.Path != Prefix {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("ETag", a.etag)
		// Revalidate every time (a 304 costs a few hundred bytes) so a new binary's page
		// is never mixed with an old script from the cache.
		h.Set("Cache-Control", "no-cache")
		if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, a.etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Length", strconv.Itoa(len(a.body)))
		_, _ = w.Write(a.body)
	})
}

// RedirectBrowsers serves GET / (mount it there): a browser opening the api's root, which
// asks for text/html, is sent to the console where a person can start; any other client, a
// JSON one say, goes on to next as before.
func RedirectBrowsers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The answer depends on Accept: a cache must not give one client's answer to the other.
		w.Header().Add("Vary", "Accept")
		if r.URL.Path == "/" && wantsHTML(r) {
			http.Redirect(w, r, Prefix, http.StatusFound)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// wantsHTML reports whether an Accept header names text/html itself, as browsers' do for a
// page; */* (curl's default) does not count.
func wantsHTML(r *http.Request) bool {
	for _, h := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(h, ",") {
			t, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && t == "text/html" && params["q"] != "0" {
				return true
			}
		}
	}
	return false
}

// securityHeaders keep the page to its own origin: its script and style come from the api,
// it talks only to the api, and no other site may frame it (it holds an API token).
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+
		"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}
