// Package oauth signs toolmesh in to remote MCP servers with OAuth 2.1, as the MCP
// authorization spec describes: protected-resource metadata (RFC 9728), the authorization
// server's metadata (RFC 8414 or OpenID discovery), dynamic client registration (RFC 7591), the
// authorization code grant with PKCE (S256) on a loopback redirect, client credentials, and
// resource indicators (RFC 8707) on every request. The flows themselves are
// golang.org/x/oauth2's; this package finds the endpoints, keeps the tokens and refreshes them.
//
// Tokens, codes, verifiers and client secrets never reach an error's text or a log line.
package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// maxMetadata bounds a metadata, registration or token document; real ones are a few KB.
const maxMetadata = 256 << 10

// Metadata is what discovery found for one MCP server.
type Metadata struct {
	// Resource is the server's resource identifier (RFC 8707), sent on every authorization and
	// token request so that tokens are minted for this server alone.
	Resource string `json:"resource"`
	// Issuer is the authorization server.
	Issuer                string   `json:"issuer"`
	AuthorizationEndpoint string   `json:"authorization_endpoint"`
	TokenEndpoint         string   `json:"token_endpoint"`
	RegistrationEndpoint  string   `json:"registration_endpoint,omitempty"`
	RevocationEndpoint    string   `json:"revocation_endpoint,omitempty"`
	CodeChallengeMethods  []string `json:"code_challenge_methods_supported,omitempty"`
	ScopesSupported       []string `json:"scopes_supported,omitempty"`
}

// Error is a sign-in problem, in words an operator can act on.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func fail(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// Challenge reads the resource_metadata parameter of a 401's WWW-Authenticate header (RFC 9728
// §5.1); "" when there is none.
func Challenge(h http.Header) string {
	for _, v := range h.Values("WWW-Authenticate") {
		i := strings.Index(strings.ToLower(v), "resource_metadata=")
		if i < 0 {
			continue
		}
		rest := v[i+len("resource_metadata="):]
		if strings.HasPrefix(rest, `"`) {
			if j := strings.IndexByte(rest[1:], '"'); j >= 0 {
				return rest[1 : 1+j]
			}
			continue
		}
		if j := strings.IndexAny(rest, ", "); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	return ""
}

// Discover finds the authorization server of the MCP server at serverURL. resourceMetadata is
// the URL a 401 named ("" to probe the server for one, then try the well-known URLs). It
// refuses metadata on another host than the server's, a resource that names another server,
// and an issuer whose metadata names another issuer. needPKCE: refuse an authorization server
// that does not announce PKCE with S256.
func Discover(ctx context.Context, hc *http.Client, serverURL, resourceMetadata string, needPKCE bool) (*Metadata, error) {
	srv, err := url.Parse(serverURL)
	if err != nil || srv.Host == "" {
		return nil, fail("the server's url is not an absolute URL")
	}
	if resourceMetadata == "" {
		resourceMetadata = probe(ctx, hc, serverURL)
	}
	var candidates []string
	if resourceMetadata != "" {
		u, err := url.Parse(resourceMetadata)
		if err != nil || !sameOrigin(u, srv) {
			return nil, fail("the server's 401 names protected-resource metadata at %s, on another host than the server (%s): refused, as it could send toolmesh's sign-in to someone else",
				hostOf(resourceMetadata), srv.Host)
		}
		candidates = []string{resourceMetadata}
	} else {
		candidates = wellKnown(srv, "oauth-protected-resource", false)
	}
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		ScopesSupported      []string `json:"scopes_supported"`
	}
	found := ""
	for _, c := range candidates {
		ok, err := getJSON(ctx, hc, c, &prm)
		if err != nil {
			return nil, err
		}
		if ok {
			found = c
			break
		}
	}
	if found == "" {
		return nil, fail("the server at %s publishes no OAuth protected-resource metadata (RFC 9728) at %s", srv.Host, strings.Join(candidates, " or "))
	}
	if prm.Resource == "" {
		prm.Resource = serverURL
	}
	res, err := url.Parse(prm.Resource)
	if err != nil || !sameOrigin(res, srv) || !pathWithin(srv.Path, res.Path) {
		return nil, fail("the protected-resource metadata at %s is for %s, not this server (%s): refused, tokens for it must not be minted here",
			found, shortURL(prm.Resource), shortURL(serverURL))
	}
	if len(prm.AuthorizationServers) == 0 {
		return nil, fail("the protected-resource metadata at %s names no authorization server", found)
	}
	issuer := prm.AuthorizationServers[0]
	iu, err := url.Parse(issuer)
	if err != nil || (iu.Scheme != "https" && !(iu.Scheme == "http" && isLoopback(iu.Hostname()))) {
		return nil, fail("the authorization server %q is not an https URL", shortURL(issuer))
	}
	md := &Metadata{}
	found = ""
	for _, c := range append(wellKnown(iu, "oauth-authorization-server", false), wellKnown(iu, "openid-configuration", true)...) {
		ok, err := getJSON(ctx, hc, c, md)
		if err != nil {
			return nil, err
		}
		if ok {
			found = c
			break
		}
	}
	if found == "" {
		return nil, fail("the authorization server %s publishes no metadata (RFC 8414 or OpenID discovery)", shortURL(issuer))
	}
	if strings.TrimSuffix(md.Issuer, "/") != strings.TrimSuffix(issuer, "/") {
		return nil, fail("the metadata at %s names issuer %s, not %s: refused", found, shortURL(md.Issuer), shortURL(issuer))
	}
	for name, v := range map[string]string{"authorization_endpoint": md.AuthorizationEndpoint, "token_endpoint": md.TokenEndpoint,
		"registration_endpoint": md.RegistrationEndpoint, "revocation_endpoint": md.RevocationEndpoint} {
		if v == "" && (name == "registration_endpoint" || name == "revocation_endpoint" || name == "authorization_endpoint" && !needPKCE) {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname()))) || u.Host == "" {
			return nil, fail("the authorization server's %s is not an https URL", name)
		}
	}
	if needPKCE && !slices.Contains(md.CodeChallengeMethods, "S256") {
		return nil, fail("the authorization server %s does not support PKCE with S256 (its metadata has no code_challenge_methods_supported with S256): toolmesh refuses to sign in without it", shortURL(issuer))
	}
	md.Resource = prm.Resource
	// The resource's own scopes are the ones to ask for (MCP authorization, scope selection);
	// the authorization server's list names every scope it has.
	md.ScopesSupported = prm.ScopesSupported
	return md, nil
}

// probe asks the server without a token and returns the resource_metadata its 401 names.
func probe(ctx context.Context, hc *http.Client, serverURL string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, serverURL, nil)
	if err != nil {
		return ""
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusUnauthorized {
		return ""
	}
	return Challenge(resp.Header)
}

// wellKnown lists the discovery URLs of base: RFC 8414/9728 path insertion, then (OpenID) the
// path with the suffix appended.
func wellKnown(base *url.URL, suffix string, appended bool) []string {
	p := strings.TrimSuffix(base.EscapedPath(), "/")
	root := base.Scheme + "://" + base.Host
	if p == "" {
		return []string{root + "/.well-known/" + suffix}
	}
	out := []string{root + "/.well-known/" + suffix + p}
	if appended {
		out = append(out, root+p+"/.well-known/"+suffix)
	} else if suffix == "oauth-protected-resource" {
		out = append(out, root+"/.well-known/"+suffix)
	}
	return out
}

// getJSON fetches a metadata document; false (no error) when it is not there.
func getJSON(ctx context.Context, hc *http.Client, u string, v any) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, fail("metadata URL %s: %v", shortURL(u), err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return false, fail("fetching %s: %v", shortURL(u), errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return false, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadata+1))
	if err != nil {
		return false, fail("reading %s: %v", shortURL(u), err)
	}
	if len(body) > maxMetadata {
		return false, fail("the metadata at %s is larger than %d bytes", shortURL(u), maxMetadata)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, fail("the metadata at %s is not JSON of the expected shape: %v", shortURL(u), err)
	}
	return true, nil
}

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

// pathWithin: the resource's path is the server's path or a segment prefix of it.
func pathWithin(server, resource string) bool {
	server, resource = strings.TrimSuffix(server, "/"), strings.TrimSuffix(resource, "/")
	return resource == server || resource == "" || strings.HasPrefix(server, resource+"/")
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return "(not a URL)"
}

// shortURL is raw without userinfo, query or fragment (where secrets would be), bounded.
func shortURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	s := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
