package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// pki is a CA and one certificate it signed for both server and client use, in PEM files laid
// out as cert-manager writes a Secret (tls.crt, tls.key, ca.crt): what the Helm chart mounts.
type pki struct {
	dir  string
	pool *x509.CertPool
	pair tls.Certificate
}

func newPKI(t *testing.T, dnsName string) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{dnsName}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", "CERTIFICATE", caDER)
	write("tls.crt", "CERTIFICATE", der)
	write("tls.key", "EC PRIVATE KEY", keyDER)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pki{dir: dir, pool: pool, pair: pair}
}

// serverTLS requires and verifies a client certificate: mutual TLS.
func (p pki) serverTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.pair}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

func (p pki) flags(serverName string) []string {
	return []string{
		"-tls.ca-file=" + filepath.Join(p.dir, "ca.crt"),
		"-tls.cert-file=" + filepath.Join(p.dir, "tls.crt"),
		"-tls.key-file=" + filepath.Join(p.dir, "tls.key"),
		"-tls.server-name=" + serverName,
	}
}

func TestGRPCMutualTLS(t *testing.T) {
	const name = "tm-toolmesh-executor.mesh.svc.cluster.local"
	p := newPKI(t, name)
	other := newPKI(t, name) // same name, another CA
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(p.serverTLS())))
	h := health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	h.SetServingStatus("toolmesh.v1.ExecutorService", healthpb.HealthCheckResponse_SERVING)
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	addr := lis.Addr().String()
	ca := "-tls.ca-file=" + filepath.Join(p.dir, "ca.crt")

	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"mutual TLS", append(p.flags(name), "grpc", addr, "toolmesh.v1.ExecutorService"), ""},
		{"plaintext to a TLS server", []string{"-timeout=1s", "grpc", addr}, "grpc health"},
		{"no client certificate", []string{"-timeout=1s", ca, "-tls.server-name=" + name, "grpc", addr}, "grpc health"},
		{"wrong server name", append(p.flags("tm-toolmesh-api.mesh.svc.cluster.local"), "-timeout=1s", "grpc", addr), "grpc health"},
		{"certificate of another CA", append(other.flags(name), "-timeout=1s", "grpc", addr), "grpc health"},
		{"certificate without its key", []string{ca, "-tls.cert-file=" + filepath.Join(p.dir, "tls.crt"), "grpc", addr}, "go together"},
		{"client certificate without a CA", []string{"-tls.cert-file=x", "-tls.key-file=y", "grpc", addr}, "need -tls.ca-file"},
		{"CA file that is not PEM", []string{"-tls.ca-file=" + filepath.Join(p.dir, "missing"), "grpc", addr}, "tls.ca-file"},
	} {
		err := run(tc.args, io.Discard)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestHTTPMutualTLS(t *testing.T) {
	const name = "tm-toolmesh-api.mesh.svc.cluster.local"
	p := newPKI(t, name)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	srv.TLS = p.serverTLS()
	srv.StartTLS()
	defer srv.Close()
	t.Setenv("TOOLMESH_TOKEN", "")

	if err := run(append(p.flags(name), "http", srv.URL+"/readyz"), io.Discard); err != nil {
		t.Errorf("mutual TLS: %v", err)
	}
	ca := "-tls.ca-file=" + filepath.Join(p.dir, "ca.crt")
	if err := run([]string{"-timeout=1s", ca, "-tls.server-name=" + name, "http", srv.URL + "/readyz"}, io.Discard); err == nil {
		t.Error("no client certificate: no error")
	}
}
