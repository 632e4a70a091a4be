package mcpface

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/closest"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// The paths the face serves.
const (
	CatalogPath    = "/mcp"
	SearchPath     = "/mcp/search"
	ServersPath    = "/mcp/servers/" // + SERVER
	SSEPath        = "/sse"
	SSEMessagePath = "/sse/message"
	// MetadataPath is where the OAuth protected resource metadata (RFC 9728) of each endpoint
	// is, followed by the endpoint's path: /.well-known/oauth-protected-resource/mcp.
	MetadataPath = "/.well-known/oauth-protected-resource"
)

// Routes are the http.ServeMux patterns the face is mounted under.
var Routes = []string{CatalogPath, CatalogPath + "/", SSEPath, SSEPath + "/", MetadataPath, MetadataPath + "/"}

// Public reports whether r needs no token: the protected resource metadata, which a client
// reads to learn how to get one.
func Public(r *http.Request) bool {
	return r.URL.Path == MetadataPath || strings.HasPrefix(r.URL.Path, MetadataPath+"/")
}

// Endpoint reports whether p is an MCP endpoint of the face (not its resource metadata).
func Endpoint(p string) bool {
	return p == CatalogPath || p == SSEPath || p == SSEMessagePath || strings.HasPrefix(p, CatalogPath+"/")
}

// Challenge makes the 401 that next (the REST port's token check) answers a request to an MCP
// endpoint say where the endpoint's protected resource metadata is, as the MCP authorization
// spec asks of a resource server (RFC 9728 §5.1): WWW-Authenticate: Bearer realm="toolmesh",
// resource_metadata="...", and error="invalid_token" when a token was sent but is not known.
func Challenge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Endpoint(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&challenger{ResponseWriter: w, r: r}, r)
	})
}

type challenger struct {
	http.ResponseWriter
	r    *http.Request
	done bool
}

func (c *challenger) WriteHeader(code int) {
	if code == http.StatusUnauthorized && !c.done {
		v := fmt.Sprintf(`Bearer realm="toolmesh", resource_metadata=%q`, origin(c.r)+MetadataPath+c.r.URL.Path)
		if c.r.Header.Get("Authorization") != "" {
			v += `, error="invalid_token"`
		}
		c.Header().Set("WWW-Authenticate", v)
	}
	c.done = true
	c.ResponseWriter.WriteHeader(code)
}

func (c *challenger) Write(p []byte) (int, error) {
	c.done = true
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the real writer (flushing SSE streams).
func (c *challenger) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *challenger) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// origin is the scheme and host the client used to reach the api.
func origin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// ServeHTTP routes a request to its view.
func (f *Face) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if !f.cfg.HostAllowed(r.Host) {
		// The REST port's web guard has refused this already; the face keeps the same rule
		// for wherever else it is mounted (mcp-go's own check, which allows fewer names, is
		// off: see newView).
		f.log.Warn("mcp: refused a request for a host not allowed", "host", r.Host, "path", p, "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, codes.PermissionDenied,
			fmt.Sprintf("host %q is not allowed: this server answers to loopback names, IP addresses and --api.allowed-hosts (a defence against DNS rebinding)", r.Host))
		return
	}
	if Public(r) {
		f.metadata(w, r)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !allowedOrigin(o, r.Host) {
		// The MCP transport spec: a request from an origin the server does not serve is 403.
		f.log.Warn("mcp: refused a request from a foreign origin", "origin", o, "path", p, "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, codes.PermissionDenied, fmt.Sprintf("origin %q may not call this server", o))
		return
	}
	if id := r.Header.Get("Mcp-Session-Id"); id != "" && r.Method == http.MethodGet && p != SSEPath {
		// mcp-go takes any id on a GET stream; the spec answers an unknown one with 404.
		if _, err := (statelessIDs{}).Validate(id); err != nil {
			writeError(w, http.StatusNotFound, codes.NotFound, "unknown MCP session: initialize again")
			return
		}
	}
	r = r.WithContext(withPeer(r.Context(), r))
	// Every request, initialize and the notification streams included, waits for the first
	// catalog: a session opened before it would be told its (never seen) empty list changed.
	f.awaitCatalog(r.Context())
	switch {
	case p == CatalogPath:
		f.serve(f.catalog, w, r)
	case p == SearchPath:
		f.serve(f.search, w, r)
	case strings.HasPrefix(p, ServersPath):
		v, status, msg := f.serverView(r.Context(), strings.TrimPrefix(p, ServersPath))
		if v == nil {
			writeError(w, status, codes.NotFound, msg)
			return
		}
		f.serve(v, w, r)
	case p == SSEPath:
		f.serveSSE(w, r)
	case p == SSEMessagePath:
		f.postSSE(w, r)
	default:
		writeError(w, http.StatusNotFound, codes.NotFound, fmt.Sprintf("no MCP endpoint at %s: the endpoints are %s, %s, %sSERVER and %s (legacy SSE)",
			p, CatalogPath, SearchPath, ServersPath, SSEPath))
	}
}

// serve hands r to the view's lister if it is a tools/list (see view), answers it on the short
// path if it is a plain tools/call (shortcall.go), drops it if it is a notifications/cancelled
// of protocol 2026-07-28 (cancel.go), else hands it to the view's own server.
func (f *Face) serve(v *view, w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Body == nil {
		v.http.ServeHTTP(w, r)
		return
	}
	// One of protocol 2026-07-28 names its method in the Mcp-Method header (mcp-go refuses it if
	// its body says otherwise): a tools/list needs no look at its body.
	if v.lister != nil && r.Header.Get(mcp.HeaderMethod) == string(mcp.MethodToolsList) {
		v.lister.ServeHTTP(w, r)
		return
	}
	// The body is read here and put back for mcp-go, which reads it whole in any case.
	b, err := io.ReadAll(r.Body)
	if err != nil {
		// mcp-go answers the error as it would have.
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), errReader{err}))
		v.http.ServeHTTP(w, r)
		return
	}
	if f.shortCall(v, w, r, b) || f.dropCancelled(w, r, b) {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	if v.lister != nil && listsTools(r.Header, b) {
		v.lister.ServeHTTP(w, r)
		return
	}
	v.cancelled(r, b)
	v.http.ServeHTTP(w, r)
}

// listsTools reports whether a request with header and body is a tools/list request. One of
// protocol 2026-07-28 names its method in the Mcp-Method header; an older one, in its body.
func listsTools(header http.Header, body []byte) bool {
	if m := header.Get(mcp.HeaderMethod); m != "" {
		return m == string(mcp.MethodToolsList)
	}
	if !bytes.Contains(body, []byte(`"tools/list"`)) {
		return false
	}
	var m struct {
		Method string `json:"method"`
	}
	return json.Unmarshal(body, &m) == nil && m.Method == string(mcp.MethodToolsList)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// serverView returns the view of server for the caller in ctx, or the status and message to
// answer with: an unknown server, one the caller may see no tool of, and a bad name all read
// "not found", so the answer does not tell what there is to be refused.
func (f *Face) serverView(ctx context.Context, name string) (*view, int, string) {
	c := policy.Caller{Token: auth.Name(ctx)}
	listable := toolid.ValidServer(name) && f.policy.ListsServer(c, name)
	if listable {
		if v := f.existingServerView(name); v != nil {
			return v, 0, ""
		}
	}
	// A configured server whose tools the catalog has not seen (it is down, or starting) gets
	// its view too; the executor says which servers are configured.
	cctx, cancel := context.WithTimeout(ctx, f.cfg.RPCTimeout)
	defer cancel()
	resp, err := f.exec.ListServers(cctx, &toolmeshv1.ExecutorServiceListServersRequest{})
	if err != nil {
		return nil, http.StatusServiceUnavailable, "cannot ask the executor which MCP servers there are: " + err.Error()
	}
	var known []string
	for _, s := range resp.GetServers() {
		if listable && s.GetName() == name {
			if v := f.serverViewFor(name); v != nil {
				return v, 0, ""
			}
			return nil, http.StatusServiceUnavailable, "the api is stopping"
		}
		if f.policy.ListsServer(c, s.GetName()) {
			known = append(known, s.GetName())
		}
	}
	// Named closest first, so that a typo shows its fix; only the servers the caller may list.
	if len(known) == 0 {
		return nil, http.StatusNotFound, fmt.Sprintf("no MCP server %q (there are no servers)", name)
	}
	return nil, http.StatusNotFound, fmt.Sprintf("no MCP server %q (the servers: %s)", name, closest.List(name, known, maxKnownServers))
}

// maxKnownServers bounds how many servers an unknown server's message names.
const maxKnownServers = 10

// allowedOrigin reports whether a browser page at origin may call the server reached as host:
// the api's own pages (the console) and pages on loopback. The REST port's web guard
// (internal/webguard) checks Host and Origin first, more strictly; this check keeps the face
// safe on its own, as the MCP transport spec asks of every server, wherever it is mounted.
func allowedOrigin(o, host string) bool {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	switch strings.ToLower(u.Hostname()) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// metadata answers the OAuth protected resource metadata (RFC 9728) of the endpoint whose path
// follows MetadataPath. toolmesh's tokens are static bearer tokens, configured by the operator:
// there is no authorization server to name, so a client learns from it only that the token goes
// in the Authorization header.
func (f *Face) metadata(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, codes.Unimplemented, "the protected resource metadata is read with GET")
		return
	}
	resource := strings.TrimPrefix(r.URL.Path, MetadataPath)
	if resource != "" && !Endpoint(resource) {
		writeError(w, http.StatusNotFound, codes.NotFound, "no MCP endpoint at "+resource)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"resource":                 origin(r) + resource,
		"bearer_methods_supported": []string{"header"},
		"resource_name":            "toolmesh",
	})
}

// writeError answers with the api's JSON error body.
func writeError(w http.ResponseWriter, status int, code codes.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg, "details": []any{}})
}

// peer is how a request reached the face, for its span and the session registry.
type peer struct {
	method   string
	path     string
	protocol string // the MCP-Protocol-Version header
	addr     string
	port     int
	httpSpan trace.SpanContext // the REST port's span of the HTTP request, linked from the MCP span
}

type peerKey struct{}

func withPeer(ctx context.Context, r *http.Request) context.Context {
	p := &peer{method: r.Method, path: r.URL.Path, protocol: r.Header.Get("Mcp-Protocol-Version"), httpSpan: trace.SpanContextFromContext(ctx)}
	if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		p.addr = host
		p.port, _ = strconv.Atoi(port)
	}
	return context.WithValue(ctx, peerKey{}, p)
}

func peerOf(ctx context.Context) *peer {
	p, _ := ctx.Value(peerKey{}).(*peer)
	return p
}
