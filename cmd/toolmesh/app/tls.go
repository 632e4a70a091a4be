package app

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/tlsfiles"
)

// TLSConfig is mutual TLS between the toolmesh services, and TLS on the api's public gRPC port.
//
// The mesh's flags (tls.*) are the Helm chart's and toolmesh-healthcheck's names. The api's
// port has flags of its own (api.grpc-tls.*) because what its clients need differs: they are
// apps, not services, so a certificate is optional for them (tokens say who they are), and
// they may need a certificate for the public name they dial, from a CA they already trust,
// rather than the mesh's private one. Only the gRPC port: TLS for REST is the ingress's or
// proxy's job in front of it.
type TLSConfig struct {
	// CertFile, KeyFile and CAFile are the certificate this process presents as server and as
	// client to every other toolmesh service, and the CA their certificates must chain to.
	CertFile, KeyFile, CAFile string
	// ServerName is the name every toolmesh server's certificate must carry; empty: the host of
	// each address dialled.
	ServerName string
	// ReloadInterval is how often the files are read again for a rotation, besides when their
	// folder changes (for mounts that send no change events).
	ReloadInterval time.Duration

	// APICertFile and APIKeyFile are the certificate of the api's gRPC port; empty: CertFile's.
	APICertFile, APIKeyFile string
	// APIClientCAFile is the CA a client certificate on the api's gRPC port, when one is
	// presented, must chain to; empty: CAFile's.
	APIClientCAFile string
}

// RegisterFlags sets the defaults and binds the tls.* and api.grpc-tls.* flags.
func (c *TLSConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CertFile, "tls.cert-file", "", "mutual TLS between the toolmesh services: PEM certificate this process presents to the others, as server and as client (with --tls.key-file and --tls.ca-file; re-read when it changes)")
	fs.StringVar(&c.KeyFile, "tls.key-file", "", "mutual TLS: the PEM private key of --tls.cert-file")
	fs.StringVar(&c.CAFile, "tls.ca-file", "", "mutual TLS: PEM file of the CA certificates the other services' certificates must chain to; a client without such a certificate is refused")
	fs.StringVar(&c.ServerName, "tls.server-name", "", "mutual TLS: name every toolmesh server's certificate must carry; empty: the host of each address dialled (give it for ipv4:/ipv6: address lists)")
	fs.DurationVar(&c.ReloadInterval, "tls.reload-interval", 10*time.Second, "how often the TLS files (--tls.*, --api.grpc-tls.*) are read again besides when their folder changes, so rotated certificates apply to new connections without a restart")
	fs.StringVar(&c.APICertFile, "api.grpc-tls.cert-file", "", "PEM certificate of the api's gRPC port, with --api.grpc-tls.key-file; empty: --tls.cert-file's. The port speaks TLS when either is set")
	fs.StringVar(&c.APIKeyFile, "api.grpc-tls.key-file", "", "the PEM private key of --api.grpc-tls.cert-file")
	fs.StringVar(&c.APIClientCAFile, "api.grpc-tls.client-ca-file", "", "PEM CA certificates a client certificate on the api's gRPC port must chain to when a client presents one (it is optional: tokens say who a client is); empty: --tls.ca-file's")
}

// Mutual reports whether the services talk mutual TLS.
func (c *TLSConfig) Mutual() bool { return c.CertFile != "" }

// Validate reports the first bad value, naming its flag.
func (c *TLSConfig) Validate() error {
	var missing []string
	for _, f := range []struct{ flag, v string }{{"tls.cert-file", c.CertFile}, {"tls.key-file", c.KeyFile}, {"tls.ca-file", c.CAFile}} {
		if f.v == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 && len(missing) < 3 {
		return fmt.Errorf("%s: mutual TLS needs tls.cert-file, tls.key-file and tls.ca-file together", strings.Join(missing, ", "))
	}
	if c.ServerName != "" && !c.Mutual() {
		return errors.New("tls.server-name: needs tls.cert-file, tls.key-file and tls.ca-file")
	}
	if strings.ContainsAny(c.ServerName, " /:") {
		return fmt.Errorf("tls.server-name: %q is not a host name", c.ServerName)
	}
	if c.ReloadInterval < 100*time.Millisecond || c.ReloadInterval > 24*time.Hour {
		return fmt.Errorf("tls.reload-interval: %s must be between 100ms and 24h", c.ReloadInterval)
	}
	if (c.APICertFile == "") != (c.APIKeyFile == "") {
		return errors.New("api.grpc-tls.cert-file and api.grpc-tls.key-file: give both or neither")
	}
	if c.APIClientCAFile != "" && c.APICertFile == "" && !c.Mutual() {
		return errors.New("api.grpc-tls.client-ca-file: the api's gRPC port has no certificate (api.grpc-tls.cert-file or tls.cert-file)")
	}
	return nil
}

// tlsSources are the TLS files a process reads, each kept current by its own poll.
type tlsSources struct {
	// mesh is the identity and CA of mutual TLS between the services; nil: plaintext.
	mesh *tlsfiles.Source
	// apiCert is the certificate of the api's gRPC port; nil: plaintext. It is mesh when
	// api.grpc-tls.cert-file is not given.
	apiCert *tlsfiles.Source
	// apiClientCAs check a client certificate presented on the api's gRPC port; nil: none is
	// asked for. It is mesh when api.grpc-tls.client-ca-file is not given.
	apiClientCAs *tlsfiles.Source
	serverName   string
	interval     time.Duration
}

// loadTLS reads the files the config names; the api's only when the api runs here.
func loadTLS(c TLSConfig, api bool, logger *slog.Logger) (tlsSources, error) {
	s := tlsSources{serverName: c.ServerName, interval: c.ReloadInterval}
	var err error
	if c.Mutual() {
		if s.mesh, err = tlsfiles.Load(tlsfiles.Files{Cert: c.CertFile, Key: c.KeyFile, CA: c.CAFile}, logger); err != nil {
			return s, fmt.Errorf("tls.cert-file, tls.key-file, tls.ca-file: %w", err)
		}
		leaf := s.mesh.Certificate().Leaf
		logger.Info("mutual TLS between the services", "subject", leaf.Subject.String(), "not_after", leaf.NotAfter, "reload_interval", c.ReloadInterval)
		s.apiCert, s.apiClientCAs = s.mesh, s.mesh
	}
	if !api {
		return s, nil
	}
	if c.APICertFile != "" {
		if s.apiCert, err = tlsfiles.Load(tlsfiles.Files{Cert: c.APICertFile, Key: c.APIKeyFile}, logger); err != nil {
			return s, fmt.Errorf("api.grpc-tls.cert-file, api.grpc-tls.key-file: %w", err)
		}
	}
	if c.APIClientCAFile != "" {
		if s.apiClientCAs, err = tlsfiles.Load(tlsfiles.Files{CA: c.APIClientCAFile}, logger); err != nil {
			return s, fmt.Errorf("api.grpc-tls.client-ca-file: %w", err)
		}
	}
	return s, nil
}

// run polls every distinct source until ctx ends; the returned func waits for them to stop.
func (s tlsSources) run(ctx context.Context) (wait func()) {
	var all []*tlsfiles.Source
	for _, src := range []*tlsfiles.Source{s.mesh, s.apiCert, s.apiClientCAs} {
		if src != nil && !slices.Contains(all, src) {
			all = append(all, src)
		}
	}
	done := make(chan struct{}, len(all))
	for _, src := range all {
		go func() { defer func() { done <- struct{}{} }(); src.Run(ctx, s.interval) }()
	}
	return func() {
		for range all {
			<-done
		}
	}
}

// serverOptions are the options of an internal service's gRPC server: with mutual TLS, a
// client certificate of the mesh's CA is required.
func (s tlsSources) serverOptions() []grpc.ServerOption {
	if s.mesh == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(server.ServerTLS(func() *tls.Config {
		return tlsfiles.ServerConfig(s.mesh, s.mesh, tls.RequireAndVerifyClientCert)
	}))}
}

// apiServerOptions are the options of the api's gRPC port: TLS when it has a certificate, and
// a client certificate checked when one is presented.
func (s tlsSources) apiServerOptions() []grpc.ServerOption {
	if s.apiCert == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(server.ServerTLS(func() *tls.Config {
		return tlsfiles.ServerConfig(s.apiCert, s.apiClientCAs, tls.VerifyClientCertIfGiven)
	}))}
}

// dialOptions are the options of a client of another toolmesh service: with mutual TLS it
// presents the mesh's certificate and checks the server's against the mesh's CA. (A target of
// this process called directly, serveLocal, needs none.)
func (s tlsSources) dialOptions() []grpc.DialOption {
	if s.mesh == nil {
		return nil
	}
	creds := server.ClientTLS(func() *tls.Config {
		return tlsfiles.ClientConfig(s.mesh, s.mesh)
	}, s.serverName)
	return []grpc.DialOption{grpc.WithTransportCredentials(creds)}
}

// gatewayDialOptions are the options of the REST gateway's client of the api's own gRPC port:
// it accepts exactly the certificate that port serves.
func (s tlsSources) gatewayDialOptions() []grpc.DialOption {
	if s.apiCert == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(server.ClientTLS(func() *tls.Config {
		return tlsfiles.PinnedConfig(s.apiCert)
	}, ""))}
}
