// Package oauthtest runs, for tests, the real peers of an OAuth sign-in: an OpenID provider
// built from zitadel/oidc's op package (with its example storage, the library's own), and an
// MCP server (mcp-go) that checks every token by introspection at that provider, as a resource
// server does. zitadel's op has no dynamic client registration and ignores RFC 8707's resource
// parameter, so asStorage adds both the way an authorization server that has them behaves:
// /register makes a native (public, PKCE) client, and a token is valid only for the resource
// it was asked for.
package oauthtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/client/rs"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

type resourceKey struct{}

// asStorage is zitadel's example storage plus registration and resource-bound audiences.
type asStorage struct {
	*storage.Storage
	users storage.UserStore

	mu      sync.Mutex
	clients map[string]op.Client
	secrets map[string]string
	authRes map[string]string // auth request id → resource
	rtRes   map[string]string // refresh token → resource
	atRes   map[string]string // access token id → resource
	atApp   map[string]string // access token id → the client it was issued to
}

func newASStorage(issuer string) *asStorage {
	users := storage.NewUserStore(issuer)
	return &asStorage{
		Storage: storage.NewStorageWithClients(users, map[string]*storage.Client{}), users: users,
		clients: map[string]op.Client{}, secrets: map[string]string{}, authRes: map[string]string{},
		rtRes: map[string]string{}, atRes: map[string]string{}, atApp: map[string]string{},
	}
}

func resourceOf(ctx context.Context) string {
	v, _ := ctx.Value(resourceKey{}).(string)
	return v
}

func (s *asStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	s.mu.Lock()
	c, ok := s.clients[id]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	return s.Storage.GetClientByClientID(ctx, id)
}

func (s *asStorage) AuthorizeClientIDSecret(ctx context.Context, id, secret string) error {
	s.mu.Lock()
	want, ok := s.secrets[id]
	s.mu.Unlock()
	if ok {
		if want != secret {
			return errors.New("wrong secret")
		}
		return nil
	}
	return s.Storage.AuthorizeClientIDSecret(ctx, id, secret)
}

func (s *asStorage) CreateAuthRequest(ctx context.Context, req *oidc.AuthRequest, userID string) (op.AuthRequest, error) {
	r, err := s.Storage.CreateAuthRequest(ctx, req, userID)
	if err == nil {
		s.mu.Lock()
		s.authRes[r.GetID()] = resourceOf(ctx)
		s.mu.Unlock()
	}
	return r, err
}

func (s *asStorage) CreateAccessAndRefreshTokens(ctx context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	s.mu.Lock()
	res := resourceOf(ctx)
	if ar, ok := req.(op.AuthRequest); ok && current == "" {
		res = s.authRes[ar.GetID()]
	} else if prev := s.rtRes[current]; prev != "" && res == "" {
		res = prev
	}
	s.mu.Unlock()
	at, rt, exp, err := s.Storage.CreateAccessAndRefreshTokens(ctx, req, current)
	if err == nil {
		s.mu.Lock()
		s.atRes[at], s.rtRes[rt] = res, res
		if ar, ok := req.(interface{ GetClientID() string }); ok {
			s.atApp[at] = ar.GetClientID()
		}
		s.mu.Unlock()
	}
	return at, rt, exp, err
}

func (s *asStorage) CreateAccessToken(ctx context.Context, req op.TokenRequest) (string, time.Time, error) {
	at, exp, err := s.Storage.CreateAccessToken(ctx, req)
	if err == nil {
		s.mu.Lock()
		s.atRes[at], s.atApp[at] = resourceOf(ctx), req.GetSubject()
		s.mu.Unlock()
	}
	return at, exp, err
}

// SetIntrospectionFromToken answers active only to the resource server the token was minted
// for (its client id is its resource URL).
func (s *asStorage) SetIntrospectionFromToken(ctx context.Context, in *oidc.IntrospectionResponse, tokenID, subject, clientID string) error {
	s.mu.Lock()
	res, app := s.atRes[tokenID], s.atApp[tokenID]
	s.mu.Unlock()
	if res != clientID {
		return fmt.Errorf("token is not valid for this resource")
	}
	if s.users.GetUserByID(subject) == nil { // a service's token (client credentials)
		in.Subject, in.ClientID, in.Audience = subject, app, []string{res}
		return nil
	}
	if err := s.Storage.SetIntrospectionFromToken(ctx, in, tokenID, subject, app); err != nil {
		return err
	}
	in.Audience = []string{res}
	return nil
}

func (s *asStorage) ClientCredentialsTokenRequest(ctx context.Context, id string, scopes []string) (op.TokenRequest, error) {
	return &oidc.JWTTokenRequest{Subject: id, Audience: []string{id}, Scopes: scopes}, nil
}

// register is RFC 7591 registration of a native client (public, PKCE).
func (s *asStorage) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.RedirectURIs) == 0 {
		http.Error(w, `{"error":"invalid_redirect_uri"}`, http.StatusBadRequest)
		return
	}
	id := uuid.NewString()
	s.mu.Lock()
	s.clients[id] = storage.NativeClient(id, req.RedirectURIs...)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"client_id": id, "token_endpoint_auth_method": "none", "redirect_uris": req.RedirectURIs})
}

// AuthServer is a running OpenID provider.
type AuthServer struct {
	URL   string
	Store *asStorage
	srv   *httptest.Server
}

// NewAuthServer starts the provider; pkce false serves one that announces no PKCE method.
func NewAuthServer(t *testing.T, pkce bool) *AuthServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	st := newASStorage(issuer)
	var h http.Handler
	if pkce {
		h = exampleop.SetupServer(issuer, st, nil, false)
	} else {
		p, err := op.NewProvider(&op.Config{CryptoKey: [32]byte{1}, GrantTypeRefreshToken: true}, st, op.StaticIssuer(issuer), op.WithAllowInsecure())
		if err != nil {
			t.Fatal(err)
		}
		h = p
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /register", st.register)
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		// The provider's own document, with the registration endpoint it lacks.
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var doc map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		doc["registration_endpoint"] = issuer + "/register"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err == nil && r.Form.Get("resource") != "" {
			r = r.WithContext(context.WithValue(r.Context(), resourceKey{}, r.Form.Get("resource")))
		}
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &AuthServer{URL: issuer, Store: st, srv: srv}
}

// addResourceServer lets the resource server at resource introspect tokens.
func (a *AuthServer) addResourceServer(resource, secret string) {
	a.Store.mu.Lock()
	defer a.Store.mu.Unlock()
	a.Store.clients[resource] = storage.WebClient(resource, secret)
	a.Store.secrets[resource] = secret
}

// SignIn follows an authorization URL the way a person's browser would: the provider's login
// page, its form with the example user's password, and the redirects to the client's loopback.
func (a *AuthServer) SignIn(t *testing.T, authURL string) *http.Response {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(authURL)
	if err != nil {
		t.Fatalf("open the authorization URL: %v", err)
	}
	resp.Body.Close()
	// The login page is at /login/username?authRequestID=ID.
	id := resp.Request.URL.Query().Get("authRequestID")
	if id == "" {
		t.Fatalf("the provider sent the browser to %s, not its login page (HTTP %d)", resp.Request.URL.Path, resp.StatusCode)
	}
	resp, err = c.PostForm(a.URL+"/login/username", map[string][]string{
		"id": {id}, "username": {"test-user@127.0.0.1"}, "password": {"verysecure"}})
	if err != nil {
		t.Fatalf("sign in at the provider: %v", err)
	}
	return resp
}

// MCPServer is an MCP server (mcp-go, streamable HTTP at /mcp) that accepts only tokens the
// provider says are active for it, and tells a client without one where its metadata is.
type MCPServer struct {
	URL      string // the MCP endpoint, also its resource identifier
	Calls    atomic.Int64
	Refused  atomic.Int64
	resource string
}

func NewMCPServer(t *testing.T, as *AuthServer, prmOverride func(base string) map[string]any) *MCPServer {
	t.Helper()
	ms := &MCPServer{}
	s := server.NewMCPServer("protected", "1.0.0")
	s.AddTool(mcp.NewTool("whoami", mcp.WithDescription("who the token is for")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ms.Calls.Add(1)
		return mcp.NewToolResultText("subject " + fmt.Sprint(ctx.Value(subjectKey{}))), nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ms.URL, ms.resource = base+"/mcp", base+"/mcp"
	secret := "rs-secret"
	as.addResourceServer(ms.resource, secret)
	var rsOnce sync.Once
	var rsrv rs.ResourceServer
	var rsErr error
	mux := http.NewServeMux()
	prmPath := "/.well-known/oauth-protected-resource/mcp"
	mux.HandleFunc("GET "+prmPath, func(w http.ResponseWriter, r *http.Request) {
		doc := map[string]any{"resource": ms.resource, "authorization_servers": []string{as.URL}, "scopes_supported": []string{"openid", "offline_access"}}
		if prmOverride != nil {
			doc = prmOverride(base)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	})
	mcpHandler := server.NewStreamableHTTPServer(s)
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		challenge := fmt.Sprintf(`Bearer resource_metadata="%s%s"`, base, prmPath)
		if !ok || tok == "" {
			w.Header().Set("WWW-Authenticate", challenge)
			http.Error(w, "sign in", http.StatusUnauthorized)
			return
		}
		rsOnce.Do(func() { rsrv, rsErr = rs.NewResourceServerClientCredentials(r.Context(), as.URL, ms.resource, secret) })
		if rsErr != nil {
			http.Error(w, rsErr.Error(), http.StatusInternalServerError)
			return
		}
		in, err := rs.Introspect[*oidc.IntrospectionResponse](r.Context(), rsrv, tok)
		if err != nil || !in.Active {
			ms.Refused.Add(1)
			w.Header().Set("WWW-Authenticate", challenge+`, error="invalid_token"`)
			http.Error(w, "invalid token", http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), subjectKey{}, in.Subject)))
	}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ms
}

type subjectKey struct{}

func Listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func DecodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// Terminal is the terminal of a headless toolmesh login: it keeps what is written and hands
// over the first URL printed on a line of its own (indented by two spaces, as Login prints it).
type Terminal struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

var printedURL = regexp.MustCompile(`(?m)^  (http\S+)$`)

func (w *Terminal) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *Terminal) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// URL waits up to 10 s for the URL to open, or fails the test saying what was printed.
func (w *Terminal) URL(t *testing.T) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := printedURL.FindStringSubmatch(w.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("no URL printed within 10s: %s", w.String())
	return ""
}

// Revoke revokes a refresh token (and with it its access token) at the provider's revocation
// endpoint, as the client it was issued to, the way an administrator or the user would.
func (a *AuthServer) Revoke(t *testing.T, refreshToken, clientID string) {
	t.Helper()
	resp, err := http.PostForm(a.URL+"/revoke", map[string][]string{"token": {refreshToken}, "token_type_hint": {"refresh_token"}, "client_id": {clientID}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: HTTP %d", resp.StatusCode)
	}
}
