package inference

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
	"github.com/toolmesh/toolmesh/services/inference/llama/llamatest"
)

// composeClient serves s over loopback gRPC, so streaming goes through a real stream.
func composeClient(t *testing.T, s *Service) toolmeshv1.InferenceServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return toolmeshv1.NewInferenceServiceClient(conn)
}

// compose collects the streamed answer and the final usage.
func compose(t *testing.T, c toolmeshv1.InferenceServiceClient, req *toolmeshv1.ComposeAnswerRequest) (string, *toolmeshv1.Usage, int) {
	t.Helper()
	stream, err := c.ComposeAnswer(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	var usage *toolmeshv1.Usage
	msgs := 0
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("compose stream: %v", err)
		}
		msgs++
		b.WriteString(m.GetDelta())
		if m.GetDone() {
			usage = m.GetUsage()
		}
	}
	return b.String(), usage, msgs
}

func TestComposeAnswerStreamsOnDouble(t *testing.T) {
	args, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	history := []*toolmeshv1.ToolCallRecord{{Tool: "calculator.add", Arguments: args, Output: "5", Step: 1}}
	cat, err := gorilla.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	query := "What is 2 plus 3?"
	d.Script(cat.Prompt(query, gorilla.StepsFromRecords(history)), llamatest.Reply{Pieces: []string{"2 plus 3 ", "is ", "5."}})
	c := composeClient(t, newTestService(t, d.URL))

	answer, usage, msgs := compose(t, c, &toolmeshv1.ComposeAnswerRequest{Query: query, History: history})
	if answer != "2 plus 3 is 5." {
		t.Errorf("answer = %q, want %q", answer, "2 plus 3 is 5.")
	}
	if msgs < 3 || usage == nil {
		t.Errorf("got %d messages and usage %v, want the deltas streamed and usage on the last", msgs, usage)
	}
	if reqs := d.Requests(); len(reqs) == 0 || reqs[len(reqs)-1].Grammar != "" || !reqs[len(reqs)-1].Stream {
		t.Errorf("compose must stream without a grammar; requests %+v", reqs)
	}
}

func TestComposeAnswerOnRealServer(t *testing.T) {
	srv := llamatest.StartServer(t, llamatest.ServerOptions{})
	c := composeClient(t, newTestService(t, srv.URL))
	_, usage, _ := compose(t, c, &toolmeshv1.ComposeAnswerRequest{Query: "What is 2 plus 3?", MaxTokens: 16})
	if usage.GetCompletionTokens() == 0 || usage.GetCompletionTokens() > 16 {
		t.Errorf("usage = %v, want 1 to 16 completion tokens", usage)
	}
}
