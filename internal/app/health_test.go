package app

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// retrieverHealth is what a probe (Kubernetes' readiness, compose's health check) reads.
func retrieverHealth(t *testing.T, addr string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "toolmesh.v1.RetrieverService"})
	if err != nil {
		t.Fatalf("health check of the retriever: %v", err)
	}
	return resp.GetStatus()
}

// A retriever is not ready before its index has synced with the executor, and its gRPC health
// says so: a replica that would answer every search with 503 "not synced yet" is kept out of
// a Service by its readiness probe (it used to report SERVING as soon as it listened, so a
// restarted or added retriever took searches at once and failed them).
func TestRetrieverHealthFollowsSync(t *testing.T) {
	checkFDs(t)
	// No executor answers here: the index never syncs.
	a, _ := runApp(t, []string{"--retriever.grpc-addr=127.0.0.1:0", "--retriever.executor-addr=127.0.0.1:1", "--drain-timeout=1s"}, "retriever")
	addr := endpointOf(t, a, "retriever gRPC")
	time.Sleep(3 * readyPoll)
	if got := retrieverHealth(t, addr); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("retriever without an executor: health %s, want NOT_SERVING", got)
	}

	// With an executor (no MCP servers: an empty catalog syncs at once) it becomes SERVING.
	b, _ := runApp(t, []string{"--executor.grpc-addr=127.0.0.1:0", "--retriever.grpc-addr=127.0.0.1:0", "--drain-timeout=1s"}, "executor", "retriever")
	addr = endpointOf(t, b, "retriever gRPC")
	eventually.Check(t, 10*time.Second, "the retriever reports SERVING once synced", func() string {
		if got := retrieverHealth(t, addr); got != healthpb.HealthCheckResponse_SERVING {
			return got.String()
		}
		return ""
	})
}
