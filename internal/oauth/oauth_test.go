package oauth_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/oauth"
	"github.com/toolmesh/toolmesh/internal/oauth/oauthtest"
)

// startLogin runs toolmesh login's flow and returns the URL it printed and its outcome.
func startLogin(t *testing.T, srv mcpconfig.Server, store oauth.Store) (string, <-chan error) {
	t.Helper()
	w := &oauthtest.Terminal{}
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	go func() {
		_, err := oauth.Login(ctx, oauth.LoginOptions{Server: srv, Store: store, Out: w})
		done <- err
	}()
	return w.URL(t), done
}

func protectedServer(url string) mcpconfig.Server {
	return mcpconfig.Server{Name: "protected", Transport: mcpconfig.TransportStreamableHTTP, URL: url, Auth: mcpconfig.AuthOAuth}
}

func connect(t *testing.T, url string, src *oauth.Source) (*client.Client, error) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &oauth.Transport{Source: src, Next: http.DefaultTransport}}
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPBasicClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	if _, err := c.Initialize(ctx, req); err != nil {
		return nil, err
	}
	return c, nil
}

func whoami(c *client.Client) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = "whoami"
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return "", err
	}
	return res.Content[0].(mcp.TextContent).Text, nil
}

// TestSignInCallRefreshRevoke is a person's whole story with a protected server: discovery,
// dynamic registration, toolmesh login driven as a browser would, a call, a refresh before
// the token expires, a revocation, and then "needs sign-in".
func TestSignInCallRefreshRevoke(t *testing.T) {
	as := oauthtest.NewAuthServer(t, true)
	ms := oauthtest.NewMCPServer(t, as, nil)
	store := oauth.FileStore{Dir: filepath.Join(t.TempDir(), "oauth")}
	srv := protectedServer(ms.URL)

	// Nobody signed in: the server says so, without a network call to the provider.
	src := oauth.NewSource(srv, store, nil)
	if _, err := connect(t, ms.URL, src); !isNeedsSignIn(err) || !strings.Contains(err.Error(), "needs sign-in: toolmesh login protected") {
		t.Fatalf("connect before sign-in: got %v, want needs sign-in: toolmesh login protected", err)
	}

	authURL, done := startLogin(t, srv, store)
	u, _ := url.Parse(authURL)
	q := u.Query()
	for k, want := range map[string]string{"code_challenge_method": "S256", "resource": ms.URL, "response_type": "code"} {
		if q.Get(k) != want {
			t.Errorf("authorization URL %s = %q, want %q", k, q.Get(k), want)
		}
	}
	if q.Get("client_id") == "" || q.Get("code_challenge") == "" || !strings.HasPrefix(q.Get("redirect_uri"), "http://127.0.0.1:") {
		t.Errorf("authorization URL lacks a registered client, a challenge or a loopback redirect: %s", authURL)
	}
	resp := as.SignIn(t, authURL)
	resp.Body.Close()
	if err := <-done; err != nil {
		t.Fatalf("login: %v", err)
	}
	fi, err := os.Stat(filepath.Join(store.Dir, "protected.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	rec, err := store.Load(context.Background(), "protected")
	if err != nil || rec.Token.RefreshToken == "" || rec.Resource != ms.URL {
		t.Fatalf("record: %+v, %v; want a refresh token and resource %s", rec, err, ms.URL)
	}

	var shift atomic.Int64
	src = oauth.NewSource(srv, store, nil)
	src.SetClock(func() time.Time { return time.Now().Add(time.Duration(shift.Load())) })
	c, err := connect(t, ms.URL, src)
	if err != nil {
		t.Fatalf("connect after sign-in: %v", err)
	}
	if got, err := whoami(c); err != nil || got != "subject id1" {
		t.Fatalf("call: %q, %v; want subject id1", got, err)
	}

	// Within a minute of the token's expiry (the provider's are 5 minutes), it is refreshed
	// before the call, and the new tokens are kept.
	shift.Store(int64(4*time.Minute + 30*time.Second))
	if got, err := whoami(c); err != nil || got != "subject id1" {
		t.Fatalf("call near expiry: %q, %v", got, err)
	}
	after, _ := store.Load(context.Background(), "protected")
	if after.Token.AccessToken == rec.Token.AccessToken || after.Token.RefreshToken == rec.Token.RefreshToken {
		t.Fatalf("the token was not refreshed before its expiry")
	}

	// The grant is revoked at the provider: the server refuses the token, the one refresh
	// fails, and the server needs sign-in again; its tokens are gone.
	shift.Store(0)
	as.Revoke(t, after.Token.RefreshToken, after.ClientID)
	refusedBefore := ms.Refused.Load()
	_, err = whoami(c)
	if !isNeedsSignIn(err) {
		t.Fatalf("call after revocation: %v, want needs sign-in", err)
	}
	if ms.Refused.Load() != refusedBefore+1 {
		t.Errorf("the server refused %d requests, want 1 (refresh once, then stop)", ms.Refused.Load()-refusedBefore)
	}
	if _, err := store.Load(context.Background(), "protected"); !errors.Is(err, oauth.ErrNoRecord) {
		t.Errorf("revoked tokens still stored: %v", err)
	}
	for _, secret := range []string{after.Token.AccessToken, after.Token.RefreshToken} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows a token: %v", err)
		}
	}
}

func isNeedsSignIn(err error) bool {
	var n *oauth.NeedsSignIn
	return errors.As(err, &n)
}

// TestClientCredentials: a machine-to-machine server, no person; and a token minted for
// another resource is refused by the server (wrong audience).
func TestClientCredentials(t *testing.T) {
	as := oauthtest.NewAuthServer(t, true)
	ms := oauthtest.NewMCPServer(t, as, nil)
	// sid1 is the example storage's service user, the one client it lets use this grant.
	srv := protectedServer(ms.URL)
	srv.OAuth = mcpconfig.OAuth{Grant: mcpconfig.GrantClientCredentials, ClientID: "sid1", ClientSecret: "verysecret", Scopes: []string{"openid"}}
	c, err := connect(t, ms.URL, oauth.NewSource(srv, oauth.FileStore{Dir: t.TempDir()}, nil))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if got, err := whoami(c); err != nil || got != "subject sid1" {
		t.Fatalf("call: %q, %v", got, err)
	}

	other := clientcredentials.Config{ClientID: "sid1", ClientSecret: "verysecret", TokenURL: as.URL + "/oauth/token",
		Scopes: []string{"openid"}, EndpointParams: url.Values{"resource": {"http://127.0.0.1:1/another-server"}}}
	tok, err := other.Token(context.Background())
	if err != nil {
		t.Fatalf("token for another resource: %v", err)
	}
	req, _ := http.NewRequest(http.MethodPost, ms.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a token for another resource: HTTP %d, want 401", resp.StatusCode)
	}
}

// TestPKCEEnforced: the provider refuses a code exchanged without the verifier of a PKCE
// flow, and a flow without PKCE at all, for a public client like the one toolmesh registers.
func TestPKCEEnforced(t *testing.T) {
	as := oauthtest.NewAuthServer(t, true)
	codes := make(chan string, 1)
	cb := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { codes <- r.URL.Query().Get("code") })}
	ln := oauthtest.Listen(t)
	go func() { _ = cb.Serve(ln) }()
	t.Cleanup(func() { cb.Close() })
	redirect := "http://" + ln.Addr().String() + "/callback"
	resp, err := http.Post(as.URL+"/register", "application/json", strings.NewReader(`{"redirect_uris":["`+redirect+`"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	oauthtest.DecodeJSON(t, resp, &reg)
	cfg := oauth2.Config{ClientID: reg.ClientID, RedirectURL: redirect, Scopes: []string{"openid"},
		Endpoint: oauth2.Endpoint{AuthURL: as.URL + "/auth", TokenURL: as.URL + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	for _, tc := range []struct {
		name string
		opts []oauth2.AuthCodeOption
	}{
		{"no PKCE", nil},
		{"challenge without its verifier", []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(oauth2.GenerateVerifier())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as.SignIn(t, cfg.AuthCodeURL("s", tc.opts...)).Body.Close()
			code := <-codes
			_, err := cfg.Exchange(context.Background(), code)
			var re *oauth2.RetrieveError
			if !errors.As(err, &re) || re.ErrorCode != "invalid_request" && re.ErrorCode != "invalid_grant" {
				t.Fatalf("exchange without a verifier: %v, want refused", err)
			}
		})
	}
}

// TestBadInput: each refused with a message that says what is wrong.
func TestBadInput(t *testing.T) {
	as := oauthtest.NewAuthServer(t, true)
	ctx := context.Background()
	t.Run("metadata for another host", func(t *testing.T) {
		ms := oauthtest.NewMCPServer(t, as, func(base string) map[string]any {
			return map[string]any{"resource": "https://victim.example/mcp", "authorization_servers": []string{as.URL}}
		})
		_, err := oauth.Discover(ctx, http.DefaultClient, ms.URL, "", true)
		wantErr(t, err, "is for https://victim.example/mcp, not this server")
	})
	t.Run("metadata URL on another host", func(t *testing.T) {
		ms := oauthtest.NewMCPServer(t, as, nil)
		_, err := oauth.Discover(ctx, http.DefaultClient, ms.URL, "https://elsewhere.example/.well-known/oauth-protected-resource", true)
		wantErr(t, err, "on another host than the server")
	})
	t.Run("no PKCE", func(t *testing.T) {
		plain := oauthtest.NewAuthServer(t, false)
		ms := oauthtest.NewMCPServer(t, plain, nil)
		_, err := oauth.Login(ctx, oauth.LoginOptions{Server: protectedServer(ms.URL), Store: oauth.FileStore{Dir: t.TempDir()}, Out: &bytes.Buffer{}})
		wantErr(t, err, "does not support PKCE with S256")
	})
	t.Run("wrong state", func(t *testing.T) {
		ms := oauthtest.NewMCPServer(t, as, nil)
		authURL, done := startLogin(t, protectedServer(ms.URL), oauth.FileStore{Dir: t.TempDir()})
		u, _ := url.Parse(authURL)
		redirect := u.Query().Get("redirect_uri")
		// The browser gets its page whole, though the refusal ends the login at once.
		resp, err := http.Get(redirect + "?code=stolen&state=forged")
		if err != nil {
			t.Fatal(err)
		}
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.Contains(string(page), "Sign-in failed") {
			t.Errorf("the browser's page: %q, %v; want it to say the sign-in failed", page, err)
		}
		wantErr(t, <-done, "state does not match this sign-in")
	})
}

func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error saying %q", err, want)
	}
}

// TestFoundByItself: a server configured without auth: oauth that answers 401 with
// protected-resource metadata needs sign-in; after a login it is called with its token.
func TestFoundByItself(t *testing.T) {
	as := oauthtest.NewAuthServer(t, true)
	ms := oauthtest.NewMCPServer(t, as, nil)
	store := oauth.FileStore{Dir: t.TempDir()}
	srv := protectedServer(ms.URL)
	srv.Auth = mcpconfig.AuthDefault
	_, err := connect(t, ms.URL, oauth.NewSource(srv, store, nil))
	wantErr(t, err, "needs sign-in: toolmesh login protected (the server asks for OAuth sign-in)")

	authURL, done := startLogin(t, srv, store)
	as.SignIn(t, authURL).Body.Close()
	if err := <-done; err != nil {
		t.Fatalf("login: %v", err)
	}
	c, err := connect(t, ms.URL, oauth.NewSource(srv, store, nil))
	if err != nil {
		t.Fatalf("connect after sign-in: %v", err)
	}
	if got, err := whoami(c); err != nil || got != "subject id1" {
		t.Fatalf("call: %q, %v", got, err)
	}
}
