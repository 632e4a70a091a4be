// Package webguard keeps web pages away from an HTTP API that listens where a browser can reach
// it (loopback included): a page the user visits must neither call it nor read its answers.
//
// Four checks, in this order, on every request:
//
//   - Host: the name the client used must be a loopback name (localhost, *.localhost), an IP
//     address, or one of Config.AllowedHosts. This is the defence against DNS rebinding, where a
//     page's own host name is made to resolve to 127.0.0.1 so that the browser treats the API
//     as same-origin: its requests then carry the attacker's name in Host. An IP address cannot
//     be rebound, so IP literals are always allowed (as Vite and Jupyter do).
//   - Origin: a request that carries an Origin (browsers send it on every cross-origin fetch and
//     on every POST) must come from the API's own origin (the console's: Origin's host is the
//     request's Host) or from one of Config.AllowedOrigins. Otherwise 403, as the MCP spec asks
//     of servers. Only configured origins get CORS headers; CORS is closed by default.
//   - Fetch metadata: a request a page of another site made without CORS (an <img>, <script> or
//     <link>, a frame: Sec-Fetch-Site cross-site or same-site, and no Origin) is refused with
//     403, before any token is looked at: it can never carry a token, and whatever it costs
//     (a log line, a failed login) would be the page's doing, not the user's. A top-level
//     navigation (a link the user follows) is let through, and so is every client that sends no
//     Sec-Fetch-* headers (curl, SDKs, older browsers).
//   - Content-Type: a POST, PUT or PATCH must say application/json (415 otherwise), with a
//     body or without. A page can send a cross-site POST without asking first only as text/plain,
//     form data or multipart; requiring JSON turns every such "simple" request away even from a
//     browser that sends no Origin.
//
// Refusals are answered with the API's JSON error body {"code","message","details"} and logged
// sampled, so a page that keeps trying cannot flood the log.
package webguard

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/internal/logsample"
)

// Config lists what is allowed beyond the defaults.
type Config struct {
	// AllowedHosts are extra host names the API may be reached under (a load balancer's or an
	// ingress's name). "*.example.com" allows every name under example.com; "*" allows any
	// host and turns the DNS-rebinding defence off.
	AllowedHosts []string
	// AllowedOrigins are the exact browser origins (scheme://host[:port]) other than the API's
	// own that may call it, with CORS; "*" allows any.
	AllowedOrigins []string
	// LoopbackOrigins also allows, with CORS, the http and https origins on localhost,
	// 127.0.0.1 and [::1], on any port: for a server whose browser clients are apps on the
	// user's own machine (the MCP Inspector), as the MCP servers toolmesh ships are. Not a flag.
	LoopbackOrigins bool
	// CORS is what an allowed cross origin may send and read; the zero value is the API's.
	CORS CORS

	prefix string // of the flag names, so Validate can name the flag
}

// RegisterFlags binds prefix+"allowed-hosts" and prefix+"allowed-origins" (the api passes "api.").
func (c *Config) RegisterFlags(fs *flag.FlagSet, prefix string) {
	c.prefix = prefix
	fs.Var((*list)(&c.AllowedHosts), prefix+"allowed-hosts", "comma-separated host names the REST API may be reached under besides loopback names and IP addresses (e.g. toolmesh.example.com, *.example.com; * allows any and turns the DNS-rebinding check off)")
	fs.Var((*list)(&c.AllowedOrigins), prefix+"allowed-origins", "comma-separated browser origins (scheme://host[:port]) besides the console's own that may call the REST API, with CORS; * allows any")
}

// Validate reports the first entry that is not a host name or an origin, naming its flag.
func (c *Config) Validate() error {
	for _, h := range c.AllowedHosts {
		name := strings.TrimPrefix(h, "*.")
		if h == "*" {
			continue
		}
		if name == "" || strings.ContainsAny(name, ":/@?#[]* ") {
			return fmt.Errorf("%sallowed-hosts: %q is not a host name (no scheme or port; *.example.com for a domain)", c.prefix, h)
		}
	}
	for _, o := range c.AllowedOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%sallowed-origins: %q is not an origin (scheme://host[:port], e.g. https://app.example.com)", c.prefix, o)
		}
	}
	return nil
}

// CORS is the answer to an allowed cross origin: the headers its page may read, and in a
// preflight the methods and headers it may send.
type CORS struct {
	// ExposeHeaders is Access-Control-Expose-Headers; empty: X-Trace-Id, Retry-After,
	// WWW-Authenticate (the API's).
	ExposeHeaders string
	// AllowMethods is Access-Control-Allow-Methods; empty: GET, POST.
	AllowMethods string
	// AllowRequestedHeaders lets a preflight send whatever headers it asks for, rather than
	// Authorization and Content-Type only (MCP clients send Mcp-Session-Id and more).
	AllowRequestedHeaders bool
}

func (c CORS) withDefaults() CORS {
	if c.ExposeHeaders == "" {
		c.ExposeHeaders = "X-Trace-Id, Retry-After, WWW-Authenticate"
	}
	if c.AllowMethods == "" {
		c.AllowMethods = "GET, POST"
	}
	return c
}

// Guard runs the checks. A nil *Guard lets everything through.
type Guard struct {
	anyHost   bool
	hosts     map[string]bool
	suffixes  []string // ".example.com" for "*.example.com"
	anyOrigin bool
	loopback  bool // LoopbackOrigins
	origins   map[string]bool
	cors      CORS
	log       *logsample.Sampler
	prefix    string // of the flags, for messages
}

// New returns the Guard of cfg, logging refusals (sampled) to logger.
func New(cfg Config, logger *slog.Logger) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{hosts: map[string]bool{}, origins: map[string]bool{}, prefix: cfg.prefix,
		loopback: cfg.LoopbackOrigins, cors: cfg.CORS.withDefaults(),
		// A page retrying in a loop makes one line every few seconds, not thousands.
		log: logsample.New(logger, 10, 5*time.Second)}
	for _, h := range cfg.AllowedHosts {
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		switch {
		case h == "*":
			g.anyHost = true
		case strings.HasPrefix(h, "*."):
			g.suffixes = append(g.suffixes, h[1:])
		default:
			g.hosts[h] = true
		}
	}
	for _, o := range cfg.AllowedOrigins {
		if o == "*" {
			g.anyOrigin = true
			continue
		}
		g.origins[normalizeOrigin(o)] = true
	}
	return g, nil
}

// Refusal is why a request may not go on.
type Refusal struct {
	Status  int // HTTP status
	Code    codes.Code
	Message string
	reason  string // for the log
}

// Check decides one request: nil when it may go on. originFree skips the Origin check (for a
// liveness probe that any page may see).
func (g *Guard) Check(r *http.Request, originFree bool) *Refusal {
	if g == nil {
		return nil
	}
	if !g.HostAllowed(r.Host) {
		return &Refusal{Status: http.StatusForbidden, Code: codes.PermissionDenied, reason: "host not allowed",
			Message: fmt.Sprintf("host %q is not allowed: this server answers to loopback names, IP addresses and --%sallowed-hosts (a defence against DNS rebinding)", cut(r.Host), g.prefix)}
	}
	if origin := r.Header.Get("Origin"); origin != "" && !originFree && !g.originAllowed(origin, r.Host) {
		return &Refusal{Status: http.StatusForbidden, Code: codes.PermissionDenied, reason: "origin not allowed",
			Message: g.originRefused(origin)}
	}
	if !originFree {
		if site, ok := fromAnotherSite(r); ok {
			return &Refusal{Status: http.StatusForbidden, Code: codes.PermissionDenied, reason: "another site's page",
				Message: fmt.Sprintf("a request from another site's page (Sec-Fetch-Site: %s, Sec-Fetch-Mode: %s) is not allowed: a page may call this API only with CORS, from --%sallowed-origins",
					cut(site), cut(r.Header.Get("Sec-Fetch-Mode")), g.prefix)}
		}
	}
	// A cross-site request that needs no preflight is a GET, HEAD or POST; PUT and PATCH are
	// checked as well since they carry bodies. Other methods have no body to check (DELETE
	// and the like are refused by the router).
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return nil
	}
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		msg := "Content-Type is missing: send the body as application/json"
		if ct != "" {
			msg = fmt.Sprintf("Content-Type %q is not accepted: send the body as application/json", cut(ct))
		}
		return &Refusal{Status: http.StatusUnsupportedMediaType, Code: codes.InvalidArgument, reason: "not JSON", Message: msg}
	}
	return nil
}

// fromAnotherSite reports whether r is a request the browser made for a page of another site
// without CORS, and the Sec-Fetch-Site it came with. A request with an Origin is left to the
// Origin check, which has let it through (the console's own, or an allowed origin's CORS
// request: a page on app.example calling the api is cross-site too).
//
// same-site is refused as cross-site is. To an api on loopback the same site is every other
// port of localhost or of 127.0.0.1 (a site ignores ports, and loopback has no registrable
// domain to tell apps apart): every dev server and local app the user runs, none of which is
// the console. The console's own requests are same-origin, a typed URL or a bookmark is none,
// and a sibling app the operator trusts is named in --api.allowed-origins and sends an Origin.
//
// A top-level GET navigation is let through: it is a link the user followed, it carries no
// token (a browser never adds a bearer token) and its answer is shown to the user, never to the
// page; refusing it would break every link to the console. A navigation into a frame is not:
// framing is how a page tricks a user into clicking (the console also forbids it with
// frame-ancestors).
func fromAnotherSite(r *http.Request) (string, bool) {
	site := r.Header.Get("Sec-Fetch-Site")
	if site != "cross-site" && site != "same-site" {
		// same-origin, none, or no header at all (a client that is not a browser).
		return "", false
	}
	if r.Header.Get("Origin") != "" {
		return "", false
	}
	if r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" &&
		(r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return "", false
	}
	return site, true
}

// Handler runs the checks before next; originFree (may be nil) marks the requests that skip
// the Origin check. Requests from a configured cross origin get CORS headers, and their
// preflight requests are answered here.
func (g *Guard) Handler(next http.Handler, originFree func(*http.Request) bool) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		free := originFree != nil && originFree(r)
		if ref := g.Check(r, free); ref != nil {
			g.refuse(w, r, ref)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !free && !sameOrigin(origin, r.Host) {
			if preflight := g.answerCORS(w, r, origin); preflight {
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (g *Guard) refuse(w http.ResponseWriter, r *http.Request, ref *Refusal) {
	g.log.Log(r.Context(), slog.LevelWarn, "http request refused", "reason", ref.reason, "method", r.Method,
		"path", cut(r.URL.Path), "host", cut(r.Host), "origin", cut(r.Header.Get("Origin")), "remote", r.RemoteAddr)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Add("Vary", "Origin")
	w.WriteHeader(ref.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": ref.Code, "message": ref.Message, "details": []any{}})
}

// answerCORS adds the CORS headers of an allowed cross origin and answers a preflight request.
// The API authenticates with a bearer token, never a cookie, so credentials are not allowed.
func (g *Guard) answerCORS(w http.ResponseWriter, r *http.Request, origin string) (preflight bool) {
	h := w.Header()
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", g.cors.ExposeHeaders)
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	h.Set("Access-Control-Allow-Methods", g.cors.AllowMethods)
	allow := "Authorization, Content-Type"
	if req := r.Header.Get("Access-Control-Request-Headers"); g.cors.AllowRequestedHeaders && req != "" {
		allow = req
	}
	h.Set("Access-Control-Allow-Headers", allow)
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// HostAllowed reports whether the API may be reached under hostport (a Host header): the rule
// of the Host check, for handlers with a check of their own (the MCP face) to apply the same
// one. A nil Guard allows every host, as it lets every request through.
func (g *Guard) HostAllowed(hostport string) bool {
	if g == nil || hostport == "" || g.anyHost {
		// No browser sends a request without Host; HTTP/1.0 clients may.
		return true
	}
	h := hostname(hostport)
	if builtinHost(h) {
		return true
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if g.hosts[h] {
		return true
	}
	for _, s := range g.suffixes {
		if strings.HasSuffix(h, s) {
			return true
		}
	}
	return false
}

// DefaultHostAllowed is HostAllowed of a Guard without --api.allowed-hosts: loopback names
// (localhost, *.localhost), IP addresses and a missing Host.
func DefaultHostAllowed(hostport string) bool {
	return hostport == "" || builtinHost(hostname(hostport))
}

// builtinHost reports whether h (a Host's name, without port or brackets) is allowed whatever
// the configuration: an IP address, which cannot be rebound, or a loopback name, which a DNS
// server cannot hand out (*.localhost resolves to loopback in browsers, RFC 6761).
func builtinHost(h string) bool {
	// Only an IPv4 address starts with a digit or an IPv6 one holds ':'; trying just those
	// spares every host name ParseAddr's error.
	if h != "" && ('0' <= h[0] && h[0] <= '9' || strings.IndexByte(h, ':') >= 0) {
		if _, err := netip.ParseAddr(h); err == nil {
			return true
		}
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// hostname is the host of a Host header, without port or IPv6 brackets.
func hostname(hostport string) string {
	if strings.HasPrefix(hostport, "[") {
		if i := strings.IndexByte(hostport, ']'); i > 0 {
			return hostport[1:i]
		}
		return hostport
	}
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && strings.IndexByte(hostport, ':') == i {
		return hostport[:i]
	}
	return hostport
}

func (g *Guard) originAllowed(origin, host string) bool {
	return sameOrigin(origin, host) || g.anyOrigin || g.origins[normalizeOrigin(origin)] ||
		(g.loopback && loopbackOrigin(origin))
}

// originRefused says why origin may not call, and what would let it.
func (g *Guard) originRefused(origin string) string {
	allowed := "its own origin and --" + g.prefix + "allowed-origins"
	if g.loopback {
		allowed = "its own origin, loopback origins (localhost, 127.0.0.1, [::1] on any port) and --" + g.prefix + "allowed-origins"
	}
	return fmt.Sprintf("origin %q is not allowed: only %s may call this server from a browser", cut(origin), allowed)
}

// loopbackOrigin reports whether origin is http or https on localhost, 127.0.0.1 or [::1], on
// any port. "null" and anything with a path, user info, query or fragment is not.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	if port := u.Port(); port != "" && strings.Trim(port, "0123456789") != "" {
		return false
	}
	switch strings.ToLower(u.Hostname()) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// sameOrigin reports whether origin is the API's own: its host[:port] is the request's Host
// (checked against the allowed hosts before). The scheme is not compared, so the console also
// works behind a proxy that ends TLS.
func sameOrigin(origin, host string) bool {
	_, rest, ok := strings.Cut(origin, "://")
	return ok && host != "" && strings.EqualFold(rest, host) &&
		(strings.HasPrefix(origin, "http://") || strings.HasPrefix(origin, "https://"))
}

func normalizeOrigin(o string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(o)), "/")
}

// isJSON reports whether a Content-Type is application/json, parameters (charset) allowed.
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// cut keeps what a client sent short in messages and logs.
func cut(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}

// list is a flag of comma-separated values; giving it again adds to it.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}
