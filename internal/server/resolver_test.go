package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
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
	if got := spread(20); got[a.Addr()] == 0 || got[b.Addr()] == 0 {
		t.Errorf("20 calls went %v; want both replicas used", got)
	}
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
