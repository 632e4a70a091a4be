package tlsfiles_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/tlsfiles"
	"github.com/toolmesh/toolmesh/internal/tlsfiles/tlstest"
)

func writeTemp(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadRefuses(t *testing.T) {
	ca := tlstest.NewCA(t)
	id := tlstest.Issue(t, ca, "svc")
	other := tlstest.Issue(t, tlstest.NewCA(t), "svc")
	dir := t.TempDir()
	cert := writeTemp(t, dir, "tls.crt", id.Cert)
	key := writeTemp(t, dir, "tls.key", id.Key)
	caFile := writeTemp(t, dir, "ca.crt", ca.CertPEM())
	otherKey := writeTemp(t, dir, "other.key", other.Key)
	otherCert := writeTemp(t, dir, "other.crt", other.Cert)
	empty := writeTemp(t, dir, "empty.crt", []byte("not PEM\n"))
	huge := writeTemp(t, dir, "huge.crt", bytes.Repeat([]byte("A"), 1<<20+1))
	for _, tc := range []struct {
		name  string
		files tlsfiles.Files
		want  string
	}{
		{"key without certificate", tlsfiles.Files{Key: key, CA: caFile}, "go together"},
		{"nothing", tlsfiles.Files{}, "no certificate and no CA"},
		{"missing file", tlsfiles.Files{Cert: filepath.Join(dir, "nope.crt"), Key: key}, "nope.crt"},
		{"key of another certificate", tlsfiles.Files{Cert: cert, Key: otherKey}, "private key does not match"},
		{"CA file without a certificate", tlsfiles.Files{CA: empty}, "empty.crt: holds no PEM certificate"},
		{"certificate of another CA", tlsfiles.Files{Cert: otherCert, Key: otherKey, CA: caFile}, "is not signed by the CA of"},
		{"oversized file", tlsfiles.Files{CA: huge}, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsfiles.Load(tc.files, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("tlsfiles.Load(%+v) = %v, want an error containing %q", tc.files, err, tc.want)
			}
		})
	}
	for _, files := range []tlsfiles.Files{{Cert: cert, Key: key, CA: caFile}, {Cert: cert, Key: key}, {CA: caFile}, {Cert: otherCert, Key: otherKey}} {
		if _, err := tlsfiles.Load(files, nil); err != nil {
			t.Errorf("tlsfiles.Load(%+v): %v", files, err)
		}
	}
}

func serial(s *tlsfiles.Source) string { return s.Certificate().Leaf.SerialNumber.String() }

var leafSerial = tlstest.Serial

// TestReloadSymlinkSwap: files replaced the way the kubelet replaces a Secret's are taken on the
// next reload; a set that does not load keeps the previous one, until a good one comes.
func TestReloadSymlinkSwap(t *testing.T) {
	ca := tlstest.NewCA(t)
	first, second, third := tlstest.Issue(t, ca, "svc"), tlstest.Issue(t, ca, "svc"), tlstest.Issue(t, ca, "svc")
	d := tlstest.NewSecretDir(t, first)
	s, err := tlsfiles.Load(d.Files(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := serial(s), leafSerial(t, first.Cert); got != want {
		t.Fatalf("serial %s, want the first certificate's %s", got, want)
	}
	if changed, err := s.Reload(); changed || err != nil {
		t.Errorf("Reload of unchanged files = %v, %v; want false, nil", changed, err)
	}

	d.Swap(second.Cert, second.Key, ca.CertPEM())
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("Reload after the swap = %v, %v; want true, nil", changed, err)
	}
	if got, want := serial(s), leafSerial(t, second.Cert); got != want {
		t.Errorf("serial after the swap %s, want the second certificate's %s", got, want)
	}

	broken := []struct {
		name           string
		cert, key, cas []byte
		want           string
	}{
		{"the new certificate with the old key (a torn copy)", third.Cert, second.Key, ca.CertPEM(), "private key does not match"},
		{"a truncated certificate", third.Cert[:len(third.Cert)/2], third.Key, ca.CertPEM(), "tls.crt"},
		{"an empty CA file", third.Cert, third.Key, nil, "holds no PEM certificate"},
		{"a CA that did not sign the certificate", third.Cert, third.Key, tlstest.NewCA(t).CertPEM(), "not signed by the CA"},
	}
	for _, b := range broken {
		d.Swap(b.cert, b.key, b.cas)
		changed, err := s.Reload()
		if changed || err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: Reload = %v, %v; want false and an error containing %q", b.name, changed, err, b.want)
		}
		if got, want := serial(s), leafSerial(t, second.Cert); got != want {
			t.Errorf("%s: serial %s, want the second certificate's %s kept", b.name, got, want)
		}
	}

	d.Swap(third.Cert, third.Key, ca.CertPEM())
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("Reload of a good set after broken ones = %v, %v; want true, nil", changed, err)
	}
	if got, want := serial(s), leafSerial(t, third.Cert); got != want {
		t.Errorf("serial %s, want the third certificate's %s", got, want)
	}
}

// syncBuffer is a log destination Run writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunLogs: Run takes a change by itself and logs it; a broken set is logged once, however
// many polls see it.
func TestRunLogs(t *testing.T) {
	ca := tlstest.NewCA(t)
	first, second := tlstest.Issue(t, ca, "svc"), tlstest.Issue(t, ca, "svc")
	d := tlstest.NewSecretDir(t, first)
	var logs syncBuffer
	s, err := tlsfiles.Load(d.Files(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, 5*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	d.Swap(second.Cert, first.Key, ca.CertPEM())
	waitFor(t, "a log line for the broken set", func() bool { return strings.Contains(logs.String(), "keeping the previous ones") })
	time.Sleep(50 * time.Millisecond) // ten more polls of the same broken set
	if n := strings.Count(logs.String(), "keeping the previous ones"); n != 1 {
		t.Errorf("the broken set was logged %d times, want once:\n%s", n, logs.String())
	}
	d.Swap(second.Cert, second.Key, ca.CertPEM())
	want := leafSerial(t, second.Cert)
	waitFor(t, "the second certificate taken", func() bool { return serial(s) == want })
	waitFor(t, "a log line for the reload", func() bool { return strings.Contains(logs.String(), "tls files reloaded") })
	if !strings.Contains(logs.String(), `subject="CN=svc"`) {
		t.Errorf("the reload's log line does not name the certificate's subject:\n%s", logs.String())
	}
}

// handshake runs one TLS handshake between a server whose configuration is asked for per
// handshake and a client, and returns the server's serial as the client saw it.
func handshake(t *testing.T, server func() *tls.Config, client *tls.Config) (string, error) {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		srv := tls.Server(c, &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return server(), nil }})
		err = srv.Handshake()
		if err == nil {
			// A TLS 1.3 server learns that the client refused it only after its own handshake:
			// read until the client closes or says why.
			_, err = srv.Read(make([]byte, 1))
			if errors.Is(err, io.EOF) {
				err = nil
			}
		}
		errc <- err
	}()
	var d net.Dialer
	c, err := d.DialContext(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	cl := tls.Client(c, client)
	err = cl.Handshake()
	var got string
	if err == nil {
		got = cl.ConnectionState().PeerCertificates[0].SerialNumber.String()
		// A TLS 1.3 client sees a refusal of its certificate only on its first read.
		_ = cl.Close()
	}
	return got, errors.Join(err, <-errc)
}

// TestConfigsPerHandshake: each handshake uses the certificate and CA a source holds then, so a
// rotation (a new certificate, then a new CA) needs no new configuration, and a client without a
// certificate the current CA signed is refused.
func TestConfigsPerHandshake(t *testing.T) {
	ca := tlstest.NewCA(t)
	serverID, clientID := tlstest.Issue(t, ca, "svc"), tlstest.Issue(t, ca, "client")
	sd, cd := tlstest.NewSecretDir(t, serverID), tlstest.NewSecretDir(t, clientID)
	server, err := tlsfiles.Load(sd.Files(), nil)
	if err != nil {
		t.Fatal(err)
	}
	client, err := tlsfiles.Load(cd.Files(), nil)
	if err != nil {
		t.Fatal(err)
	}
	mutual := func() *tls.Config { return tlsfiles.ServerConfig(server, server, tls.RequireAndVerifyClientCert) }
	clientCfg := func(name string) *tls.Config {
		c := tlsfiles.ClientConfig(client, client)
		c.ServerName = name
		return c
	}

	got, err := handshake(t, mutual, clientCfg("svc"))
	if err != nil || got != leafSerial(t, serverID.Cert) {
		t.Fatalf("first handshake: serial %s, err %v; want the server's first certificate", got, err)
	}
	if _, err := handshake(t, mutual, clientCfg("other")); err == nil {
		t.Error("a client dialling a name the server's certificate lacks was let through")
	}
	noCert := tlsfiles.ClientConfig(nil, client)
	noCert.ServerName = "svc"
	if _, err := handshake(t, mutual, noCert); err == nil {
		t.Error("a client without a certificate was let through")
	}
	stranger := tlstest.Issue(t, tlstest.NewCA(t), "client")
	pair, err := tls.X509KeyPair(stranger.Cert, stranger.Key)
	if err != nil {
		t.Fatal(err)
	}
	foreign := tlsfiles.ClientConfig(nil, client)
	foreign.ServerName, foreign.Certificates = "svc", []tls.Certificate{pair}
	if _, err := handshake(t, mutual, foreign); err == nil {
		t.Error("a client whose certificate another CA signed was let through")
	}
	// Optional client certificates: none is fine, a foreign one is not.
	optional := func() *tls.Config { return tlsfiles.ServerConfig(server, server, tls.VerifyClientCertIfGiven) }
	if _, err := handshake(t, optional, noCert); err != nil {
		t.Errorf("optional client certificates: a client without one was refused: %v", err)
	}
	if _, err := handshake(t, optional, foreign); err == nil {
		t.Error("optional client certificates: a client whose certificate another CA signed was let through")
	}

	// A new server certificate: the next handshake presents it.
	renewed := tlstest.Issue(t, ca, "svc")
	sd.Swap(renewed.Cert, renewed.Key, ca.CertPEM())
	if _, err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := handshake(t, mutual, clientCfg("svc")); err != nil || got != leafSerial(t, renewed.Cert) {
		t.Errorf("after the server's renewal: serial %s, err %v; want the renewed certificate %s", got, err, leafSerial(t, renewed.Cert))
	}

	// A new CA on the server's side only: the client's old certificate is refused, until the
	// client has one of the new CA too (and trusts it).
	ca2 := tlstest.NewCA(t)
	server2, client2 := tlstest.Issue(t, ca2, "svc"), tlstest.Issue(t, ca2, "client")
	sd.Swap(server2.Cert, server2.Key, ca2.CertPEM())
	if _, err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, mutual, clientCfg("svc")); err == nil {
		t.Error("after the CA changed, a client of the old CA was let through")
	}
	cd.Swap(client2.Cert, client2.Key, ca2.CertPEM())
	if _, err := client.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := handshake(t, mutual, clientCfg("svc")); err != nil || got != leafSerial(t, server2.Cert) {
		t.Errorf("both on the new CA: serial %s, err %v", got, err)
	}
}

// TestPinnedConfig: the gateway's client accepts its own server's current certificate and no
// other, even one of the same CA with the same name.
func TestPinnedConfig(t *testing.T) {
	ca := tlstest.NewCA(t)
	d := tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "svc"))
	own, err := tlsfiles.Load(d.Files(), nil)
	if err != nil {
		t.Fatal(err)
	}
	twinDir := tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "svc"))
	twin, err := tlsfiles.Load(twinDir.Files(), nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := func(s *tlsfiles.Source) func() *tls.Config {
		return func() *tls.Config { return tlsfiles.ServerConfig(s, nil, tls.NoClientCert) }
	}
	if _, err := handshake(t, plain(own), tlsfiles.PinnedConfig(own)); err != nil {
		t.Errorf("pinned to its own server: %v", err)
	}
	if _, err := handshake(t, plain(twin), tlsfiles.PinnedConfig(own)); err == nil {
		t.Error("pinned client accepted another certificate of the same CA and name")
	}
	renewed := tlstest.Issue(t, ca, "svc")
	d.Swap(renewed.Cert, renewed.Key, ca.CertPEM())
	if _, err := own.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, plain(own), tlsfiles.PinnedConfig(own)); err != nil {
		t.Errorf("pinned client after its server's renewal: %v", err)
	}
}
