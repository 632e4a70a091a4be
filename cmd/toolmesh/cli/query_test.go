package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// gatewayJSON marshals as the api's grpc-gateway does (services/api/gateway.go), so the fake
// server's lines are byte for byte what the real one sends.
var gatewayJSON = &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}}

func gatewayLine(t *testing.T, v any) string {
	t.Helper()
	b, err := gatewayJSON.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	return string(b)
}

// resultLine is one event of a stream as grpc-gateway frames it.
func resultLine(t *testing.T, ev *toolmeshv1.QueryStreamResponse) string {
	return gatewayLine(t, map[string]any{"result": ev})
}

// errorLine is what grpc-gateway sends when a stream fails: as the last line after events,
// or as the whole body (with an HTTP error status) when it fails before the first event.
func errorLine(t *testing.T, code codes.Code, msg string) string {
	return gatewayLine(t, map[string]any{"error": status.New(code, msg).Proto()})
}

func retrievedEv(step int32, ids ...string) *toolmeshv1.QueryStreamResponse {
	s := &toolmeshv1.Step{Number: step}
	for i, id := range ids {
		s.Retrieved = append(s.Retrieved, &toolmeshv1.ScoredTool{Tool: &toolmeshv1.Tool{Id: id}, Score: 0.91 - 0.3*float64(i)})
	}
	return &toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_Retrieved{Retrieved: s}}
}

func modelEv(step int32, out string) *toolmeshv1.QueryStreamResponse {
	s := &toolmeshv1.Step{Number: step, ModelOutput: out, Usage: &toolmeshv1.Usage{PromptTokens: 812, CompletionTokens: 14}}
	return &toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_ModelOutput{ModelOutput: s}}
}

func startedEv(t *testing.T, tool string, args map[string]any) *toolmeshv1.QueryStreamResponse {
	t.Helper()
	a, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	return &toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_ToolCallStarted{
		ToolCallStarted: &toolmeshv1.ToolCallRecord{Tool: tool, Arguments: a, Step: 1}}}
}

func finishedEv(tool, output string, isError bool, ms float64) *toolmeshv1.QueryStreamResponse {
	return &toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_ToolCallFinished{
		ToolCallFinished: &toolmeshv1.ToolCallRecord{Tool: tool, Output: output, IsError: isError, DurationMs: ms, Step: 1}}}
}

func deltaEv(s string) *toolmeshv1.QueryStreamResponse {
	return &toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: s}}
}

func queryResp(answer string, reason toolmeshv1.StopReason, iterations int32, errMsg string) *toolmeshv1.QueryResponse {
	return &toolmeshv1.QueryResponse{Answer: answer, StopReason: reason, Iterations: iterations, Error: errMsg, TraceId: "4bf92f35"}
}

func doneEv(r *toolmeshv1.QueryResponse) *toolmeshv1.QueryStreamResponse {
	return &toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_Done{Done: r}}
}

// fakeQuery is a test double of POST /v1/query:stream and POST /v1/query with canned bodies.
type fakeQuery struct {
	status int      // HTTP status of both endpoints; 0 is 200
	lines  []string // the stream, one flushed line each
	unary  string   // the body of POST /v1/query

	mu   sync.Mutex
	path string // what the client sent last
	auth string
	body map[string]any
}

func (f *fakeQuery) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	data, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(data, &body)
	f.mu.Lock()
	f.path, f.auth, f.body = r.URL.Path, r.Header.Get("Authorization"), body
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if f.status != 0 {
		w.WriteHeader(f.status)
	}
	if r.URL.Path == "/v1/query" {
		_, _ = io.WriteString(w, f.unary)
		return
	}
	for _, l := range f.lines {
		_, _ = io.WriteString(w, l+"\n")
		w.(http.Flusher).Flush()
	}
}

func TestQuery(t *testing.T) {
	t.Setenv("TOOLMESH_TOKEN", "")
	answered := toolmeshv1.StopReason_STOP_REASON_ANSWERED
	tests := []struct {
		name       string
		args       []string
		fake       *fakeQuery
		wantCode   int
		wantStdout string // exactly
		wantStderr string // contained
	}{
		{
			name: "progress on stderr, answer on stdout",
			args: []string{"add 2 and 3"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, retrievedEv(1, "calculator.add", "calculator.subtract")),
				resultLine(t, modelEv(1, "  [calculator.add(a=2,\n b=3)]\n")),
				resultLine(t, startedEv(t, "calculator.add", map[string]any{"b": 3, "a": 2})),
				resultLine(t, finishedEv("calculator.add", "5", false, 1.234)),
				resultLine(t, retrievedEv(2, "calculator.add")),
				resultLine(t, modelEv(2, "2 plus 3 is 5.")),
				resultLine(t, deltaEv("2 plus 3 ")),
				resultLine(t, deltaEv("is 5.")),
				resultLine(t, doneEv(queryResp("2 plus 3 is 5.", answered, 2, ""))),
			}},
			wantStdout: "2 plus 3 is 5.\n",
			wantStderr: "step 1: retrieved 2 tools: calculator.add (0.91), calculator.subtract (0.61)\n" +
				"  model: [calculator.add(a=2, b=3)]\n" +
				"  calling calculator.add {\"a\":2,\"b\":3}\n" +
				"  result calculator.add (1.2 ms): 5\n" +
				"step 2: retrieved 1 tools: calculator.add (0.91)\n" +
				"  model: 2 plus 3 is 5.\n",
		},
		{
			name:       "answer only in done",
			args:       []string{"hello"},
			fake:       &fakeQuery{lines: []string{resultLine(t, doneEv(queryResp("Hi.", answered, 1, "")))}},
			wantStdout: "Hi.\n",
		},
		{
			name: "answer ending in a newline gets no second one",
			args: []string{"hello"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, deltaEv("Hi.\n")),
				resultLine(t, doneEv(queryResp("Hi.\n", answered, 1, ""))),
			}},
			wantStdout: "Hi.\n",
		},
		{
			name: "tool error and long output on one line",
			args: []string{"divide"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, finishedEv("calculator.divide", "division\n\n  by zero", true, 0.31)),
				resultLine(t, finishedEv("sqlite.query", strings.Repeat("row\n", 100), false, 2500)),
				resultLine(t, doneEv(queryResp("No.", answered, 2, ""))),
			}},
			wantStdout: "No.\n",
			wantStderr: "  error calculator.divide (0.3 ms): division by zero\n" +
				"  result sqlite.query (2.50 s): " + strings.Repeat("row ", 50)[:199] + "…\n",
		},
		{
			name: "many tools are summed up and dropped ones named",
			args: []string{"x"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, &toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_Retrieved{Retrieved: &toolmeshv1.Step{
					Number:         1,
					Retrieved:      []*toolmeshv1.ScoredTool{{Tool: &toolmeshv1.Tool{Id: "a.a"}}, {Tool: &toolmeshv1.Tool{Id: "a.b"}}, {Tool: &toolmeshv1.Tool{Id: "a.c"}}, {Tool: &toolmeshv1.Tool{Id: "a.d"}}, {Tool: &toolmeshv1.Tool{Id: "a.e"}}, {Tool: &toolmeshv1.Tool{Id: "a.f"}}, {Tool: &toolmeshv1.Tool{Id: "a.g"}}, {Tool: &toolmeshv1.Tool{Id: "a.h"}}, {Tool: &toolmeshv1.Tool{Id: "a.i"}}, {Tool: &toolmeshv1.Tool{Id: "a.j"}}},
					DroppedToolIds: []string{"a.j"},
				}}}),
				resultLine(t, doneEv(queryResp("ok", answered, 1, ""))),
			}},
			wantStdout: "ok\n",
			wantStderr: "retrieved 10 tools: a.a (0.00), a.b (0.00), a.c (0.00), a.d (0.00), a.e (0.00), a.f (0.00), a.g (0.00), a.h (0.00), +2 more; 1 dropped to fit the prompt: a.j\n",
		},
		{
			name: "max iterations exits 1",
			args: []string{"loop"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, doneEv(queryResp("", toolmeshv1.StopReason_STOP_REASON_MAX_ITERATIONS, 8, ""))),
			}},
			wantCode:   1,
			wantStderr: "toolmesh query: stopped: max iterations reached after 8 steps (trace 4bf92f35)\n",
		},
		{
			name: "deadline keeps the partial answer",
			args: []string{"slow"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, deltaEv("So far: 5")),
				resultLine(t, doneEv(queryResp("So far: 5", toolmeshv1.StopReason_STOP_REASON_DEADLINE, 3, "the query took longer than 120s"))),
			}},
			wantCode:   1,
			wantStdout: "So far: 5\n",
			wantStderr: "toolmesh query: stopped: deadline reached: the query took longer than 120s (trace 4bf92f35)\n",
		},
		{
			name: "error stop reason",
			args: []string{"broken"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, doneEv(queryResp("", toolmeshv1.StopReason_STOP_REASON_ERROR, 1, "inference: llama-server unreachable"))),
			}},
			wantCode:   1,
			wantStderr: "stopped: error: inference: llama-server unreachable",
		},
		{
			name: "no stop reason is not an answer",
			args: []string{"old server"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, doneEv(queryResp("5", toolmeshv1.StopReason_STOP_REASON_UNSPECIFIED, 1, ""))),
			}},
			wantCode:   1,
			wantStdout: "5\n",
			wantStderr: "stopped: no answer (stop reason STOP_REASON_UNSPECIFIED)",
		},
		{
			name: "error line mid-stream",
			args: []string{"add"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, retrievedEv(1, "calculator.add")),
				resultLine(t, deltaEv("Half an ans")),
				errorLine(t, codes.Unavailable, "inference is down"),
			}},
			wantCode:   1,
			wantStdout: "Half an ans\n",
			wantStderr: "step 1: retrieved 1 tools: calculator.add (0.91)\ntoolmesh query: the query failed: inference is down (Unavailable)\n",
		},
		{
			name:       "stream that fails before its first event",
			args:       []string{"add", "-k", "99"},
			fake:       &fakeQuery{status: http.StatusBadRequest, lines: []string{errorLine(t, codes.InvalidArgument, "k must be 1 to 50, got 99")}},
			wantCode:   1,
			wantStderr: "toolmesh query: k must be 1 to 50, got 99 (HTTP 400)\n",
		},
		{
			name:       "error status with a unary error body",
			args:       []string{"add", "--token", "wrong"},
			fake:       &fakeQuery{status: http.StatusUnauthorized, lines: []string{`{"code":16,"message":"missing or bad token","details":[]}`}},
			wantCode:   1,
			wantStderr: "toolmesh query: missing or bad token (HTTP 401)\n",
		},
		{
			name:       "error status from a proxy",
			args:       []string{"add"},
			fake:       &fakeQuery{status: http.StatusBadGateway, lines: []string{"<html>\n<h1>502 Bad Gateway</h1>\n</html>"}},
			wantCode:   1,
			wantStderr: "toolmesh query: <html> <h1>502 Bad Gateway</h1> </html> (HTTP 502)\n",
		},
		{
			name:       "line that is not JSON",
			args:       []string{"add"},
			fake:       &fakeQuery{lines: []string{resultLine(t, retrievedEv(1, "calculator.add")), "<html>oops"}},
			wantCode:   1,
			wantStderr: `the api sent a stream line that is not JSON ("<html>oops")`,
		},
		{
			name:       "line with neither result nor error",
			args:       []string{"add"},
			fake:       &fakeQuery{lines: []string{`{"status":"ok"}`}},
			wantCode:   1,
			wantStderr: `neither result nor error: "{\"status\":\"ok\"}"`,
		},
		{
			name:       "event that does not fit the proto",
			args:       []string{"add"},
			fake:       &fakeQuery{lines: []string{`{"result":{"answer_delta":5}}`}},
			wantCode:   1,
			wantStderr: "decode query stream event:",
		},
		{
			name:       "stream that ends without done",
			args:       []string{"add"},
			fake:       &fakeQuery{lines: []string{resultLine(t, retrievedEv(1, "calculator.add"))}},
			wantCode:   1,
			wantStderr: "the query stream ended before the query was done",
		},
		{
			name: "event lines larger than a default scanner buffer",
			args: []string{"dump"},
			fake: &fakeQuery{lines: []string{
				resultLine(t, finishedEv("sqlite.query", strings.Repeat("x", 3<<20), false, 1)),
				resultLine(t, deltaEv(strings.Repeat("y", 1<<20))),
				resultLine(t, doneEv(queryResp(strings.Repeat("y", 1<<20), answered, 1, ""))),
			}},
			wantStdout: strings.Repeat("y", 1<<20) + "\n",
			wantStderr: "  result sqlite.query (1.0 ms): xxxxxxxx",
		},
		{
			name:       "blank lines are skipped",
			args:       []string{"hello"},
			fake:       &fakeQuery{lines: []string{"", resultLine(t, doneEv(queryResp("Hi.", answered, 1, ""))), ""}},
			wantStdout: "Hi.\n",
		},
		{
			name:       "--json prints the whole response, indented",
			args:       []string{"add 2 and 3", "--json"},
			fake:       &fakeQuery{unary: gatewayLine(t, queryResp("5", answered, 2, ""))},
			wantStdout: "{\n  \"answer\": \"5\",\n  \"tool_calls\": [],\n  \"steps\": [],\n  \"iterations\": 2,\n  \"trace_id\": \"4bf92f35\",\n  \"stop_reason\": \"STOP_REASON_ANSWERED\",\n  \"error\": \"\",\n  \"duration_ms\": 0,\n  \"compose_start_ms\": 0,\n  \"compose_ms\": 0,\n  \"function_calls\": [],\n  \"model\": \"\",\n  \"finish_reason\": \"\"\n}\n",
		},
		{
			name:       "--json still exits 1 without an answer",
			args:       []string{"--json", "loop"},
			fake:       &fakeQuery{unary: gatewayLine(t, queryResp("", toolmeshv1.StopReason_STOP_REASON_MAX_ITERATIONS, 8, ""))},
			wantCode:   1,
			wantStdout: "{\n  \"answer\": \"\",\n  \"tool_calls\": [],\n  \"steps\": [],\n  \"iterations\": 8,\n  \"trace_id\": \"4bf92f35\",\n  \"stop_reason\": \"STOP_REASON_MAX_ITERATIONS\",\n  \"error\": \"\",\n  \"duration_ms\": 0,\n  \"compose_start_ms\": 0,\n  \"compose_ms\": 0,\n  \"function_calls\": [],\n  \"model\": \"\",\n  \"finish_reason\": \"\"\n}\n",
			wantStderr: "stopped: max iterations reached after 8 steps",
		},
		{
			name:       "--json error status",
			args:       []string{"--json", "add"},
			fake:       &fakeQuery{status: http.StatusServiceUnavailable, unary: `{"code":14,"message":"retriever unavailable","details":[]}`},
			wantCode:   1,
			wantStderr: "toolmesh query: retriever unavailable (HTTP 503)\n",
		},
		{name: "k not a number", args: []string{"add", "-k", "four"}, fake: &fakeQuery{}, wantCode: 2, wantStderr: `invalid value "four" for flag -k`},
		{name: "max-iterations not a number", args: []string{"add", "--max-iterations=lots"}, fake: &fakeQuery{}, wantCode: 2, wantStderr: `invalid value "lots" for flag -max-iterations`},
		{name: "timeout not a duration", args: []string{"add", "--timeout", "5"}, fake: &fakeQuery{}, wantCode: 2, wantStderr: `invalid value "5" for flag -timeout`},
		{name: "timeout not positive", args: []string{"add", "--timeout", "0s"}, fake: &fakeQuery{}, wantCode: 2, wantStderr: "--timeout must be positive"},
		{name: "unknown flag", args: []string{"add", "--model", "x"}, fake: &fakeQuery{}, wantCode: 2, wantStderr: "flag provided but not defined: -model"},
		{name: "no text", args: nil, fake: &fakeQuery{}, wantCode: 2, wantStderr: `usage: toolmesh query "TEXT"`},
		{name: "empty text", args: []string{"  "}, fake: &fakeQuery{}, wantCode: 2, wantStderr: `usage: toolmesh query "TEXT"`},
		{name: "two texts", args: []string{"add", "2"}, fake: &fakeQuery{}, wantCode: 2, wantStderr: `usage: toolmesh query "TEXT"`},
		{name: "help", args: []string{"-h"}, fake: &fakeQuery{}, wantCode: 0, wantStderr: "Usage: toolmesh query \"TEXT\" [flags]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api := httptest.NewServer(tc.fake)
			defer api.Close()
			t.Setenv("TOOLMESH_API", api.URL)
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), append([]string{"query"}, tc.args...), strings.NewReader(""), &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code = %d, want %d; stderr %q", code, tc.wantCode, stderr.String())
			}
			if got := stdout.String(); got != tc.wantStdout {
				t.Errorf("stdout = %q, want %q", trimmed(got), trimmed(tc.wantStdout))
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", trimmed(stderr.String()), tc.wantStderr)
			}
		})
	}
}

// trimmed keeps failure messages of the large-output cases readable.
func trimmed(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

func TestQueryRequest(t *testing.T) {
	t.Setenv("TOOLMESH_TOKEN", "")
	done := resultLine(t, doneEv(queryResp("5", toolmeshv1.StopReason_STOP_REASON_ANSWERED, 1, "")))
	tests := []struct {
		name     string
		env      string // TOOLMESH_TOKEN
		args     []string
		wantPath string
		wantAuth string
		wantBody map[string]any
	}{
		{
			name:     "defaults are the server's, except the timeout",
			args:     []string{"add 2 and 3"},
			wantPath: "/v1/query:stream",
			wantBody: map[string]any{"query": "add 2 and 3", "timeout_seconds": 120.0},
		},
		{
			name:     "every flag",
			args:     []string{"-k", "7", "add 2 and 3", "--max-iterations", "3", "--server", "calculator, converter", "--server=sqlite", "--timeout", "90s", "--token", "s3cret"},
			wantPath: "/v1/query:stream",
			wantAuth: "Bearer s3cret",
			wantBody: map[string]any{
				"query": "add 2 and 3", "k": 7.0, "max_iterations": 3.0,
				"servers": []any{"calculator", "converter", "sqlite"}, "timeout_seconds": 90.0,
			},
		},
		{
			name:     "k out of range is the server's to judge; part seconds round up",
			args:     []string{"add", "-k", "99", "--timeout", "1500ms"},
			wantPath: "/v1/query:stream",
			wantBody: map[string]any{"query": "add", "k": 99.0, "timeout_seconds": 2.0},
		},
		{
			name:     "token from the environment, --json asks for the whole response",
			env:      "from-env",
			args:     []string{"add", "--json"},
			wantPath: "/v1/query",
			wantAuth: "Bearer from-env",
			wantBody: map[string]any{"query": "add", "timeout_seconds": 120.0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeQuery{lines: []string{done}, unary: gatewayLine(t, queryResp("5", toolmeshv1.StopReason_STOP_REASON_ANSWERED, 1, ""))}
			api := httptest.NewServer(fake)
			defer api.Close()
			t.Setenv("TOOLMESH_API", api.URL)
			t.Setenv("TOOLMESH_TOKEN", tc.env)
			var stdout, stderr bytes.Buffer
			if code := Main(context.Background(), append([]string{"query"}, tc.args...), strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("exit code = %d, want 0; stderr %q", code, stderr.String())
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if fake.path != tc.wantPath {
				t.Errorf("path = %q, want %q", fake.path, tc.wantPath)
			}
			if fake.auth != tc.wantAuth {
				t.Errorf("Authorization = %q, want %q", fake.auth, tc.wantAuth)
			}
			if !reflect.DeepEqual(fake.body, tc.wantBody) {
				t.Errorf("body = %v, want %v", fake.body, tc.wantBody)
			}
		})
	}
}

// The request body must also be one the gateway accepts: its fields are QueryStreamRequest's.
func TestQueryRequestIsAQueryStreamRequest(t *testing.T) {
	b, err := json.Marshal(queryRequest{Query: "q", K: 4, MaxIterations: 8, Servers: []string{"a"}, TimeoutSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	var got toolmeshv1.QueryStreamRequest
	if err := protojson.Unmarshal(b, &got); err != nil {
		t.Fatalf("the api would reject %s: %v", b, err)
	}
	want := &toolmeshv1.QueryStreamRequest{Query: "q", K: 4, MaxIterations: 8, Servers: []string{"a"}, TimeoutSeconds: 30}
	if !proto.Equal(&got, want) {
		t.Errorf("decoded %v, want %v", &got, want)
	}
}

func TestQueryCancel(t *testing.T) {
	gone := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, resultLine(t, retrievedEv(1, "calculator.add"))+"\n")
		_, _ = io.WriteString(w, resultLine(t, deltaEv("Partial"))+"\n")
		w.(http.Flusher).Flush()
		// The real server cancels the loop when the client goes away; the fake notes it.
		<-r.Context().Done()
		close(gone)
	}))
	defer api.Close()
	t.Setenv("TOOLMESH_API", api.URL)
	t.Setenv("TOOLMESH_TOKEN", "")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := &watchedBuffer{want: "Partial", seen: make(chan struct{})}
	var stderr bytes.Buffer
	exited := make(chan int)
	go func() {
		exited <- Main(ctx, []string{"query", "add 2 and 3"}, strings.NewReader(""), stdout, &stderr)
	}()
	select {
	case <-stdout.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the streamed answer never arrived")
	}
	cancel() // what Ctrl-C does to the context main gives the command
	select {
	case code := <-exited:
		if code != 1 {
			t.Errorf("exit code = %d, want 1", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not return after its context was canceled")
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never saw the client go away")
	}
	if got, want := stdout.String(), "Partial\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := stderr.String(), "step 1: retrieved 1 tools: calculator.add (0.91)\ntoolmesh query: canceled\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
}

// watchedBuffer closes seen once what was written contains want.
type watchedBuffer struct {
	want string
	seen chan struct{}

	mu   sync.Mutex
	buf  bytes.Buffer
	once sync.Once
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// agentStub is an AgentService whose answers depend on the query text.
type agentStub struct {
	toolmeshv1.UnimplementedAgentServiceServer
	gone chan struct{} // closed when a "wait" stream sees its client go away
}

func (a *agentStub) Query(ctx context.Context, req *toolmeshv1.QueryRequest) (*toolmeshv1.QueryResponse, error) {
	return queryResp("5", toolmeshv1.StopReason_STOP_REASON_ANSWERED, 2, ""), nil
}

func (a *agentStub) QueryStream(req *toolmeshv1.QueryStreamRequest, stream grpc.ServerStreamingServer[toolmeshv1.QueryStreamResponse]) error {
	if req.GetK() > 50 {
		return status.Errorf(codes.InvalidArgument, "k must be 1 to 50, got %d", req.GetK())
	}
	args, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	events := []*toolmeshv1.QueryStreamResponse{
		retrievedEv(1, "calculator.add"),
		{Event: &toolmeshv1.QueryStreamResponse_ToolCallStarted{ToolCallStarted: &toolmeshv1.ToolCallRecord{Tool: "calculator.add", Arguments: args}}},
		finishedEv("calculator.add", "5", false, 0.5),
		deltaEv("5"),
	}
	for _, ev := range events {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	switch req.GetQuery() {
	case "fail":
		return status.Error(codes.Unavailable, "inference is down")
	case "wait":
		<-stream.Context().Done()
		close(a.gone)
		return stream.Context().Err()
	}
	return stream.Send(doneEv(queryResp("5", toolmeshv1.StopReason_STOP_REASON_ANSWERED, 2, "")))
}

// TestQueryThroughGateway runs the client against the real grpc-gateway in front of a gRPC
// AgentService, configured as the api's, to check the wire format the fakes above play.
func TestQueryThroughGateway(t *testing.T) {
	t.Setenv("TOOLMESH_TOKEN", "")
	agent := &agentStub{gone: make(chan struct{})}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	toolmeshv1.RegisterAgentServiceServer(srv, agent)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gw := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, gatewayJSON))
	if err := toolmeshv1.RegisterAgentServiceHandlerClient(context.Background(), gw, toolmeshv1.NewAgentServiceClient(conn)); err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(gw)
	defer api.Close()
	t.Setenv("TOOLMESH_API", api.URL)

	progress := "step 1: retrieved 1 tools: calculator.add (0.91)\n  calling calculator.add {\"a\":2,\"b\":3}\n  result calculator.add (0.5 ms): 5\n"
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string // exactly
	}{
		{"answered", []string{"add"}, 0, "5\n", progress},
		{"error before the first event", []string{"add", "-k", "99"}, 1, "", "toolmesh query: k must be 1 to 50, got 99 (HTTP 400)\n"},
		{"error mid-stream", []string{"fail"}, 1, "5\n", progress + "toolmesh query: the query failed: inference is down (Unavailable)\n"},
		{"--json", []string{"add", "--json"}, 0, "{\n  \"answer\": \"5\",\n  \"tool_calls\": [],\n  \"steps\": [],\n  \"iterations\": 2,\n  \"trace_id\": \"4bf92f35\",\n  \"stop_reason\": \"STOP_REASON_ANSWERED\",\n  \"error\": \"\",\n  \"duration_ms\": 0,\n  \"compose_start_ms\": 0,\n  \"compose_ms\": 0,\n  \"function_calls\": [],\n  \"model\": \"\",\n  \"finish_reason\": \"\"\n}\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), append([]string{"query"}, tc.args...), strings.NewReader(""), &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code = %d, want %d", code, tc.wantCode)
			}
			if got := stdout.String(); got != tc.wantStdout {
				t.Errorf("stdout = %q, want %q", got, tc.wantStdout)
			}
			if got := stderr.String(); got != tc.wantStderr {
				t.Errorf("stderr = %q, want %q", got, tc.wantStderr)
			}
		})
	}

	t.Run("cancel reaches the agent", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stdout := &watchedBuffer{want: "5", seen: make(chan struct{})}
		var stderr bytes.Buffer
		exited := make(chan int)
		go func() { exited <- Main(ctx, []string{"query", "wait"}, strings.NewReader(""), stdout, &stderr) }()
		select {
		case <-stdout.seen:
		case <-time.After(10 * time.Second):
			t.Fatal("the streamed answer never arrived")
		}
		cancel()
		if code := <-exited; code != 1 {
			t.Errorf("exit code = %d, want 1", code)
		}
		select {
		case <-agent.gone:
		case <-time.After(10 * time.Second):
			t.Fatal("the agent's stream was not canceled")
		}
		if got, want := stderr.String(), progress+"toolmesh query: canceled\n"; got != want {
			t.Errorf("stderr = %q, want %q", got, want)
		}
	})
}

func TestUsageListsQuery(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"help"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("exit code = %d, want 0", code)
	}
	if want := `toolmesh query "TEXT" [-k N] [--server S]`; !strings.Contains(stdout.String(), want) {
		t.Errorf("usage = %q, want it to contain %q", stdout.String(), want)
	}
}
