// Package tlstest makes a CA and certificates inside a test, and lays them out the way the
// kubelet mounts a Kubernetes Secret, so that a test can rotate them the way it does.
package tlstest

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/toolmesh/toolmesh/internal/tlsfiles"
)

// NewCA makes a CA valid for an hour.
func NewCA(t testing.TB) *tlsfiles.CA {
	t.Helper()
	ca, err := tlsfiles.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Identity is a certificate and its key, signed by CA, in PEM.
type Identity struct {
	CA        *tlsfiles.CA
	Cert, Key []byte
}

// Issue signs a certificate for names (DNS names or IP addresses), valid for an hour.
func Issue(t testing.TB, ca *tlsfiles.CA, names ...string) Identity {
	t.Helper()
	cert, key, err := ca.Issue(names, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return Identity{CA: ca, Cert: cert, Key: key}
}

// Serial is the serial number of the first certificate of a PEM chain.
func Serial(t testing.TB, certPEM []byte) string {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM block in the certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// SecretDir holds tls.crt, tls.key and ca.crt as the kubelet mounts a Secret: the files in a
// timestamped folder, ..data a symlink to it, and each file a symlink through ..data. Swap
// replaces all three at once, as the kubelet does, by renaming a new ..data over the old one.
type SecretDir struct {
	t   testing.TB
	Dir string
	n   int
}

// NewSecretDir writes id into a new folder of the test.
func NewSecretDir(t testing.TB, id Identity) *SecretDir {
	t.Helper()
	d := &SecretDir{t: t, Dir: t.TempDir()}
	d.Swap(id.Cert, id.Key, id.CA.CertPEM())
	for _, f := range []string{tlsfiles.CertFile, tlsfiles.KeyFile, tlsfiles.CACertFile} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(d.Dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// Swap replaces the three files at once.
func (d *SecretDir) Swap(cert, key, ca []byte) {
	d.t.Helper()
	d.n++
	version := fmt.Sprintf("..2026_01_01_00_00_%02d", d.n)
	if err := os.Mkdir(filepath.Join(d.Dir, version), 0o700); err != nil {
		d.t.Fatal(err)
	}
	for f, b := range map[string][]byte{tlsfiles.CertFile: cert, tlsfiles.KeyFile: key, tlsfiles.CACertFile: ca} {
		if err := os.WriteFile(filepath.Join(d.Dir, version, f), b, 0o600); err != nil {
			d.t.Fatal(err)
		}
	}
	tmp := filepath.Join(d.Dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.Dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

// SwapTo replaces the files with id's.
func (d *SecretDir) SwapTo(id Identity) { d.Swap(id.Cert, id.Key, id.CA.CertPEM()) }

// Files are the three files' paths.
func (d *SecretDir) Files() tlsfiles.Files {
	return tlsfiles.Files{Cert: d.Path(tlsfiles.CertFile), Key: d.Path(tlsfiles.KeyFile), CA: d.Path(tlsfiles.CACertFile)}
}

// Path is the path of one of the files.
func (d *SecretDir) Path(name string) string { return filepath.Join(d.Dir, name) }

// HealthCheck asks grpc.health.v1 at target about service over a new connection made with
// opts (its transport credentials among them), and returns the serial of the certificate the
// server presented ("" without TLS).
func HealthCheck(t testing.TB, target, service string, opts ...grpc.DialOption) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.Peer(&p))
	if err != nil {
		return "", err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return "", fmt.Errorf("health of %q: %s", service, resp.GetStatus())
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		return info.State.PeerCertificates[0].SerialNumber.String(), nil
	}
	return "", nil
}
