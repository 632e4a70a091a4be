package api

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// echoExecutor is a test double of the executor: a call answers the arguments it got, as text,
// and structured content, as JSON text to a caller that sent JSON text and as a Struct to one
// that did not, as the executor does.
type echoExecutor struct {
	executorBase
	mu   sync.Mutex
	last *toolmeshv1.ExecutorServiceCallToolRequest
}

// echoStructured is the double's structured content, in its own spelling.
const echoStructured = `{"z":1,"big":12345678901234567890,"s":"a<b"}`

func (e *echoExecutor) CallTool(_ context.Context, req *toolmeshv1.ExecutorServiceCallToolRequest) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
	e.mu.Lock()
	e.last = req
	e.mu.Unlock()
	out := &toolmeshv1.ExecutorServiceCallToolResponse{Content: []*toolmeshv1.Content{{Type: "text", Text: proto.String(string(req.GetArgumentsJson()))}}}
	if req.GetArgumentsJson() != nil {
		out.StructuredContentJson = []byte(echoStructured)
	} else {
		out.StructuredContent, _ = structpb.NewStruct(map[string]any{"z": 1})
	}
	return out, nil
}

// TestRESTRawJSON: a REST call's "arguments" reach the executor as the text the client wrote
// (an integer over 2^53 keeps its digits), and the server's structured content comes back as
// the server wrote it; without arguments the call goes as before.
func TestRESTRawJSON(t *testing.T) {
	exec := &echoExecutor{}
	ts := newGateway(t, startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) }))
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(ts.URL+"/v1/tools/calc/echo:call", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	const args = `{"n":98765432109876543210,"s":"x<y"}`
	code, body := post(` {"arguments": ` + args + `} `)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	if got := string(exec.last.GetArgumentsJson()); got != args {
		t.Errorf("the executor got arguments_json %s, want %s", got, args)
	}
	if exec.last.GetArguments() != nil {
		t.Errorf("the executor got a Struct too: %v", exec.last.GetArguments())
	}
	if !strings.Contains(body, `"structured_content":`+echoStructured) {
		t.Errorf("body %s, want structured_content %s as the server wrote it", body, echoStructured)
	}
	if strings.Contains(body, "structured_content_json") {
		t.Errorf("body %s shows the gRPC-only field", body)
	}

	for _, b := range []string{``, `{}`, `{"arguments":null}`} {
		code, body := post(b)
		if code != http.StatusOK || exec.last.GetArgumentsJson() != nil {
			t.Errorf("body %q: status %d, arguments_json %q: %s", b, code, exec.last.GetArgumentsJson(), body)
		}
		if !strings.Contains(body, `"structured_content":{"z":1}`) || strings.Contains(body, "structured_content_json") {
			t.Errorf("body %q answered %s, want the Struct's structured_content only", b, body)
		}
	}
	for _, tc := range []struct{ body, want string }{
		{`{"arguments":[1]}`, "arguments: must be a JSON object"},
		{`{"arguments":{"a":1},"nope":2}`, "nope"},
		{`{"arguments":{"a":1}} {}`, "after top-level value"},
		{`{"arguments":{"a":}}`, "invalid character"},
	} {
		if code, body := post(tc.body); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("body %s: status %d %s, want 400 saying %q", tc.body, code, body, tc.want)
		}
	}
}
