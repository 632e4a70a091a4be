package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/errreason"
)

// TestDependencyError: failures are sorted by code, by the caller's own context and by the
// reason the dependency attached, whatever the messages say.
func TestDependencyError(t *testing.T) {
	live := context.Background()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	cases := []struct {
		name     string
		ctx      context.Context
		addr     string // 127.0.0.1:7704 when empty
		err      error
		wantCode codes.Code
		wantMsg  string
	}{
		{"transport down, any wording", live, "", status.Error(codes.Unavailable, "some future grpc-go wording"), codes.Unavailable, "executor at 127.0.0.1:7704 is unreachable"},
		{"no replica serving", live, "ipv4:127.0.0.1:7704,127.0.0.1:7714", status.Error(codes.Unavailable, "connection active but health check failed. status=NOT_SERVING"), codes.Unavailable,
			"executor at ipv4:127.0.0.1:7704,127.0.0.1:7714: no replica is reachable and serving: connection active but health check failed. status=NOT_SERVING"},
		{"its backend is down", live, "", errreason.Error(codes.Unavailable, errreason.BackendUnavailable, `server "fs" is unavailable: connection error`), codes.Unavailable, `server "fs" is unavailable`},
		{"our deadline", expired, "", status.Error(codes.DeadlineExceeded, "anything"), codes.DeadlineExceeded, "executor at 127.0.0.1:7704 did not answer in time"},
		{"its own deadline", live, "", status.Error(codes.DeadlineExceeded, `tool "fs.read" timed out after 1s`), codes.DeadlineExceeded, `tool "fs.read" timed out`},
		{"canceled", live, "", status.Error(codes.Canceled, "context canceled"), codes.Canceled, "request canceled"},
		{"its answer", live, "", status.Error(codes.NotFound, `unknown tool "fs.nope"`), codes.NotFound, `unknown tool "fs.nope"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr
			if addr == "" {
				addr = "127.0.0.1:7704"
			}
			st := status.Convert(dependencyError(tc.ctx, "executor", addr, tc.err))
			if st.Code() != tc.wantCode || !strings.Contains(st.Message(), tc.wantMsg) {
				t.Errorf("got %v %q; want %v containing %q", st.Code(), st.Message(), tc.wantCode, tc.wantMsg)
			}
		})
	}
}
