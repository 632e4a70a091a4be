package mcpconfig

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Auth is how toolmesh signs in to a remote server.
type Auth string

const (
	// AuthDefault sends the configured headers; a server that answers 401 with OAuth
	// protected-resource metadata is then treated as AuthOAuth (found by itself).
	AuthDefault Auth = ""
	// AuthOAuth signs in with OAuth 2.1 as the MCP authorization spec describes.
	AuthOAuth Auth = "oauth"
)

// Grants toolmesh uses for an OAuth server.
const (
	// GrantAuthorizationCode is a person signing in once with `toolmesh login SERVER`
	// (authorization code with PKCE); the default.
	GrantAuthorizationCode = "authorization_code"
	// GrantClientCredentials is machine to machine: no person, a client id and secret.
	GrantClientCredentials = "client_credentials"
)

// OAuth is a server's OAuth settings, all optional for authorization_code: without a client id
// toolmesh registers itself (RFC 7591) where the authorization server offers it.
type OAuth struct {
	Grant    string
	ClientID string
	// ClientSecret comes from the environment: the config must give it as a ${VAR} reference,
	// never inline.
	ClientSecret string
	Scopes       []string
}

// GrantType is the grant, GrantAuthorizationCode when none is set.
func (o OAuth) GrantType() string {
	if o.Grant == "" {
		return GrantAuthorizationCode
	}
	return o.Grant
}

// onlyVarRef is a value that is one ${VAR} reference and nothing else.
var onlyVarRef = regexp.MustCompile(`^\$\{[^${}]+\}$`)

var oauthKeys = []string{"grant", "clientId", "clientSecret", "scopes"}

// auth reads "auth" and "oauth": {"grant", "clientId", "clientSecret", "scopes"}. An "oauth"
// object alone means auth: oauth.
func (e *entry) auth() (Auth, OAuth) {
	var a Auth
	if v, ok := e.str("auth", false); ok {
		switch Auth(strings.ToLower(v)) {
		case AuthOAuth:
			a = AuthOAuth
		case "none", "":
		default:
			e.fail("auth", "%q is not oauth; leave the key out for static headers", v)
		}
	}
	raw, ok := e.obj["oauth"]
	if !ok || raw == nil {
		return a, OAuth{}
	}
	m, isObj := asObject(raw)
	if !isObj {
		e.fail("oauth", `must be an object like {"clientId": "...", "clientSecret": "${SECRET}"}, not %s`, TypeName(raw))
		return a, OAuth{}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(oauthKeys, k) {
			msg := "unknown key; the oauth keys are " + strings.Join(oauthKeys, ", ")
			if near := nearKey(k, oauthKeys); near != "" {
				msg = fmt.Sprintf("unknown key (did you mean %q?)", near)
			}
			e.fail("oauth."+k, "%s", msg)
		}
	}
	sub := &entry{server: e.server, obj: m, lookup: e.lookup, rulesOnly: e.rulesOnly}
	var o OAuth
	o.Grant, _ = sub.str("grant", false)
	o.ClientID, _ = sub.str("clientId", true)
	if rawSecret, ok := m["clientSecret"].(string); ok && !onlyVarRef.MatchString(rawSecret) {
		// The value is never quoted: it may be the secret itself.
		sub.fail("clientSecret", "must be a ${VAR} reference to an environment variable that holds the secret, never the secret itself")
	} else {
		o.ClientSecret, _ = sub.str("clientSecret", true)
	}
	o.Scopes = sub.strSlice("scopes")
	for _, err := range sub.errs {
		if fe, ok := err.(*FieldError); ok {
			e.fail("oauth."+fe.Field, "%s", fe.Msg)
		}
	}
	return AuthOAuth, o
}

// validateOAuth adds the problems of s's auth settings.
func (s Server) validateOAuth(add func(field, format string, args ...any)) {
	if s.Auth == AuthDefault {
		return
	}
	if !s.Transport.IsRemote() {
		add("auth", "oauth only applies to remote (sse, streamable-http) servers")
	}
	for k := range s.Headers {
		if strings.EqualFold(k, "Authorization") {
			add("headers."+k, "cannot be combined with auth: oauth, which sends the server's own token")
		}
	}
	switch s.OAuth.GrantType() {
	case GrantAuthorizationCode:
	case GrantClientCredentials:
		if s.OAuth.ClientID == "" {
			add("oauth.clientId", "required for the client_credentials grant")
		}
		if s.OAuth.ClientSecret == "" {
			add("oauth.clientSecret", "required for the client_credentials grant: a ${VAR} reference to the secret (the variable is empty or unset)")
		}
	default:
		add("oauth.grant", "%q is not authorization_code or client_credentials", s.OAuth.Grant)
	}
	for i, sc := range s.OAuth.Scopes {
		if sc == "" || strings.ContainsAny(sc, " \t\r\n\"\\") {
			add(fmt.Sprintf("oauth.scopes[%d]", i), "must be one scope token (no spaces or quotes)")
		}
	}
}
