package oauth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// SecretStore keeps each server's record under the key SERVER.json of one Kubernetes Secret,
// so that every executor replica, and a restarted one, has the same sign-ins. It talks to the
// API server with the pod's service account (which the Helm chart lets get and patch that one
// Secret), reading the token file again for each request, as the kubelet rotates it.
type SecretStore struct {
	// API is the API server's base URL; Namespace and Name name the Secret.
	API, Namespace, Name string
	// TokenFile holds the service account's token.
	TokenFile string
	HTTP      *http.Client
}

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// InClusterSecretStore is the SecretStore of Secret name in the pod's own namespace.
func InClusterSecretStore(name string) (*SecretStore, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("executor.oauth-secret: not running in Kubernetes (no KUBERNETES_SERVICE_HOST); use --executor.oauth-dir outside a cluster")
	}
	ns, err := os.ReadFile(serviceAccountDir + "/namespace")
	if err != nil {
		return nil, fmt.Errorf("executor.oauth-secret: the pod has no service account token mounted (automountServiceAccountToken): %w", err)
	}
	ca, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("executor.oauth-secret: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("executor.oauth-secret: the service account's ca.crt holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, TLSHandshakeTimeout: 10 * time.Second}
	return &SecretStore{API: "https://" + net.JoinHostPort(host, port), Namespace: strings.TrimSpace(string(ns)), Name: name,
		TokenFile: serviceAccountDir + "/token", HTTP: &http.Client{Transport: tr, Timeout: 15 * time.Second}}, nil
}

func (s *SecretStore) url() string {
	return fmt.Sprintf("%s/api/v1/namespaces/%s/secrets/%s", strings.TrimSuffix(s.API, "/"), s.Namespace, s.Name)
}

func (s *SecretStore) do(ctx context.Context, method, contentType string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.url(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if tok, err := os.ReadFile(s.TokenFile); err == nil {
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, data, err
}

func (s *SecretStore) Load(ctx context.Context, server string) (*Record, error) {
	code, data, err := s.do(ctx, http.MethodGet, "", nil)
	if err != nil {
		return nil, err
	}
	switch {
	case code == http.StatusNotFound:
		return nil, ErrNoRecord
	case code != http.StatusOK:
		// The API server's answer is a Status naming the Secret, never its data.
		return nil, fmt.Errorf("reading secret %s/%s: HTTP %d %s", s.Namespace, s.Name, code, clean(string(data)))
	}
	var sec struct {
		Data map[string][]byte `json:"data"`
	}
	if err := json.Unmarshal(data, &sec); err != nil {
		return nil, fmt.Errorf("secret %s/%s is not a Secret", s.Namespace, s.Name)
	}
	raw, ok := sec.Data[server+".json"]
	if !ok {
		return nil, ErrNoRecord
	}
	var rec Record
	if err := json.Unmarshal(raw, &rec); err != nil || rec.Token == nil {
		return nil, fmt.Errorf("the sign-in of %s in secret %s/%s is damaged; run toolmesh login %s again", server, s.Namespace, s.Name, server)
	}
	return &rec, nil
}

// Save patches the one key (a JSON merge patch), so the replicas' writes of other servers'
// records do not undo each other.
func (s *SecretStore) Save(ctx context.Context, rec *Record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return s.patch(ctx, rec.Server, base64.StdEncoding.EncodeToString(raw))
}

func (s *SecretStore) Delete(ctx context.Context, server string) error {
	return s.patch(ctx, server, nil)
}

func (s *SecretStore) patch(ctx context.Context, server string, value any) error {
	body, _ := json.Marshal(map[string]any{"data": map[string]any{server + ".json": value}})
	code, data, err := s.do(ctx, http.MethodPatch, "application/merge-patch+json", body)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("writing secret %s/%s: HTTP %d %s (the chart creates it and lets the executor patch it)", s.Namespace, s.Name, code, clean(string(data)))
	}
	return nil
}
