package app

import (
	"context"
	"strings"
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
	return serviceHealth(t, addr, "toolmesh.v1.RetrieverService")
}

// serviceHealth is what a probe, or a client that follows health, reads of service at addr.
func serviceHealth(t *testing.T, addr, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health check of %s: %v", service, err)
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

// An api given two retrievers as "ipv4:A,B" sends no search to the one whose index has not
// synced while the other can answer: every GET /v1/tools:search answers 200, none 503 "not
// synced yet" (round_robin alone sent every other search there). With no replica synced a
// search answers 503 at once, saying the retrievers are not serving.
func TestSearchSkipsUnsyncedReplica(t *testing.T) {
	checkFDs(t)
	unsynced, _ := runApp(t, []string{"--retriever.grpc-addr=127.0.0.1:0", "--retriever.executor-addr=127.0.0.1:1", "--drain-timeout=1s"}, "retriever")
	synced, _ := runApp(t, []string{"--executor.grpc-addr=127.0.0.1:0", "--retriever.grpc-addr=127.0.0.1:0", "--drain-timeout=1s"}, "executor", "retriever")
	good := endpointOf(t, synced, "retriever gRPC")
	eventually.Check(t, 10*time.Second, "the synced retriever reports SERVING", func() string {
		if got := retrieverHealth(t, good); got != healthpb.HealthCheckResponse_SERVING {
			return got.String()
		}
		return ""
	})
	api, _ := runApp(t, []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--drain-timeout=1s",
		"--api.executor-addr=" + endpointOf(t, synced, "executor gRPC"),
		"--api.retriever-addr=ipv4:" + endpointOf(t, unsynced, "retriever gRPC") + "," + good}, "api")
	base := endpoint(api, "REST")
	for i := range 20 {
		if code, body := get(t, base+"/v1/tools:search?q=add"); code != 200 {
			t.Fatalf("search %d of 20: %d %s; want 200 from the synced retriever", i+1, code, body)
		}
	}

	bad := endpointOf(t, unsynced, "retriever gRPC")
	none, _ := runApp(t, []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--drain-timeout=1s",
		"--api.executor-addr=" + endpointOf(t, synced, "executor gRPC"), "--api.retriever-addr=ipv4:" + bad + "," + bad}, "api")
	code, body := get(t, endpoint(none, "REST")+"/v1/tools:search?q=add")
	if code != 503 || !strings.Contains(string(body), "NOT_SERVING") {
		t.Errorf("search with no retriever synced: %d %s; want 503 saying the retrievers are NOT_SERVING", code, body)
	}
	t.Logf("with no retriever serving a search answers %d %s", code, body)
}
