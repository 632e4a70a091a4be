package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/oauth"
	"github.com/toolmesh/toolmesh/internal/oauth/oauthtest"
)

// TestLogin runs toolmesh login as a person would, the browser driven by the test: the URL it
// prints, the provider's login form, the redirect back; then the tokens are where the
// executor reads them.
func TestLogin(t *testing.T) {
	as := oauthtest.NewAuthServer(t, true)
	ms := oauthtest.NewMCPServer(t, as, nil)
	defer http.DefaultClient.CloseIdleConnections()
	dir := t.TempDir()
	mcpJSON := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(mcpJSON, []byte(`{"mcpServers":{"Protected":{"url":"`+ms.URL+`","auth":"oauth"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "oauth")
	var stdout bytes.Buffer
	stderr := &oauthtest.Terminal{}
	done := make(chan int, 1)
	go func() {
		// The config's name ("Protected") is accepted as well as the served one.
		done <- Main(context.Background(), []string{"login", "Protected", "--mcp-config", mcpJSON, "--executor.oauth-dir", tokens, "--timeout", "20s"},
			strings.NewReader(""), &stdout, stderr)
	}()
	as.SignIn(t, stderr.URL(t)).Body.Close()
	if code := <-done; code != 0 {
		t.Fatalf("toolmesh login exited %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Signed in to protected") {
		t.Errorf("stdout %q; want it to say the sign-in worked", stdout.String())
	}
	rec, err := oauth.FileStore{Dir: tokens}.Load(context.Background(), "protected")
	if err != nil || rec.Token.AccessToken == "" {
		t.Fatalf("no tokens kept: %v", err)
	}
	for _, secret := range []string{rec.Token.AccessToken, rec.Token.RefreshToken} {
		if strings.Contains(stdout.String()+stderr.String(), secret) {
			t.Errorf("login printed a token")
		}
	}
}

func TestLoginUsage(t *testing.T) {
	dir := t.TempDir()
	mcpJSON := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(mcpJSON, []byte(`{"mcpServers":{"linear":{"url":"https://mcp.linear.example/mcp","auth":"oauth"},"calc":{"command":"calc"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"login"}, 2, "name the server to sign in to"},
		{[]string{"login", "linaer", "--mcp-config", mcpJSON}, 2, `no server "linaer" in the config (did you mean "linear"?) (servers: calc, linear)`},
		{[]string{"login", "calc", "--mcp-config", mcpJSON}, 1, "calc is a stdio server: there is nothing to sign in to"},
		{[]string{"login", "linear"}, 2, "no MCP servers are configured"},
	} {
		var stderr bytes.Buffer
		code := Main(context.Background(), tc.args, strings.NewReader(""), io.Discard, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("toolmesh %s: exit %d, %q; want %d saying %q", strings.Join(tc.args, " "), code, stderr.String(), tc.code, tc.want)
		}
	}
}
