package app

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/tlsfiles"
	"github.com/toolmesh/toolmesh/internal/tlsfiles/tlstest"
)

func TestTLSConfigValidate(t *testing.T) {
	ok := TLSConfig{ReloadInterval: 10 * time.Second}
	mutual := ok
	mutual.CertFile, mutual.KeyFile, mutual.CAFile = "c", "k", "ca"
	for _, tc := range []struct {
		name string
		edit func(c *TLSConfig)
		base TLSConfig
		want string // "" for valid
	}{
		{"off", func(*TLSConfig) {}, ok, ""},
		{"mutual", func(*TLSConfig) {}, mutual, ""},
		{"no CA", func(c *TLSConfig) { c.CAFile = "" }, mutual, "tls.ca-file: mutual TLS needs"},
		{"certificate alone", func(c *TLSConfig) { c.CertFile = "c" }, ok, "tls.key-file, tls.ca-file: mutual TLS needs"},
		{"server name without TLS", func(c *TLSConfig) { c.ServerName = "svc" }, ok, "tls.server-name: needs"},
		{"server name with a port", func(c *TLSConfig) { c.ServerName = "svc:7704" }, mutual, "tls.server-name"},
		{"reload too often", func(c *TLSConfig) { c.ReloadInterval = time.Millisecond }, mutual, "tls.reload-interval"},
		{"api certificate without key", func(c *TLSConfig) { c.APICertFile = "c" }, ok, "api.grpc-tls.cert-file and api.grpc-tls.key-file"},
		{"api TLS alone", func(c *TLSConfig) { c.APICertFile, c.APIKeyFile = "c", "k" }, ok, ""},
		{"api client CA without a certificate", func(c *TLSConfig) { c.APIClientCAFile = "ca" }, ok, "api.grpc-tls.client-ca-file"},
		{"api client CA with the mesh's certificate", func(c *TLSConfig) { c.APIClientCAFile = "ca" }, mutual, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.base
			tc.edit(&c)
			err := c.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// tlsFlags are the flags of mutual TLS with files.
func tlsFlags(f tlsfiles.Files) []string {
	return []string{"--tls.cert-file=" + f.Cert, "--tls.key-file=" + f.Key, "--tls.ca-file=" + f.CA}
}

// endpointOf is the address of the endpoint named name ("executor gRPC").
func endpointOf(t *testing.T, a *App, name string) string {
	t.Helper()
	for _, e := range a.Endpoints {
		if e.Name == name {
			addr, _, _ := strings.Cut(e.Addr, " ")
			return addr
		}
	}
	t.Fatalf("no endpoint %q in %v", name, a.Endpoints)
	return ""
}

// meshCreds are the transport credentials of a client with id's certificate that trusts roots.
func meshCreds(t *testing.T, id *tlsfiles.Source, roots *tlsfiles.Source) grpc.DialOption {
	t.Helper()
	return grpc.WithTransportCredentials(server.ClientTLS(func() *tls.Config { return tlsfiles.ClientConfig(id, roots) }, ""))
}

func loadSource(t *testing.T, f tlsfiles.Files) *tlsfiles.Source {
	t.Helper()
	s, err := tlsfiles.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAttackNoClientCertificate: with mutual TLS on (every target in one process, each on its
// own TCP port), a client without a certificate the CA signed is refused by every internal
// gRPC server, health and reflection included (on main any client was answered). The mesh
// still answers a question end to end, every hop mutual TLS, and the api's own port takes TLS
// clients without a certificate. Then the files rotate under it.
func TestAttackNoClientCertificate(t *testing.T) {
	ca := tlstest.NewCA(t)
	meshDir := tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "toolmesh", "localhost", "127.0.0.1"))
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	m := &scriptedModel{scripts: map[string]script{}}
	d.ScriptFunc(m.reply)
	m.set("What is 2 plus 3?", addTwoAndThree)
	args := append([]string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=" + d.URL, "--tls.reload-interval=100ms",
	}, tlsFlags(meshDir.Files())...)
	a, _ := runApp(t, args, "demo", "executor", "retriever", "inference", "api")
	base := endpointOf(t, a, "REST")
	waitReadyz(t, base)
	if got := query(t, base, `{"query":"What is 2 plus 3?"}`); got.Answer != "2 plus 3 is 5." {
		t.Fatalf("query over mutual TLS: %+v", got)
	}

	client := loadSource(t, tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "client")).Files())
	stranger := loadSource(t, tlstest.NewSecretDir(t, tlstest.Issue(t, tlstest.NewCA(t), "client")).Files())
	clients := []struct {
		name string
		opt  grpc.DialOption
		// mesh and api: whether the internal targets and the api's port answer it.
		mesh, api bool
	}{
		{"a client with a certificate of the CA", meshCreds(t, client, client), true, true},
		{"a client without a certificate", meshCreds(t, nil, client), false, true},
		{"a client whose certificate another CA signed", meshCreds(t, stranger, client), false, false},
		{"a plaintext client", grpc.WithTransportCredentials(insecure.NewCredentials()), false, false},
	}
	servers := []struct{ endpoint, service string }{
		{"executor gRPC", "toolmesh.v1.ExecutorService"},
		{"retriever gRPC", "toolmesh.v1.RetrieverService"},
		{"inference gRPC", "toolmesh.v1.InferenceService"},
		{"api gRPC", "toolmesh.v1.ToolService"},
	}
	for _, s := range servers {
		for _, c := range clients {
			t.Run(s.endpoint+"/"+c.name, func(t *testing.T) {
				want := c.mesh
				if s.endpoint == "api gRPC" {
					want = c.api
				}
				_, err := tlstest.HealthCheck(t, endpointOf(t, a, s.endpoint), s.service, c.opt)
				if err != nil && strings.Contains(err.Error(), "NOT_SERVING") {
					// An answer (the retriever until its index has synced): not refused.
					err = nil
				}
				if want && err != nil {
					t.Errorf("refused: %v", err)
				}
				if !want && err == nil {
					t.Error("answered; want the connection refused")
				}
			})
		}
	}

	// Rotation: a new certificate swapped in as the kubelet does is presented to new
	// connections within a few polls; a broken set keeps it. Established connections (the api's
	// to its dependencies, the gateway's) go on working throughout.
	executor := endpointOf(t, a, "executor gRPC")
	renewed := tlstest.Issue(t, ca, "toolmesh", "localhost", "127.0.0.1")
	meshDir.SwapTo(renewed)
	want := tlstest.Serial(t, renewed.Cert)
	eventually.Check(t, 10*time.Second, "the renewed certificate presented", func() string {
		got, err := tlstest.HealthCheck(t, executor, "", meshCreds(t, client, client))
		if err != nil || got != want {
			return fmt.Sprintf("executor presents serial %s (err %v), want the renewed %s", got, err, want)
		}
		return ""
	})
	broken := tlstest.Issue(t, ca, "toolmesh", "localhost", "127.0.0.1")
	meshDir.Swap(broken.Cert, renewed.Key, ca.CertPEM())
	time.Sleep(500 * time.Millisecond) // five polls
	for _, s := range servers {
		got, err := tlstest.HealthCheck(t, endpointOf(t, a, s.endpoint), s.service, meshCreds(t, client, client))
		if err != nil || got != want {
			t.Errorf("%s after a broken swap: serial %s, err %v; want the renewed certificate %s kept", s.endpoint, got, err, want)
		}
	}
	if got := query(t, base, `{"query":"What is 2 plus 3?"}`); got.Answer != "2 plus 3 is 5." {
		t.Errorf("query after the rotations: %+v", got)
	}
}

// TestAPIPortTLS: the api's gRPC port with a certificate of its own (api.grpc-tls.*), from
// another CA than the mesh's, and no mutual TLS between the services: apps verify it against
// that CA, a client certificate is optional but checked against api.grpc-tls.client-ca-file, and
// the REST gateway (which trusts exactly that certificate) still works.
func TestAPIPortTLS(t *testing.T) {
	public := tlstest.NewCA(t)
	apiDir := tlstest.NewSecretDir(t, tlstest.Issue(t, public, "toolmesh.example.com"))
	appsCA := tlstest.NewCA(t)
	appsDir := tlstest.NewSecretDir(t, tlstest.Issue(t, appsCA, "app"))
	a, _ := runApp(t, []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--api.retriever-addr=", "--api.inference-addr=", "--drain-timeout=2s",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--api.grpc-tls.cert-file=" + apiDir.Path(tlsfiles.CertFile), "--api.grpc-tls.key-file=" + apiDir.Path(tlsfiles.KeyFile),
		"--api.grpc-tls.client-ca-file=" + appsDir.Path(tlsfiles.CACertFile),
	}, "demo", "executor", "api")
	base := endpointOf(t, a, "REST")
	waitReadyz(t, base)
	code, body := do(t, "", http.MethodPost, base+"/v1/query", `{"query":"@calculator.add({\"a\":2,\"b\":3})"}`)
	if code != http.StatusOK || !strings.Contains(string(body), `"answer":"5"`) {
		t.Errorf("REST through the gateway to a TLS port: %d %s", code, body)
	}
	// The executor's port stays plaintext: no mutual TLS was asked for.
	if _, err := tlstest.HealthCheck(t, endpointOf(t, a, "executor gRPC"), "", grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Errorf("executor without tls.*: %v", err)
	}

	api := endpointOf(t, a, "api gRPC")
	roots := loadSource(t, tlsfiles.Files{CA: apiDir.Path(tlsfiles.CACertFile)})
	app := loadSource(t, tlsfiles.Files{Cert: appsDir.Path(tlsfiles.CertFile), Key: appsDir.Path(tlsfiles.KeyFile)})
	meshID := loadSource(t, tlstest.NewSecretDir(t, tlstest.Issue(t, tlstest.NewCA(t), "client")).Files())
	creds := func(id *tlsfiles.Source, name string) credentials.TransportCredentials {
		return server.ClientTLS(func() *tls.Config { return tlsfiles.ClientConfig(id, roots) }, name)
	}
	for _, tc := range []struct {
		name string
		opt  grpc.DialOption
		ok   bool
	}{
		{"an app without a certificate", grpc.WithTransportCredentials(creds(nil, "toolmesh.example.com")), true},
		{"an app with a certificate of the client CA", grpc.WithTransportCredentials(creds(app, "toolmesh.example.com")), true},
		{"a client whose certificate another CA signed", grpc.WithTransportCredentials(creds(meshID, "toolmesh.example.com")), false},
		{"a client expecting another name", grpc.WithTransportCredentials(creds(nil, "other.example.com")), false},
		{"a plaintext client", grpc.WithTransportCredentials(insecure.NewCredentials()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlstest.HealthCheck(t, api, "toolmesh.v1.ToolService", tc.opt)
			if tc.ok != (err == nil) {
				t.Errorf("health check err = %v, want answered %v", err, tc.ok)
			}
		})
	}
}

// waitReadyz waits until /readyz is 200.
func waitReadyz(t *testing.T, base string) {
	t.Helper()
	eventually.Check(t, 30*time.Second, "/readyz ready", func() string {
		code, b := do(t, "", http.MethodGet, base+"/readyz", "")
		if code != http.StatusOK {
			return fmt.Sprintf("/readyz %d %s", code, b)
		}
		return ""
	})
}

// TestTLSFilesRefused: files that do not make a TLS identity stop the start with an error
// naming the flags, before any target runs.
func TestTLSFilesRefused(t *testing.T) {
	ca := tlstest.NewCA(t)
	good := tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "localhost")).Files()
	foreign := tlstest.NewSecretDir(t, tlstest.Issue(t, tlstest.NewCA(t), "localhost")).Files()
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing certificate file", tlsFlags(tlsfiles.Files{Cert: good.Cert + ".missing", Key: good.Key, CA: good.CA}), "tls.cert-file, tls.key-file, tls.ca-file"},
		{"certificate of another CA", tlsFlags(tlsfiles.Files{Cert: foreign.Cert, Key: foreign.Key, CA: good.CA}), "is not signed by the CA"},
		{"key of another certificate", tlsFlags(tlsfiles.Files{Cert: good.Cert, Key: foreign.Key, CA: good.CA}), "tls.cert-file"},
		{"api client CA not PEM", append(tlsFlags(good), "--api.grpc-tls.client-ca-file="+notPEM), "api.grpc-tls.client-ca-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var cfg Config
			cfg.RegisterFlags(fs)
			if err := cfg.Load(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			cfg.Targets = []string{"executor", "api"}
			_, err := New(cfg, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
