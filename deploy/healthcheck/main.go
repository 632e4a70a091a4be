// Command toolmesh-healthcheck is the container health check of the toolmesh image, which has
// no shell, curl or wget: it asks one endpoint whether it is up and exits 0 if it is, 1 if not.
//
//	toolmesh-healthcheck http URL            2xx within the timeout (headers are enough, so an
//	                                         SSE endpoint such as an MCP server's /sse works)
//	toolmesh-healthcheck grpc ADDR [SERVICE] grpc.health.v1 says SERVING (SERVICE empty: the server)
//
// For http, $TOOLMESH_TOKEN, when set, is sent as a Bearer token (the api's /readyz needs one
// when API tokens are configured). With -tls.ca-file the check speaks TLS, verifying the
// server's certificate for -tls.server-name (default: ADDR's or URL's host), and presents
// -tls.cert-file/-tls.key-file as its client certificate when given (mutual TLS between the
// toolmesh services; Kubernetes' own gRPC probe speaks plaintext only). It is a stopgap until
// the toolmesh binary has a health-check command of its own; compose.yaml, the Dockerfile and
// the Helm chart's probes are its users.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "toolmesh-healthcheck:", err)
		os.Exit(1)
	}
}

const usage = "usage: toolmesh-healthcheck [-timeout D] [-tls.ca-file F [-tls.cert-file F -tls.key-file F] [-tls.server-name N]] http URL | grpc ADDR [SERVICE]"

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("toolmesh-healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	var tf tlsFiles
	fs.StringVar(&tf.ca, "tls.ca-file", "", "speak TLS, trusting the CA certificates in this PEM file")
	fs.StringVar(&tf.cert, "tls.cert-file", "", "client certificate (PEM) to present, with -tls.key-file")
	fs.StringVar(&tf.key, "tls.key-file", "", "the client certificate's private key (PEM)")
	fs.StringVar(&tf.serverName, "tls.server-name", "", "name the server's certificate must carry (default: the host dialled)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tlsCfg, err := tf.config()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rest := fs.Args()
	switch {
	case len(rest) == 2 && rest[0] == "http":
		return checkHTTP(ctx, rest[1], os.Getenv("TOOLMESH_TOKEN"), tlsCfg)
	case (len(rest) == 2 || len(rest) == 3) && rest[0] == "grpc":
		service := ""
		if len(rest) == 3 {
			service = rest[2]
		}
		return checkGRPC(ctx, rest[1], service, tlsCfg)
	}
	return errors.New(usage)
}

type tlsFiles struct{ ca, cert, key, serverName string }

// config is the client TLS configuration the flags ask for, or nil for plaintext.
func (f tlsFiles) config() (*tls.Config, error) {
	if f.ca == "" {
		if f.cert != "" || f.key != "" || f.serverName != "" {
			return nil, errors.New("-tls.cert-file, -tls.key-file and -tls.server-name need -tls.ca-file")
		}
		return nil, nil
	}
	pem, err := os.ReadFile(f.ca)
	if err != nil {
		return nil, fmt.Errorf("tls.ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls.ca-file: %s holds no PEM certificate", f.ca)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: f.serverName, MinVersion: tls.VersionTLS12}
	if (f.cert == "") != (f.key == "") {
		return nil, errors.New("-tls.cert-file and -tls.key-file go together")
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("tls.cert-file and tls.key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// checkHTTP succeeds when url answers 2xx; the body is not read.
func checkHTTP(ctx context.Context, url, token string, tlsCfg *tls.Config) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := http.DefaultClient
	if tlsCfg != nil {
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
		defer client.CloseIdleConnections()
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The first bytes of the body say why (e.g. /readyz names what is not ready).
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, snippet)
	}
	return nil
}

// checkGRPC succeeds when the gRPC health service at addr reports service as SERVING.
func checkGRPC(ctx context.Context, addr, service string, tlsCfg *tls.Config) error {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return fmt.Errorf("grpc health %s %q: %w", addr, service, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("grpc health %s %q: %s", addr, service, resp.GetStatus())
	}
	return nil
}
