package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHTTP(t *testing.T) {
	var mu sync.Mutex
	var lastAuth string
	gotAuth := func() string { mu.Lock(); defer mu.Unlock(); return lastAuth }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lastAuth = r.Header.Get("Authorization")
		mu.Unlock()
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":"not ready"}`)
		case "/sse":
			// An SSE stream never ends: the headers must be enough.
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}))
	defer srv.Close()

	t.Setenv("TOOLMESH_TOKEN", "")
	if err := run([]string{"http", srv.URL + "/healthz"}, io.Discard); err != nil {
		t.Errorf("200: %v", err)
	}
	if a := gotAuth(); a != "" {
		t.Errorf("Authorization %q sent without TOOLMESH_TOKEN", a)
	}
	err := run([]string{"http", srv.URL + "/readyz"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("503 = %v, want an error with the status and the body", err)
	}
	start := time.Now()
	if err := run([]string{"-timeout=2s", "http", srv.URL + "/sse"}, io.Discard); err != nil {
		t.Errorf("SSE endpoint: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("SSE endpoint took %s: the body must not be read", took)
	}
	t.Setenv("TOOLMESH_TOKEN", "secret-token-0123456789")
	if err := run([]string{"http", srv.URL + "/healthz"}, io.Discard); err != nil || gotAuth() != "Bearer secret-token-0123456789" {
		t.Errorf("with TOOLMESH_TOKEN: err %v, Authorization %q", err, gotAuth())
	}
	if err := run([]string{"-timeout=500ms", "http", "http://" + deadAddr(t) + "/"}, io.Discard); err == nil {
		t.Error("nothing listening: no error")
	}
}

func TestGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	h := health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	h.SetServingStatus("toolmesh.v1.ExecutorService", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus("toolmesh.v1.RetrieverService", healthpb.HealthCheckResponse_NOT_SERVING)
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	addr := lis.Addr().String()

	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"grpc", addr}, ""},
		{[]string{"grpc", addr, "toolmesh.v1.ExecutorService"}, ""},
		{[]string{"grpc", addr, "toolmesh.v1.RetrieverService"}, "NOT_SERVING"},
		{[]string{"grpc", addr, "toolmesh.v1.Nope"}, "NotFound"},
		{[]string{"-timeout=500ms", "grpc", deadAddr(t)}, "grpc health"},
		{[]string{"grpc"}, "usage"},
		{[]string{"tcp", addr}, "usage"},
	} {
		err := run(tc.args, io.Discard)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: err %v, want one containing %q", tc.args, err, tc.wantErr)
		}
	}
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
