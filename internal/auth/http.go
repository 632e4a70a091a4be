package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"path"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
)

// HTTP checks the bearer token and rate limit of every request for which skip is false (skip
// may be nil). A refused request gets 401 with "WWW-Authenticate: Bearer", or 429 with
// Retry-After, and the API's JSON error body {"code","message","details"}; an admitted one
// carries its token's name for Name(r.Context()). With auth off HTTP returns next itself.
//
// The token is checked before next reads the body, so an unauthenticated client cannot make
// the server read, hold or parse one. Unknown tokens count against the client's address
// (FailuresPerMinute; a request with no token costs nothing); an address over that budget gets
// 429 whatever it sends, but for a token that has authenticated from it before.
//
// forwarded (may be nil) marks the routes the REST gateway forwards to the gRPC server that
// this Guard's interceptor checks: their token is checked here too, but they take their slot
// in flight and count against the token's rate limit there, so that one request counts once.
// Skip only /healthz and what must load without a token; Paths builds such predicates.
func (g *Guard) HTTP(next http.Handler, skip, forwarded func(*http.Request) bool) http.Handler {
	if !g.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if skip != nil && skip(r) {
			next.ServeHTTP(w, r)
			return
		}
		count := forwarded == nil || !forwarded(r)
		i, name, d := g.admit(r.Header.Values("Authorization"), clientKey(r.RemoteAddr), count)
		if d != nil {
			g.logDenial(r.Context(), d, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			writeDenial(w, r, d)
			return
		}
		ctx := withName(r.Context(), name)
		if i >= 0 && g.inFlight != nil {
			s := &slot{g: g, i: i}
			defer s.end() // unless the handler holds the slot (Hold)
			ctx = context.WithValue(ctx, slotKey{}, s)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func writeDenial(w http.ResponseWriter, r *http.Request, d *denial) {
	if r.ContentLength != 0 {
		// The body is refused unread. Left open, net/http would read up to 256 KiB of it
		// before it sends the answer, at whatever pace the client sends it.
		w.Header().Set("Connection", "close")
	}
	status := http.StatusUnauthorized
	if d.code == codes.ResourceExhausted {
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", strconv.Itoa(d.retry))
	} else {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": d.code, "message": d.message, "details": []any{}})
}

// Paths returns a skip predicate for Guard.HTTP that is true for requests whose path is one
// of paths, or lies under one that ends in "/" (as http.ServeMux patterns do):
// Paths("/healthz", "/v1/") skips the health probe and the gateway's /v1 routes. A path that
// is not clean ("/v1/../readyz", "//healthz") is never skipped: http.ServeMux would redirect it
// to a path that may not be skipped.
func Paths(paths ...string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		p := r.URL.Path
		clean := path.Clean(p)
		if strings.HasSuffix(p, "/") && clean != "/" {
			clean += "/"
		}
		if p != clean {
			return false
		}
		for _, want := range paths {
			if p == want || strings.HasSuffix(want, "/") && (strings.HasPrefix(p, want) || p+"/" == want) {
				return true
			}
		}
		return false
	}
}
