package oauth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// LoginOptions are what `toolmesh login SERVER` is given.
type LoginOptions struct {
	Server mcpconfig.Server
	Store  Store
	// HTTPClient reaches the MCP server and the authorization server; nil is one with a
	// 30-second timeout.
	HTTPClient *http.Client
	// Listen is the loopback address of the redirect ("127.0.0.1:0": any free port).
	Listen string
	// Out is where the URL to open is printed.
	Out io.Writer
	// Paste, when set, is read for the address the browser ended on, for a browser on another
	// machine whose redirect cannot reach this one.
	Paste io.Reader
}

// Login signs in to the server with the authorization code grant and PKCE (S256): it
// discovers the authorization server, registers toolmesh when no client id is configured and
// the server offers registration, prints the URL to open, waits for the redirect on a loopback
// listener (or the pasted address), exchanges the code and keeps the tokens in the store.
func Login(ctx context.Context, o LoginOptions) (*Record, error) {
	srv := o.Server
	if !srv.Transport.IsRemote() {
		return nil, fail("%s is a stdio server: there is nothing to sign in to", srv.Name)
	}
	if srv.OAuth.GrantType() == mcpconfig.GrantClientCredentials {
		return nil, fail("%s signs in with client credentials (oauth.grant), without a person: no login is needed", srv.Name)
	}
	hc := httpClient(o.HTTPClient)
	md, err := Discover(ctx, hc, srv.URL, "", true)
	if err != nil {
		return nil, err
	}
	addr := o.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !isLoopback(host) {
		return nil, fail("--listen %q: the redirect listens on a loopback address (127.0.0.1:PORT)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fail("listening for the redirect on %s: %v", addr, err)
	}
	defer ln.Close()
	redirect := "http://" + ln.Addr().String() + "/callback"

	scopes := srv.OAuth.Scopes
	if len(scopes) == 0 {
		scopes = md.ScopesSupported
	}
	clientID, clientSecret := srv.OAuth.ClientID, srv.OAuth.ClientSecret
	registered := false
	if clientID == "" {
		if md.RegistrationEndpoint == "" {
			return nil, fail("the authorization server %s offers no dynamic client registration: register toolmesh there (redirect %s) and set oauth.clientId for %s (and oauth.clientSecret as a ${VAR} reference if it has one)",
				shortURL(md.Issuer), "http://127.0.0.1/callback", srv.Name)
		}
		if clientID, clientSecret, err = register(ctx, hc, md, redirect, scopes); err != nil {
			return nil, err
		}
		registered = true
	}
	cfg := oauthConfig(md, clientID, clientSecret, redirect, scopes)
	state, verifier := randomString(), oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", md.Resource))
	fmt.Fprintf(o.Out, "To sign in to %s, open this URL in a browser:\n\n  %s\n\n", srv.Name, authURL)
	fmt.Fprintf(o.Out, "Waiting for the redirect to %s", redirect)
	if o.Paste != nil {
		fmt.Fprint(o.Out, " (with the browser on another machine, paste the address it ended on here)")
	}
	fmt.Fprintln(o.Out, "...")

	got := make(chan url.Values, 2)
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		msg := "Signed in: you can close this page and go back to the terminal."
		if q.Get("state") != state || q.Get("error") != "" {
			msg = "Sign-in failed: see the terminal."
		}
		fmt.Fprintln(w, msg)
		select {
		case got <- q:
		default:
		}
	})}
	go func() { _ = hs.Serve(ln) }()
	// Shutdown, not Close: the handler hands the redirect over before it returns, and a refused
	// one ends Login at once; Close cut the browser's page off before it was sent (an empty
	// reply instead of "Sign-in failed"). Shutdown lets the page go out, for at most 2 s.
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
	}()
	if o.Paste != nil {
		go readPasted(o.Paste, got)
	}
	var q url.Values
	select {
	case q = <-got:
	case <-ctx.Done():
		return nil, fail("no redirect came back: %v; run toolmesh login %s again", ctx.Err(), srv.Name)
	}
	if e := q.Get("error"); e != "" {
		return nil, fail("the authorization server refused the sign-in: %s %s", clean(e), clean(q.Get("error_description")))
	}
	if q.Get("state") != state {
		return nil, fail("the redirect's state does not match this sign-in (a stale or forged redirect): refused; run toolmesh login %s again", srv.Name)
	}
	if q.Get("code") == "" {
		return nil, fail("the redirect carries no authorization code")
	}
	tctx := context.WithValue(ctx, oauth2.HTTPClient, withResource(hc, md.Resource))
	tok, err := cfg.Exchange(tctx, q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, tokenError("exchanging the authorization code", err)
	}
	rec := &Record{Server: srv.Name, Resource: md.Resource, Issuer: md.Issuer, TokenURL: md.TokenEndpoint,
		RevocationURL: md.RevocationEndpoint, ClientID: clientID, Token: stripExtra(tok), SignedInAt: time.Now().UTC()}
	if registered {
		rec.ClientSecret = clientSecret
	}
	if err := o.Store.Save(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// readPasted sends the query of the first line that is a URL with a code or an error.
func readPasted(r io.Reader, got chan<- url.Values) {
	sc := bufio.NewScanner(io.LimitReader(r, 64<<10))
	for sc.Scan() {
		u, err := url.Parse(strings.TrimSpace(sc.Text()))
		if err != nil {
			continue
		}
		if q := u.Query(); q.Get("code") != "" || q.Get("error") != "" {
			select {
			case got <- q:
			default:
			}
			return
		}
	}
}

// register is dynamic client registration (RFC 7591) of a public client with PKCE.
func register(ctx context.Context, hc *http.Client, md *Metadata, redirect string, scopes []string) (string, string, error) {
	body, _ := json.Marshal(map[string]any{
		"client_name":                "toolmesh",
		"redirect_uris":              []string{redirect},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
		"application_type":           "native",
		"scope":                      strings.Join(scopes, " "),
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, md.RegistrationEndpoint, bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", fail("registering toolmesh at %s: %v", shortURL(md.RegistrationEndpoint), err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxMetadata))
	var out struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		Error        string `json:"error"`
		Description  string `json:"error_description"`
	}
	_ = json.Unmarshal(data, &out)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK || out.ClientID == "" {
		return "", "", fail("registering toolmesh at %s failed (HTTP %d) %s %s", shortURL(md.RegistrationEndpoint), resp.StatusCode, clean(out.Error), clean(out.Description))
	}
	return out.ClientID, out.ClientSecret, nil
}

func oauthConfig(md *Metadata, clientID, clientSecret, redirect string, scopes []string) *oauth2.Config {
	style := oauth2.AuthStyleAutoDetect
	if clientSecret == "" {
		style = oauth2.AuthStyleInParams // a public client names itself in the body
	}
	return &oauth2.Config{ClientID: clientID, ClientSecret: clientSecret, RedirectURL: redirect, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: md.AuthorizationEndpoint, TokenURL: md.TokenEndpoint, AuthStyle: style}}
}

// withResource adds the resource indicator (RFC 8707) to every token request it sends:
// x/oauth2 takes extra parameters for the code exchange but not for a refresh.
func withResource(hc *http.Client, resource string) *http.Client {
	c := *hc
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = resourceParam{next: next, resource: resource}
	return &c
}

type resourceParam struct {
	next     http.RoundTripper
	resource string
}

func (t resourceParam) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || r.Body == nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return t.next.RoundTrip(r)
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, maxMetadata))
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	v, err := url.ParseQuery(string(data))
	if err != nil {
		return nil, err
	}
	if v.Get("resource") == "" {
		v.Set("resource", t.resource)
	}
	enc := v.Encode()
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(strings.NewReader(enc))
	r2.ContentLength = int64(len(enc))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(enc)), nil }
	return t.next.RoundTrip(r2)
}

// tokenError says why a token request failed in the authorization server's words (its error
// code and description), never its raw body.
func tokenError(what string, err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return fail("%s: the authorization server answered %s", what, refusal(re))
	}
	return fail("%s: %v", what, err)
}

// refusal is the authorization server's error code and description.
func refusal(re *oauth2.RetrieveError) string {
	code := re.ErrorCode
	if code == "" && re.Response != nil {
		code = fmt.Sprintf("HTTP %d", re.Response.StatusCode)
	}
	return strings.TrimSpace(clean(code) + " " + clean(re.ErrorDescription))
}

// clean bounds text from a server and drops control characters.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.TrimSpace(s)
}

// stripExtra keeps the token's fields, not the raw response (which may hold an id token).
func stripExtra(t *oauth2.Token) *oauth2.Token {
	return &oauth2.Token{AccessToken: t.AccessToken, TokenType: t.TokenType, RefreshToken: t.RefreshToken, Expiry: t.Expiry}
}

func randomString() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func httpClient(hc *http.Client) *http.Client {
	if hc != nil {
		return hc
	}
	return &http.Client{Timeout: 30 * time.Second}
}
