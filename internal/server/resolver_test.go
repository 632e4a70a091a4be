package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// TestAddressList: an "ipv4:A,B" target spreads calls over both replicas, keeps working when
// one stops, and takes it back when it is there again.
func TestAddressList(t *testing.T) {
	start := func(addr string) (*GRPC, func()) {
		g, err := NewGRPC(addr, slog.New(slog.DiscardHandler), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = g.Run(ctx) }()
		return g, func() { cancel(); <-done }
	}
	a, stopA := start("127.0.0.1:0")
	defer func() { stopA() }()
	b, stopB := start("127.0.0.1:0")
	defer stopB()
	conn, err := grpc.NewClient("ipv4:"+a.Addr()+","+b.Addr(), DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	spread := func(n int) map[string]int {
		got := map[string]int{}
		for range n {
			var p peer.Peer
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatalf("check: %v", err)
			}
			got[p.Addr.String()]++
		}
		return got
	}
	// round_robin sends calls only to replicas it has connected to; the first call may go
	// before the second is ready.
	eventually.Check(t, 5*time.Second, "both replicas used", func() string {
		if got := spread(20); got[a.Addr()] == 0 || got[b.Addr()] == 0 {
			return fmt.Sprintf("20 calls went %v", got)
		}
		return ""
	})
	addrA := a.Addr()
	stopA()
	if got := spread(10); got[b.Addr()] != 10 {
		t.Errorf("with one replica stopped, 10 calls went %v; want all to %s", got, b.Addr())
	}
	_, stopA = start(addrA)
	deadline := time.Now().Add(10 * time.Second)
	for spread(10)[addrA] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the replica back at %s got no call within 10 s", addrA)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, bad := range []string{"ipv4:localhost:1", "ipv4:127.0.0.1", "ipv4:[::1]:1", "ipv6:127.0.0.1:1"} {
		c, err := grpc.NewClient(bad, DialOptions()...)
		if err == nil {
			c.Connect()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "is not an ipv") {
			t.Errorf("target %q: %v; want an error naming the bad address", bad, err)
		}
	}
}

// TestClientsLookAgain: a client connected to one replica asks its resolver for the addresses
// again after a while, so a replica added behind a headless Service (a DNS name that now
// resolves to one more address) is found without any connection failing first.
func TestClientsLookAgain(t *testing.T) {
	old := maxConnectionAge
	maxConnectionAge = 300 * time.Millisecond
	defer func() { maxConnectionAge = old }()
	g, err := NewGRPC("127.0.0.1:0", slog.New(slog.DiscardHandler), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	defer func() { cancel(); <-done }()

	asked := make(chan struct{}, 16)
	r := manual.NewBuilderWithScheme("looktest")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: g.Addr()}}})
	r.ResolveNowCallback = func(resolver.ResolveNowOptions) {
		select {
		case asked <- struct{}{}:
		default:
		}
	}
	conn, err := grpc.NewClient("looktest:///replicas", append(DialOptions(), grpc.WithResolvers(r))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	if _, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	for len(asked) > 0 { // whatever the first connection asked
		<-asked
	}
	select {
	case <-asked:
	case <-time.After(5 * time.Second):
		t.Fatalf("the client did not look up the replicas again within 5s of connecting (server connection age %s)", maxConnectionAge)
	}
}
