package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/server"
)

// blockingTools holds ListTools of token "ci" until release is closed.
type blockingTools struct {
	toolmeshv1.UnimplementedToolServiceServer
	entered chan struct{}
	release chan struct{}
}

func (b *blockingTools) ListTools(ctx context.Context, _ *toolmeshv1.ListToolsRequest) (*toolmeshv1.ListToolsResponse, error) {
	if Name(ctx) == "ci" {
		b.entered <- struct{}{}
		<-b.release
	}
	return &toolmeshv1.ListToolsResponse{}, nil
}

// TestMaxInFlight: a token with MaxInFlight requests running gets ResourceExhausted with a
// retry-after for the next one, over gRPC and over plain HTTP; another token is not affected,
// and a finished request frees its slot.
func TestMaxInFlight(t *testing.T) {
	g, _ := newGuard(t, Config{MaxInFlight: 2}, "")
	srv, err := server.NewGRPC("127.0.0.1:0", slogDiscard(), time.Second, g.ServerOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	tools := &blockingTools{entered: make(chan struct{}, 4), release: make(chan struct{})}
	toolmeshv1.RegisterToolServiceServer(srv.Server, tools)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	conn, err := grpc.NewClient(srv.Addr(), server.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = conn.Close()
		cancel()
		<-done
	}()
	client := toolmeshv1.NewToolServiceClient(conn)
	list := func(token string) (metadata.MD, error) {
		var header metadata.MD
		_, err := client.ListTools(withAuth("Bearer "+token), &toolmeshv1.ListToolsRequest{}, grpc.Header(&header))
		return header, err
	}

	held := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := list(tokenCI)
			held <- err
		}()
		<-tools.entered
	}
	cases := []struct {
		name, token string
		code        codes.Code
	}{
		{"a third request of the same token", tokenCI, codes.ResourceExhausted},
		{"another token", tokenOps, codes.OK},
	}
	for _, tc := range cases {
		header, err := list(tc.token)
		if got := status.Code(err); got != tc.code {
			t.Errorf("%s: %v; want %s", tc.name, err, tc.code)
		}
		if tc.code == codes.ResourceExhausted {
			if !strings.Contains(status.Convert(err).Message(), "too many requests in flight for ci: at most 2 at once") || header.Get("retry-after")[0] != "1" {
				t.Errorf("%s: %v, retry-after %v", tc.name, err, header.Get("retry-after"))
			}
		}
	}

	// Plain HTTP handlers share the same slots.
	h := g.HTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), nil, nil)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/readyz", nil)
	r.Header.Set("Authorization", "Bearer "+tokenCI)
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Errorf("HTTP with both slots held: %d, Retry-After %q; want 429, 1", w.Code, w.Header().Get("Retry-After"))
	}

	close(tools.release)
	for range 2 {
		if err := <-held; err != nil {
			t.Errorf("held request: %v", err)
		}
	}
	if _, err := list(tokenCI); err != nil {
		t.Errorf("after the held requests ended: %v; want the slots free", err)
	}
	for i := range g.inFlight {
		if n := g.inFlight[i].Load(); n != 0 {
			t.Errorf("token %s: %d in flight after every request ended", g.tokens[i].Name, n)
		}
	}
}

// TestCharge: the tool calls of a request are taken from the token's bucket, all or none.
func TestCharge(t *testing.T) {
	g, _ := newGuard(t, Config{RateLimit: 0.001, RateBurst: 10}, "")
	stopped := time.Now()
	g.now = func() time.Time { return stopped }
	ci := withName(context.Background(), "ci")
	if _, _, d := g.admit([]string{"Bearer " + tokenCI}, "", true); d != nil {
		t.Fatal(d)
	}
	cases := []struct {
		name string
		ctx  context.Context
		n    int
		want string // "" is admitted; else in the ResourceExhausted message
	}{
		{"five calls fit the nine left", ci, 5, ""},
		{"five more do not fit the four left, and take none", ci, 5, "rate limit exceeded for ci by the tool calls of this request: retry after"},
		{"four do", ci, 4, ""},
		{"more than the burst never fit", ci, 11, "rate limit of ci: 11 requests at once are more than its burst of 10"},
		{"another token has its own bucket", withName(context.Background(), "ops"), 10, ""},
		{"a context without a token is not charged", context.Background(), 100, ""},
	}
	for _, tc := range cases {
		err := g.Charge(tc.ctx, tc.n)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v; want admitted", tc.name, err)
		case tc.want != "" && (status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), tc.want)):
			t.Errorf("%s: %v; want ResourceExhausted with %q", tc.name, err, tc.want)
		}
	}
	off, _ := New(Config{RateLimit: 1}, "", slogDiscard())
	if err := off.Charge(ci, 1000); err != nil {
		t.Errorf("auth off: %v", err)
	}
}
