package api

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// cutMarker is what the executor's marker block of a cut result says (executor.CutMarker).
const cutMarker = "[toolmesh: result cut: the tool answered more than 65536 bytes, over the 65536-byte limit (executor.max-result-bytes); what follows the cut is left out]"

// cutExecutor answers every call with a result the executor cut: 60 KiB of text, the marker
// block, and the trailer that flags it.
type cutExecutor struct {
	executorBase
}

func (cutExecutor) CallTool(ctx context.Context, _ *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs("toolmesh-result-cut", "65536"))
	return &toolmeshv1.ExecutorServiceCallToolResponse{Content: []*toolmeshv1.Content{
		{Type: "text", Text: proto.String(strings.Repeat("x", 60<<10))}, {Type: "text", Text: proto.String(cutMarker)}}}, nil
}

// TestResultCutFlag: a result the executor cut is flagged to the api's callers: the
// Toolmesh-Result-Cut header over REST, the toolmesh-result-cut header over gRPC; a query's
// record of the call, cut to api.max-output-bytes, still ends with the executor's marker.
func TestResultCutFlag(t *testing.T) {
	execAddr := startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, cutExecutor{}) })
	ts := newGateway(t, execAddr)
	resp, err := http.Post(ts.URL+"/v1/tools/big/read:call", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Toolmesh-Result-Cut") != "65536" || !strings.Contains(string(b), "toolmesh: result cut") {
		t.Errorf("REST: %d, Toolmesh-Result-Cut %q, marker in body %v; want 200, 65536, true", resp.StatusCode, resp.Header.Get("Toolmesh-Result-Cut"),
			strings.Contains(string(b), "toolmesh: result cut"))
	}

	cfg := testConfig(execAddr, "")
	cfg.MaxOutputBytes = 4096
	conn := startAgentWith(t, cfg, &searchingRetriever{}, &steeredModel{})
	var header metadata.MD
	if _, err := toolmeshv1.NewToolServiceClient(conn).CallTool(context.Background(), &toolmeshv1.CallToolRequest{Server: "big", Name: "read"}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get("toolmesh-result-cut"); len(got) != 1 || got[0] != "65536" {
		t.Errorf("gRPC header toolmesh-result-cut = %v; want [65536]", got)
	}
	q, err := toolmeshv1.NewAgentServiceClient(conn).Query(context.Background(), &toolmeshv1.QueryRequest{Query: "@big.read({})"})
	if err != nil {
		t.Fatal(err)
	}
	out := q.GetToolCalls()[0].GetOutput()
	if !strings.HasSuffix(out, cutMarker) || len(out) > cfg.MaxOutputBytes+len(cutMarker)+64 {
		t.Errorf("the record's output (%d bytes) ends %q; want it cut near api.max-output-bytes, ending with the executor's marker", len(out), out[max(0, len(out)-200):])
	}
}
