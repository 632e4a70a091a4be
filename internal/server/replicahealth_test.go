package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/tlsfiles"
	"github.com/toolmesh/toolmesh/internal/tlsfiles/tlstest"
)

var executorService = toolmeshv1.ExecutorService_ServiceDesc.ServiceName

// emptyExecutor answers ListTools, whatever its health says, as a draining executor still does.
type emptyExecutor struct {
	toolmeshv1.UnimplementedExecutorServiceServer
}

func (emptyExecutor) ListTools(context.Context, *toolmeshv1.ExecutorServiceListToolsRequest) (*toolmeshv1.ExecutorServiceListToolsResponse, error) {
	return &toolmeshv1.ExecutorServiceListToolsResponse{}, nil
}

// startExecutor runs an executor replica reporting SERVING, as the app starts one.
func startExecutor(t *testing.T, opts ...grpc.ServerOption) *GRPC {
	t.Helper()
	g, err := NewGRPC("127.0.0.1:0", slog.New(slog.DiscardHandler), time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	toolmeshv1.RegisterExecutorServiceServer(g.Server, emptyExecutor{})
	g.ServeRegistered()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

// listTools makes one call over conn and returns the replica that answered it.
func listTools(conn *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	_, err := toolmeshv1.NewExecutorServiceClient(conn).ListTools(ctx, &toolmeshv1.ExecutorServiceListToolsRequest{}, grpc.Peer(&p))
	if err != nil {
		return "", err
	}
	return p.Addr.String(), nil
}

// spread makes n calls and counts them by the replica that answered.
func spread(t *testing.T, conn *grpc.ClientConn, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		addr, err := listTools(conn)
		if err != nil {
			t.Fatalf("ListTools: %v", err)
		}
		got[addr]++
	}
	return got
}

// onlyTo waits up to 5 s for 20 calls in a row to go to want and fails the test if they never do.
func onlyTo(t *testing.T, conn *grpc.ClientConn, want string) {
	t.Helper()
	eventually.Check(t, 5*time.Second, "every call to "+want+", the replica reporting SERVING", func() string {
		if got := spread(t, conn, 20); got[want] != 20 {
			return fmt.Sprintf("20 calls went %v", got)
		}
		return ""
	})
}

// toBoth waits until 20 calls on conn reach both replicas: round_robin sends calls only to the
// replicas it has connected to, and the first call may go before the second is ready.
func toBoth(t *testing.T, conn *grpc.ClientConn, a, b string) {
	t.Helper()
	eventually.Check(t, 5*time.Second, "both replicas used while both are SERVING", func() string {
		if got := spread(t, conn, 20); got[a] == 0 || got[b] == 0 {
			return fmt.Sprintf("20 calls went %v", got)
		}
		return ""
	})
}

func dialTest(t *testing.T, target string, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(target, append(DialOptionsFor(executorService, target), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestReplicaHealth: a client of "ipv4:A,B" sends no call to a replica that reports its service
// NOT_SERVING (an executor draining, a retriever whose index has not synced) while the other
// can answer, and takes the replica back once it reports SERVING again.
func TestReplicaHealth(t *testing.T) {
	a, b := startExecutor(t), startExecutor(t)
	conn := dialTest(t, "ipv4:"+a.Addr()+","+b.Addr())
	toBoth(t, conn, a.Addr(), b.Addr())

	a.SetRegistered(false)
	onlyTo(t, conn, b.Addr())
	if got := spread(t, conn, 50); got[b.Addr()] != 50 {
		t.Errorf("50 more calls went %v; want every one to %s", got, b.Addr())
	}

	a.SetRegistered(true)
	deadline := time.Now().Add(5 * time.Second)
	for spread(t, conn, 20)[a.Addr()] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s reports SERVING again but got no call within 5 s", a.Addr())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplicaHealthFromStart: a replica already NOT_SERVING when the client first connects
// (a retriever started before its index synced) gets no call, not even the first ones.
func TestReplicaHealthFromStart(t *testing.T) {
	a, b := startExecutor(t), startExecutor(t)
	a.SetRegistered(false)
	conn := dialTest(t, "ipv4:"+a.Addr()+","+b.Addr())
	if got := spread(t, conn, 50); got[b.Addr()] != 50 {
		t.Errorf("50 calls went %v; want every one to %s", got, b.Addr())
	}
}

// TestReplicaHealthNoneServing: when every replica reports NOT_SERVING a call fails at once
// with UNAVAILABLE saying the replicas are not serving, rather than waiting for its deadline or
// reaching a replica that would refuse it.
func TestReplicaHealthNoneServing(t *testing.T) {
	a, b := startExecutor(t), startExecutor(t)
	a.SetRegistered(false)
	b.SetRegistered(false)
	conn := dialTest(t, "ipv4:"+a.Addr()+","+b.Addr())
	start := time.Now()
	_, err := listTools(conn)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Errorf("ListTools with no replica serving: %v; want UNAVAILABLE naming NOT_SERVING", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the call failed after %s; want at once, well before its 5 s deadline", d)
	}
	t.Logf("a caller sees: %v", err)
}

// TestReplicaHealthOneAddress: a target that names one replica is not health-checked, so a
// call reaches it and gets its own answer (the retriever's "not synced yet", the executor's
// answer while it drains), which says more than "not serving". A dns:/// name may name several
// and is health-checked, even when it names one now.
func TestReplicaHealthOneAddress(t *testing.T) {
	g := startExecutor(t)
	g.SetRegistered(false)
	for _, tc := range []struct {
		target  string
		reached bool
	}{
		{g.Addr(), true},
		{"ipv4:" + g.Addr(), true},
		{"ipv4:///" + g.Addr(), true},
		{"passthrough:///" + g.Addr(), true},
		{"dns:///" + g.Addr(), false},
		{"ipv4:" + g.Addr() + "," + g.Addr(), false},
	} {
		t.Run(tc.target, func(t *testing.T) {
			_, err := listTools(dialTest(t, tc.target))
			if tc.reached && err != nil {
				t.Errorf("ListTools: %v; want the replica's own answer", err)
			}
			if !tc.reached && status.Code(err) != codes.Unavailable {
				t.Errorf("ListTools: %v; want UNAVAILABLE, the only replica being NOT_SERVING", err)
			}
		})
	}
}

// TestReplicaHealthMutualTLS: the health watch runs over the mutual TLS that ClientTLS, given
// after DialOptionsFor, sets.
func TestReplicaHealthMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t)
	srv := load(t, tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "svc")).Files())
	creds := grpc.Creds(ServerTLS(func() *tls.Config { return tlsfiles.ServerConfig(srv, srv, tls.RequireAndVerifyClientCert) }))
	a, b := startExecutor(t, creds), startExecutor(t, creds)
	cli := load(t, tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "client")).Files())
	mesh := ClientTLS(func() *tls.Config { return tlsfiles.ClientConfig(cli, cli) }, "svc")

	a.SetRegistered(false)
	conn := dialTest(t, "ipv4:"+a.Addr()+","+b.Addr(), grpc.WithTransportCredentials(mesh))
	if got := spread(t, conn, 20); got[b.Addr()] != 20 {
		t.Errorf("20 calls went %v; want every one to %s", got, b.Addr())
	}
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: executorService}); err != nil {
		t.Errorf("health check over mutual TLS: %v", err)
	}
}
