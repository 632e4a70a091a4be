package inference

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/services/inference/chat/chattest"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
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

// newChatService runs the service with the openai backend against url.
func newChatService(t *testing.T, url string) *Service {
	t.Helper()
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
	cfg.Backend, cfg.ChatURL, cfg.ChatModel = "openai", url, "some-model"
	cfg.LLM.Timeout = 5 * time.Second
	s, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.closer() })
	return s
}

// composeAll reads a whole ComposeAnswer stream: the deltas, the last message and the error.
func composeAll(ctx context.Context, c toolmeshv1.InferenceServiceClient, req *toolmeshv1.ComposeAnswerRequest) (deltas []string, last *toolmeshv1.ComposeAnswerResponse, err error) {
	stream, err := c.ComposeAnswer(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return deltas, last, nil
		}
		if err != nil {
			return deltas, last, err
		}
		if m.GetDelta() != "" {
			deltas = append(deltas, m.GetDelta())
		}
		last = m
	}
}

func TestComposeAnswerOpenAIBackend(t *testing.T) {
	args, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	history := []*toolmeshv1.ToolCallRecord{{Tool: "calculator.add", Arguments: args, Output: "5", Step: 1}}
	for _, tc := range []struct {
		name   string
		reply  chattest.Reply
		req    *toolmeshv1.ComposeAnswerRequest
		deltas []string
		usage  *toolmeshv1.Usage // on the done message
		code   codes.Code
		has    string
	}{
		{name: "streams the answer", reply: chattest.Reply{Pieces: []string{"2 plus 3 ", "is ", "5."}, PromptTokens: 40, CompletionTokens: 5},
			req:    &toolmeshv1.ComposeAnswerRequest{Query: "What is 2 plus 3?", History: history, MaxTokens: 32},
			deltas: []string{"2 plus 3 ", "is ", "5."}, usage: &toolmeshv1.Usage{PromptTokens: 40, CompletionTokens: 5}},
		{name: "no history", reply: chattest.Reply{Pieces: []string{"I do not know."}},
			req:    &toolmeshv1.ComposeAnswerRequest{Query: "Why?"},
			deltas: []string{"I do not know."}, usage: &toolmeshv1.Usage{}},
		{name: "server loading", reply: chattest.Reply{Status: 503, Body: `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`},
			req: &toolmeshv1.ComposeAnswerRequest{Query: "q"}, code: codes.Unavailable, has: "Loading model"},
		{name: "prompt over the context", reply: chattest.Reply{Status: 400, Body: `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`},
			req: &toolmeshv1.ComposeAnswerRequest{Query: "q", History: history}, code: codes.ResourceExhausted, has: "context size"},
		{name: "error after some text", reply: chattest.Reply{Pieces: []string{"2 plus"}, StreamError: `{"error":{"code":500,"message":"slot crashed","type":"server_error"}}`},
			req: &toolmeshv1.ComposeAnswerRequest{Query: "q"}, deltas: []string{"2 plus"}, code: codes.Internal, has: "slot crashed"},
		{name: "stream cut", reply: chattest.Reply{Pieces: []string{"2"}, Cut: true},
			req: &toolmeshv1.ComposeAnswerRequest{Query: "q"}, deltas: []string{"2"}, code: codes.Unavailable, has: "ended before"},
		{name: "empty query", req: &toolmeshv1.ComposeAnswerRequest{}, code: codes.InvalidArgument, has: "query"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := chattest.NewDouble(t, tc.reply)
			c := composeClient(t, newChatService(t, d.URL))
			deltas, last, err := composeAll(t.Context(), c, tc.req)
			if !reflect.DeepEqual(deltas, tc.deltas) {
				t.Errorf("deltas %q, want %q", deltas, tc.deltas)
			}
			if tc.code != codes.OK {
				if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.has) {
					t.Errorf("err = %v, want %v containing %q", err, tc.code, tc.has)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !last.GetDone() || !proto.Equal(last.GetUsage(), tc.usage) || last.GetDelta() != "" {
				t.Errorf("last message %v, want done with usage %v", last, tc.usage)
			}
			reqs := d.Requests()
			var sent struct {
				Messages []struct {
					Content string `json:"content"`
				} `json:"messages"`
				Tools         []any `json:"tools"`
				MaxTokens     int   `json:"max_tokens"`
				Stream        bool  `json:"stream"`
				StreamOptions struct {
					IncludeUsage bool `json:"include_usage"`
				} `json:"stream_options"`
			}
			if len(reqs) != 1 || json.Unmarshal(reqs[0], &sent) != nil {
				t.Fatalf("requests %s", reqs)
			}
			msg := sent.Messages[len(sent.Messages)-1].Content
			if !sent.Stream || !sent.StreamOptions.IncludeUsage || sent.Tools != nil || !strings.Contains(msg, tc.req.GetQuery()) {
				t.Errorf("request %s", reqs[0])
			}
			for _, h := range tc.req.GetHistory() {
				if !strings.Contains(msg, h.GetTool()) || !strings.Contains(msg, "Result: "+h.GetOutput()) {
					t.Errorf("the call %s and its result are not in the message %q", h.GetTool(), msg)
				}
			}
			if want := int(tc.req.GetMaxTokens()); want != 0 && sent.MaxTokens != want {
				t.Errorf("max_tokens %d, want %d", sent.MaxTokens, want)
			}
		})
	}
}

// TestComposeAnswerOpenAIClientGoesAway: a client that cancels mid-answer cancels the HTTP
// request to the server.
func TestComposeAnswerOpenAIClientGoesAway(t *testing.T) {
	d := chattest.NewDouble(t, chattest.Reply{Pieces: []string{"one ", "two ", "three ", "four"}, PieceDelay: 300 * time.Millisecond})
	c := composeClient(t, newChatService(t, d.URL))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := c.ComposeAnswer(ctx, &toolmeshv1.ComposeAnswerRequest{Query: "Count."})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetDelta() != "one " {
		t.Fatalf("first message %v, %v", m, err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for d.Canceled() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the chat server did not see the request cancelled")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestComposeAnswerOpenAIOnRealServer streams from a real llama-server's OpenAI-compatible
// endpoint.
func TestComposeAnswerOpenAIOnRealServer(t *testing.T) {
	srv := llamatest.StartServer(t, llamatest.ServerOptions{CtxSize: 1024})
	c := composeClient(t, newChatService(t, srv.URL))
	args, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	deltas, last, err := composeAll(t.Context(), c, &toolmeshv1.ComposeAnswerRequest{Query: "What is 2 plus 3?", MaxTokens: 12,
		History: []*toolmeshv1.ToolCallRecord{{Tool: "calculator.add", Arguments: args, Output: "5"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !last.GetDone() || last.GetUsage().GetPromptTokens() == 0 || last.GetUsage().GetCompletionTokens() == 0 ||
		last.GetUsage().GetCompletionTokens() > 12 || len(deltas) == 0 {
		t.Errorf("%d deltas, last %v", len(deltas), last)
	}
}
