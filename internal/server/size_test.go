package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// bigCatalog answers ListTools with one fixed, large catalog.
type bigCatalog struct {
	toolmeshv1.UnimplementedExecutorServiceServer
	resp *toolmeshv1.ExecutorServiceListToolsResponse
}

func (b bigCatalog) ListTools(context.Context, *toolmeshv1.ExecutorServiceListToolsRequest) (*toolmeshv1.ExecutorServiceListToolsResponse, error) {
	return b.resp, nil
}

// TestLargeMessages sends a 6 MiB catalog, over grpc-go's default 4 MiB receive limit, the way
// the executor sends its whole catalog in one message: a client with DialOptions receives it
// whole; a client with grpc-go's defaults (grpcurl, a user's own code) is refused with
// RESOURCE_EXHAUSTED naming both sizes, which is why the api's ListTools still fails for them.
func TestLargeMessages(t *testing.T) {
	resp := &toolmeshv1.ExecutorServiceListToolsResponse{}
	desc := strings.Repeat("Retrieve the forecast of a city for the given date. ", 16) // ~830 bytes
	for range 6 << 20 / len(desc) {
		resp.Tools = append(resp.Tools, &toolmeshv1.Tool{Id: "big.get_forecast", Server: "big", Name: "get_forecast", Description: desc})
	}
	size := proto.Size(resp)

	g, err := NewGRPC("127.0.0.1:0", slog.New(slog.DiscardHandler), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	toolmeshv1.RegisterExecutorServiceServer(g.Server, bigCatalog{resp: resp})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5s of stop")
		}
	}()

	cases := []struct {
		name    string
		opts    []grpc.DialOption
		wantErr string // empty: the whole catalog arrives
	}{
		{name: "toolmesh client", opts: DialOptions()},
		{name: "default client", opts: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
			wantErr: "larger than max"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := grpc.NewClient(g.Addr(), tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			got, err := toolmeshv1.NewExecutorServiceClient(conn).ListTools(cctx, &toolmeshv1.ExecutorServiceListToolsRequest{})
			if tt.wantErr == "" {
				if err != nil || len(got.GetTools()) != len(resp.Tools) {
					t.Errorf("ListTools of %d bytes: %d tools, %v; want all %d", size, len(got.GetTools()), err, len(resp.Tools))
				}
				return
			}
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ListTools of %d bytes = %v; want RESOURCE_EXHAUSTED saying %q", size, err, tt.wantErr)
			}
		})
	}
}
