package server

import (
	"context"
	"crypto/tls"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/internal/tlsfiles"
	"github.com/toolmesh/toolmesh/internal/tlsfiles/tlstest"
)

// startMutualTLS runs a gRPC server that requires a client certificate of the source's CA.
func startMutualTLS(t testing.TB, src *tlsfiles.Source) *GRPC {
	t.Helper()
	creds := ServerTLS(func() *tls.Config { return tlsfiles.ServerConfig(src, src, tls.RequireAndVerifyClientCert) })
	return runGRPC(t, grpc.Creds(creds))
}

func load(t testing.TB, files tlsfiles.Files) *tlsfiles.Source {
	t.Helper()
	s, err := tlsfiles.Load(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// check asks the server's health over a new connection made with creds (and the options every
// toolmesh client has), and returns the serial of the certificate the server presented.
func check(t *testing.T, target string, creds credentials.TransportCredentials) (string, error) {
	t.Helper()
	return tlstest.HealthCheck(t, target, "", append(DialOptions(), grpc.WithTransportCredentials(creds))...)
}

// TestMutualTLS: a server with mutual TLS answers a client whose certificate its CA signed and
// refuses every other client; the client verifies the server's name.
func TestMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t)
	serverID := tlstest.Issue(t, ca, "svc")
	srv := load(t, tlstest.NewSecretDir(t, serverID).Files())
	g := startMutualTLS(t, srv)
	cli := load(t, tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "client")).Files())
	mesh := func() *tls.Config { return tlsfiles.ClientConfig(cli, cli) }
	stranger := load(t, tlstest.NewSecretDir(t, tlstest.Issue(t, tlstest.NewCA(t), "client")).Files())

	for _, tc := range []struct {
		name   string
		target string
		creds  credentials.TransportCredentials
		ok     bool
	}{
		{"a client of the CA, naming the server", g.Addr(), ClientTLS(mesh, "svc"), true},
		{"an address list, with the server's name given", "ipv4:" + g.Addr(), ClientTLS(mesh, "svc"), true},
		{"an IP address the certificate does not name", g.Addr(), ClientTLS(mesh, ""), false},
		{"a client without a certificate", g.Addr(), ClientTLS(func() *tls.Config { return tlsfiles.ClientConfig(nil, cli) }, "svc"), false},
		{"a client whose certificate another CA signed", g.Addr(), ClientTLS(func() *tls.Config { return tlsfiles.ClientConfig(stranger, cli) }, "svc"), false},
		{"a plaintext client", g.Addr(), insecure.NewCredentials(), false},
		{"a client that trusts another CA", g.Addr(), ClientTLS(func() *tls.Config { return tlsfiles.ClientConfig(cli, stranger) }, "svc"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := check(t, tc.target, tc.creds)
			if tc.ok && (err != nil || got != tlstest.Serial(t, serverID.Cert)) {
				t.Errorf("health check: serial %s, err %v; want an answer with the server's certificate", got, err)
			}
			if !tc.ok && err == nil {
				t.Error("health check answered; want the connection refused")
			}
		})
	}
}

// TestMutualTLSRotation: files swapped on disk (as the kubelet swaps a Secret's) apply to the
// next connection, with no new server or client; a broken set keeps the previous one.
func TestMutualTLSRotation(t *testing.T) {
	ca := tlstest.NewCA(t)
	first := tlstest.Issue(t, ca, "svc")
	dir := tlstest.NewSecretDir(t, first)
	srv := load(t, dir.Files())
	g := startMutualTLS(t, srv)
	cli := load(t, tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "client")).Files())
	creds := ClientTLS(func() *tls.Config { return tlsfiles.ClientConfig(cli, cli) }, "svc")

	if got, err := check(t, g.Addr(), creds); err != nil || got != tlstest.Serial(t, first.Cert) {
		t.Fatalf("before the swap: serial %s, err %v", got, err)
	}
	second := tlstest.Issue(t, ca, "svc")
	dir.SwapTo(second)
	if _, err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := check(t, g.Addr(), creds); err != nil || got != tlstest.Serial(t, second.Cert) {
		t.Errorf("after the swap: serial %s, err %v; want the new certificate %s", got, err, tlstest.Serial(t, second.Cert))
	}
	third := tlstest.Issue(t, ca, "svc")
	dir.Swap(third.Cert, second.Key, ca.CertPEM())
	if _, err := srv.Reload(); err == nil {
		t.Error("a certificate with another's key loaded")
	}
	if got, err := check(t, g.Addr(), creds); err != nil || got != tlstest.Serial(t, second.Cert) {
		t.Errorf("after a broken swap: serial %s, err %v; want the previous certificate %s", got, err, tlstest.Serial(t, second.Cert))
	}
}

// BenchmarkCallMutualTLS is what mutual TLS adds to one unary call on an established
// connection between toolmesh services (loopback, a health check: a small message each way),
// against plaintext. The handshake is made once, before the timer: services keep their
// connections.
func BenchmarkCallMutualTLS(b *testing.B) {
	ca := tlstest.NewCA(b)
	srv := load(b, tlstest.NewSecretDir(b, tlstest.Issue(b, ca, "svc")).Files())
	cli := load(b, tlstest.NewSecretDir(b, tlstest.Issue(b, ca, "client")).Files())
	for _, bc := range []struct {
		name  string
		start func() *GRPC
		creds credentials.TransportCredentials
	}{
		{"plaintext", func() *GRPC { return runGRPC(b) }, insecure.NewCredentials()},
		{"mutual-tls", func() *GRPC { return startMutualTLS(b, srv) },
			ClientTLS(func() *tls.Config { return tlsfiles.ClientConfig(cli, cli) }, "svc")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g := bc.start()
			conn, err := grpc.NewClient(g.Addr(), append(DialOptions(), grpc.WithTransportCredentials(bc.creds))...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			hc := healthpb.NewHealthClient(conn)
			ctx := context.Background()
			if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
