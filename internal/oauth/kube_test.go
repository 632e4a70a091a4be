package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/oauth2"

	"github.com/toolmesh/toolmesh/internal/oauth"
)

// kubeAPIDouble is a double of the Kubernetes API server's Secret endpoints (GET, and PATCH
// with a JSON merge patch), as much as SecretStore uses: there is no cluster here.
type kubeAPIDouble struct {
	mu      sync.Mutex
	data    map[string]string // key → base64
	auth    []string
	patches int
}

func (d *kubeAPIDouble) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.auth = append(d.auth, r.Header.Get("Authorization"))
	if r.URL.Path != "/api/v1/namespaces/mesh/secrets/toolmesh-oauth" {
		http.Error(w, `{"kind":"Status","code":404}`, http.StatusNotFound)
		return
	}
	switch r.Method {
	case http.MethodGet:
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Secret", "data": d.data})
	case http.MethodPatch:
		if r.Header.Get("Content-Type") != "application/merge-patch+json" {
			http.Error(w, "unsupported patch", http.StatusUnsupportedMediaType)
			return
		}
		var p struct {
			Data map[string]*string `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d.patches++
		for k, v := range p.Data {
			if v == nil {
				delete(d.data, k)
			} else {
				d.data[k] = *v
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Secret", "data": d.data})
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

func TestSecretStore(t *testing.T) {
	d := &kubeAPIDouble{data: map[string]string{"other.json": "e30="}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("sa-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &oauth.SecretStore{API: srv.URL, Namespace: "mesh", Name: "toolmesh-oauth", TokenFile: tokenFile, HTTP: srv.Client()}
	ctx := context.Background()
	if _, err := s.Load(ctx, "linear"); !errors.Is(err, oauth.ErrNoRecord) {
		t.Fatalf("load before any sign-in: %v, want ErrNoRecord", err)
	}
	rec := &oauth.Record{Server: "linear", ClientID: "c", TokenURL: "https://as/token", Token: &oauth2.Token{AccessToken: "at", RefreshToken: "rt"}}
	if err := s.Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "linear")
	if err != nil || got.Token.RefreshToken != "rt" {
		t.Fatalf("load after save: %+v, %v", got, err)
	}
	if err := s.Delete(ctx, "linear"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "linear"); !errors.Is(err, oauth.ErrNoRecord) {
		t.Fatalf("load after delete: %v", err)
	}
	d.mu.Lock()
	if _, ok := d.data["other.json"]; !ok {
		t.Errorf("another server's record was lost: %v", d.data)
	}
	for _, a := range d.auth {
		if a != "Bearer sa-token" {
			t.Errorf("request with Authorization %q, want the service account's token", a)
		}
	}
	d.mu.Unlock()

	s.Name = "missing"
	err = s.Save(ctx, rec)
	if err == nil || !strings.Contains(err.Error(), "writing secret mesh/missing: HTTP 404") {
		t.Errorf("save to a missing secret: %v", err)
	}
}
