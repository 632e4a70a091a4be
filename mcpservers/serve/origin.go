package serve

import (
	"net/http"
	"net/url"
	"strings"
)

// originPolicy decides which browser origins may call the server.
type originPolicy struct {
	any      bool
	loopback bool // the default: http(s) on localhost, 127.0.0.1, [::1]
	exact    map[string]bool
}

func newOriginPolicy(allowed []string) originPolicy {
	if len(allowed) == 0 {
		return originPolicy{loopback: true}
	}
	p := originPolicy{exact: make(map[string]bool, len(allowed))}
	for _, o := range allowed {
		if o == "*" {
			p.any = true
			continue
		}
		p.exact[normalizeOrigin(o)] = true
	}
	return p
}

func normalizeOrigin(o string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(o)), "/")
}

func (p originPolicy) allowed(origin string) bool {
	switch {
	case p.any:
		return true
	case p.loopback:
		return isLoopbackOrigin(origin)
	}
	return p.exact[normalizeOrigin(origin)]
}

// isLoopbackOrigin reports whether origin is http or https on localhost,
// 127.0.0.1 or [::1], on any port. "null" and anything with a path, user
// info, query or fragment is not.
func isLoopbackOrigin(origin string) bool {
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

// writeCORS adds CORS headers for an allowed origin. It answers a preflight
// request itself and then reports true.
func writeCORS(w http.ResponseWriter, r *http.Request, origin string) bool {
	h := w.Header()
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", "Mcp-Session-Id, Mcp-Protocol-Version")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		h.Set("Access-Control-Allow-Headers", req)
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}
