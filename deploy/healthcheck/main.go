// Command toolmesh-healthcheck is the container health check of the toolmesh image, which has
// no shell, curl or wget: it asks one endpoint whether it is up and exits 0 if it is, 1 if not.
//
//	toolmesh-healthcheck http URL            2xx within the timeout (headers are enough, so an
//	                                         SSE endpoint such as an MCP server's /sse works)
//	toolmesh-healthcheck grpc ADDR [SERVICE] grpc.health.v1 says SERVING (SERVICE empty: the server)
//
// For http, $TOOLMESH_TOKEN, when set, is sent as a Bearer token (the api's /readyz needs one
// when API tokens are configured). It is a stopgap until the toolmesh binary has a health-check
// command of its own; compose.yaml and the Dockerfile are its only users.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "toolmesh-healthcheck:", err)
		os.Exit(1)
	}
}

const usage = "usage: toolmesh-healthcheck [-timeout D] http URL | grpc ADDR [SERVICE]"

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("toolmesh-healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rest := fs.Args()
	switch {
	case len(rest) == 2 && rest[0] == "http":
		return checkHTTP(ctx, rest[1], os.Getenv("TOOLMESH_TOKEN"))
	case (len(rest) == 2 || len(rest) == 3) && rest[0] == "grpc":
		service := ""
		if len(rest) == 3 {
			service = rest[2]
		}
		return checkGRPC(ctx, rest[1], service)
	}
	return errors.New(usage)
}

// checkHTTP succeeds when url answers 2xx; the body is not read.
func checkHTTP(ctx context.Context, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
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
func checkGRPC(ctx context.Context, addr, service string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
