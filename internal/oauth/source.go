package oauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// RefreshBefore is how long before its expiry a token is refreshed, so that a call never
// carries one that expires on the way.
const RefreshBefore = time.Minute

// NeedsSignIn is the error of a server whose tokens are gone, revoked or refused: a person has
// to run `toolmesh login SERVER`.
type NeedsSignIn struct {
	Server string
	// Why is the cause, in words safe to show (no token).
	Why string
}

func (e *NeedsSignIn) Error() string {
	msg := "needs sign-in: toolmesh login " + e.Server
	if e.Why != "" {
		msg += " (" + e.Why + ")"
	}
	return msg
}

// Source gives the access token for one server's requests: the signed-in record's (refreshed
// before it expires, and once when the server answers 401), or one from the client credentials
// grant. A server without auth: oauth gets one only if a record exists for it (a person signed
// in after the server asked for it with a 401).
type Source struct {
	srv   mcpconfig.Server
	store Store
	hc    *http.Client
	// now is the clock, for tests.
	now func() time.Time

	mu   sync.Mutex
	rec  *Record
	cc   *Metadata // client credentials: what discovery found
	gone string    // why the last token is no longer usable ("" while none was refused)
	// looked is when the store last had no record: it is read again at most every
	// recheckEvery, not on every request.
	looked time.Time

	// needs is the last request's sign-in error, nil once a request went through.
	needs atomic.Pointer[NeedsSignIn]
}

// SignInNeeded is the error of the server's last request when it was for want of a sign-in,
// or nil when its last request was sent with a token (or needed none).
func (s *Source) SignInNeeded() *NeedsSignIn { return s.needs.Load() }

// recheckEvery bounds how often a server without a record looks for one (a login made since).
const recheckEvery = 2 * time.Second

// NewSource makes the token source of srv; hc reaches the authorization server (nil: a client
// with a 30-second timeout).
func NewSource(srv mcpconfig.Server, store Store, hc *http.Client) *Source {
	return &Source{srv: srv, store: store, hc: httpClient(hc), now: time.Now}
}

// SetClock replaces the clock (tests).
func (s *Source) SetClock(now func() time.Time) { s.now = now }

// Token returns the access token to send, refreshing it when it expires within RefreshBefore.
// ok is false when the server has no OAuth sign-in and none is needed (no auth: oauth and no
// record); err is a *NeedsSignIn when a person must sign in.
func (s *Source) Token(ctx context.Context) (token string, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv.OAuth.GrantType() == mcpconfig.GrantClientCredentials && s.srv.Auth == mcpconfig.AuthOAuth {
		return s.clientCredentialsLocked(ctx, false)
	}
	if s.rec == nil {
		var rec *Record
		err := ErrNoRecord
		if s.looked.IsZero() || s.now().Sub(s.looked) >= recheckEvery || s.now().Before(s.looked) {
			rec, err = s.store.Load(ctx, s.srv.Name)
		}
		switch {
		case errors.Is(err, ErrNoRecord):
			s.looked = s.now()
			if s.srv.Auth != mcpconfig.AuthOAuth {
				return "", false, nil
			}
			return "", true, &NeedsSignIn{Server: s.srv.Name, Why: s.whyLocked("nobody has signed in")}
		case err != nil:
			return "", true, err
		}
		s.rec = rec
	}
	if s.rec.Token.Expiry.IsZero() || s.now().Add(RefreshBefore).Before(s.rec.Token.Expiry) {
		return s.rec.Token.AccessToken, true, nil
	}
	if err := s.refreshLocked(ctx); err != nil {
		return "", true, err
	}
	return s.rec.Token.AccessToken, true, nil
}

// Refused is told that the server answered 401 to token: it refreshes once (a client
// credentials token is fetched again), and reports whether to retry the request with the new
// token; when the refresh fails the error is a *NeedsSignIn.
func (s *Source) Refused(ctx context.Context, token string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv.OAuth.GrantType() == mcpconfig.GrantClientCredentials && s.srv.Auth == mcpconfig.AuthOAuth {
		if s.cc != nil && s.cc.Resource != "" {
			_, _, err := s.clientCredentialsLocked(ctx, true)
			return err == nil, err
		}
		return false, nil
	}
	if s.rec == nil {
		return false, &NeedsSignIn{Server: s.srv.Name}
	}
	if s.rec.Token.AccessToken != token {
		return true, nil // another request refreshed it meanwhile
	}
	if err := s.refreshLocked(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// refreshLocked trades the refresh token for new tokens and keeps them; without a refresh
// token, or when the authorization server refuses it, the record is dropped and a person must
// sign in again.
func (s *Source) refreshLocked(ctx context.Context) error {
	rec := s.rec
	if rec.Token.RefreshToken == "" {
		return s.dropLocked(ctx, "the token expired and there is no refresh token")
	}
	cfg := &oauth2.Config{ClientID: rec.ClientID, ClientSecret: s.secretOf(rec),
		Endpoint: oauth2.Endpoint{TokenURL: rec.TokenURL, AuthStyle: authStyle(s.secretOf(rec))}, Scopes: s.srv.OAuth.Scopes}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ctx = context.WithValue(ctx, oauth2.HTTPClient, withResource(s.hc, rec.Resource))
	old := &oauth2.Token{RefreshToken: rec.Token.RefreshToken, Expiry: time.Unix(1, 0)}
	tok, err := cfg.TokenSource(ctx, old).Token()
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode < 500 {
			return s.dropLocked(ctx, "the authorization server refused the refresh: "+refusal(re))
		}
		return tokenError("refreshing the token", err)
	}
	next := *rec
	next.Token = stripExtra(tok)
	if next.Token.RefreshToken == "" {
		next.Token.RefreshToken = rec.Token.RefreshToken
	}
	if err := s.store.Save(ctx, &next); err != nil {
		return err
	}
	s.rec, s.gone = &next, ""
	return nil
}

func (s *Source) dropLocked(ctx context.Context, why string) error {
	s.rec, s.gone, s.looked = nil, why, s.now()
	if err := s.store.Delete(ctx, s.srv.Name); err != nil {
		return err
	}
	return &NeedsSignIn{Server: s.srv.Name, Why: why}
}

func (s *Source) whyLocked(def string) string {
	if s.gone != "" {
		return s.gone
	}
	return def
}

// secretOf is the record's client secret: the one dynamic registration gave, else the
// configured one (from the environment).
func (s *Source) secretOf(rec *Record) string {
	if rec.ClientSecret != "" {
		return rec.ClientSecret
	}
	if rec.ClientID == s.srv.OAuth.ClientID {
		return s.srv.OAuth.ClientSecret
	}
	return ""
}

func authStyle(secret string) oauth2.AuthStyle {
	if secret == "" {
		return oauth2.AuthStyleInParams
	}
	return oauth2.AuthStyleAutoDetect
}

// clientCredentialsLocked returns the client credentials token, fetching one when there is
// none, it expires within RefreshBefore, or again is set.
func (s *Source) clientCredentialsLocked(ctx context.Context, again bool) (string, bool, error) {
	if !again && s.rec != nil && (s.rec.Token.Expiry.IsZero() || s.now().Add(RefreshBefore).Before(s.rec.Token.Expiry)) {
		return s.rec.Token.AccessToken, true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if s.cc == nil {
		md, err := Discover(ctx, s.hc, s.srv.URL, "", false)
		if err != nil {
			return "", true, err
		}
		s.cc = md
	}
	cfg := clientcredentials.Config{ClientID: s.srv.OAuth.ClientID, ClientSecret: s.srv.OAuth.ClientSecret,
		TokenURL: s.cc.TokenEndpoint, Scopes: s.srv.OAuth.Scopes}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, withResource(s.hc, s.cc.Resource))
	tok, err := cfg.Token(ctx)
	if err != nil {
		return "", true, tokenError("client credentials", err)
	}
	s.rec = &Record{Server: s.srv.Name, Resource: s.cc.Resource, Token: stripExtra(tok)}
	return tok.AccessToken, true, nil
}

// Transport sends each request with the server's token; a 401 makes it refresh once and send
// the request again. A 401 that asks for OAuth (WWW-Authenticate with resource_metadata) from a
// server nobody signed in to is a *NeedsSignIn. Any Authorization header already on the
// request is replaced: only the server's own token ever reaches it.
type Transport struct {
	Source *Source
	Next   http.RoundTripper
}

func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.roundTrip(r)
	var n *NeedsSignIn
	switch {
	case errors.As(err, &n):
		t.Source.needs.Store(n)
	case err == nil:
		t.Source.needs.Store(nil)
	}
	return resp, err
}

func (t *Transport) roundTrip(r *http.Request) (*http.Response, error) {
	tok, ok, err := t.Source.Token(r.Context())
	if err != nil {
		drain(r)
		return nil, err
	}
	resp, err := t.Next.RoundTrip(withToken(r, tok, ok))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	if !ok {
		if Challenge(resp.Header) == "" {
			return resp, nil // a 401 of another kind: the server's own answer
		}
		drainBody(resp)
		return nil, &NeedsSignIn{Server: t.Source.srv.Name, Why: "the server asks for OAuth sign-in"}
	}
	if r.Body != nil && r.GetBody == nil {
		return resp, nil // cannot be sent again
	}
	retry, err := t.Source.Refused(r.Context(), tok)
	if err != nil || !retry {
		drainBody(resp)
		if err == nil {
			err = &NeedsSignIn{Server: t.Source.srv.Name, Why: "the server refused the token"}
		}
		return nil, err
	}
	drainBody(resp)
	tok, _, err = t.Source.Token(r.Context())
	if err != nil {
		return nil, err
	}
	r2 := r.Clone(r.Context())
	if r.GetBody != nil {
		if r2.Body, err = r.GetBody(); err != nil {
			return nil, err
		}
	}
	resp, err = t.Next.RoundTrip(withToken(r2, tok, true))
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		drainBody(resp)
		return nil, t.Source.refusedAgain(r.Context())
	}
	return resp, err
}

// refusedAgain is the error when the server refuses a token just refreshed or fetched.
func (s *Source) refusedAgain(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv.OAuth.GrantType() == mcpconfig.GrantClientCredentials && s.srv.Auth == mcpconfig.AuthOAuth {
		s.rec = nil
		return fail("%s refused a new client credentials token: check oauth.clientId and oauth.scopes, and that the authorization server mints tokens for this server's resource", s.srv.Name)
	}
	return s.dropLocked(ctx, "the server refused a freshly refreshed token")
}

func withToken(r *http.Request, tok string, ok bool) *http.Request {
	r2 := r.Clone(r.Context())
	r2.Header.Del("Authorization")
	if ok {
		r2.Header.Set("Authorization", "Bearer "+tok)
	}
	return r2
}

func drain(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

func drainBody(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
}

// String keeps a Source out of logs.
func (s *Source) String() string { return fmt.Sprintf("oauth.Source(%s)", s.srv.Name) }
