package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/oauth"
	"github.com/toolmesh/toolmesh/internal/oauth/oauthtest"
)

// TestOAuthServerNeedsSignIn: a remote server with auth: oauth that nobody has signed in to
// keeps the mesh ready and says, in /v1/servers and /readyz, what to do; once a person signs
// in (toolmesh login's flow, driven as a browser would), the executor picks the tokens up and
// the server's tool is called with them.
func TestOAuthServerNeedsSignIn(t *testing.T) {
	as := oauthtest.NewAuthServer(t, true)
	ms := oauthtest.NewMCPServer(t, as, nil)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "oauth")
	cfg := filepath.Join(dir, "toolmesh.yaml")
	doc := "mcpServers:\n  protected:\n    url: " + ms.URL + "\n    auth: oauth\n"
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	// startMesh waits for /readyz 200: a server waiting for a sign-in must not hold it for the
	// grace a starting server gets.
	m := startMesh(t, "--config="+cfg, "--executor.oauth-dir="+tokens, "--api.ready-server-grace=5m")

	const want = `"last_error":"needs sign-in: toolmesh login protected (nobody has signed in)"`
	for _, path := range []string{"/v1/servers", "/readyz"} {
		code, b := do(t, "", "GET", m.base+path, "")
		w := want
		if path == "/readyz" {
			w = `"error":"needs sign-in: toolmesh login protected (nobody has signed in)"`
		}
		if code != 200 || !strings.Contains(string(b), w) {
			t.Errorf("GET %s: %d %.800s; want 200 with %s", path, code, b, w)
		}
	}
	if _, b := do(t, "", "GET", m.base+"/v1/servers", ""); !strings.Contains(string(b), `"needs_sign_in":true`) {
		t.Errorf("/v1/servers: %.800s; want needs_sign_in true", b)
	}

	servers, err := mcpconfig.Parse([]byte(`{"mcpServers":{"protected":{"url":"`+ms.URL+`","auth":"oauth"}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := &oauthtest.Terminal{}
	done := make(chan error, 1)
	go func() {
		_, err := oauth.Login(context.Background(), oauth.LoginOptions{Server: servers["protected"], Store: oauth.FileStore{Dir: tokens}, Out: out})
		done <- err
	}()
	as.SignIn(t, out.URL(t)).Body.Close()
	if err := <-done; err != nil {
		t.Fatalf("login: %v", err)
	}

	var b []byte
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var code int
		code, b = do(t, "", "POST", m.base+"/v1/tools/protected/whoami:call", `{"arguments":{}}`)
		if code == 200 || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(string(b), "subject id1") {
		t.Fatalf("call after sign-in: %s; want the signed-in subject", b)
	}
	if _, b := do(t, "", "GET", m.base+"/v1/servers", ""); strings.Contains(string(b), "needs sign-in") {
		t.Errorf("/v1/servers after sign-in still says needs sign-in: %.600s", b)
	}

	// The grant is revoked: the next call is refused upstream, the one refresh fails, and the
	// call says what to do; so does the server's state.
	rec, err := oauth.FileStore{Dir: tokens}.Load(context.Background(), "protected")
	if err != nil {
		t.Fatal(err)
	}
	as.Revoke(t, rec.Token.RefreshToken, rec.ClientID)
	code, b := do(t, "", "POST", m.base+"/v1/tools/protected/whoami:call", `{"arguments":{}}`)
	if code != 503 || !strings.Contains(string(b), "needs sign-in: toolmesh login protected") {
		t.Errorf("call after revocation: %d %s; want 503 saying needs sign-in", code, b)
	}
	if _, b := do(t, "", "GET", m.base+"/v1/servers", ""); !strings.Contains(string(b), `"needs_sign_in":true`) {
		t.Errorf("/v1/servers after revocation: %.600s; want needs_sign_in", b)
	}
	for _, secret := range []string{rec.Token.AccessToken, rec.Token.RefreshToken} {
		if strings.Contains(string(b), secret) {
			t.Errorf("/v1/servers shows a token")
		}
	}
}

// TestBannerSaysNeedsSignIn: the banner's line of an OAuth server nobody signed in to says what
// to do; a signed-in one, a client-credentials one and a plain one say nothing more.
func TestBannerSaysNeedsSignIn(t *testing.T) {
	store := oauth.FileStore{Dir: t.TempDir()}
	if err := store.Save(context.Background(), &oauth.Record{Server: "signed", Token: &oauth2.Token{AccessToken: "x"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		srv  mcpconfig.Server
		want string
	}{
		{mcpconfig.Server{Name: "linear", Auth: mcpconfig.AuthOAuth}, " (needs sign-in: toolmesh login linear)"},
		{mcpconfig.Server{Name: "signed", Auth: mcpconfig.AuthOAuth}, ""},
		{mcpconfig.Server{Name: "bot", Auth: mcpconfig.AuthOAuth, OAuth: mcpconfig.OAuth{Grant: mcpconfig.GrantClientCredentials}}, ""},
		{mcpconfig.Server{Name: "plain"}, ""},
	} {
		if got := signInNote(tc.srv, store); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.srv.Name, got, tc.want)
		}
	}
}
