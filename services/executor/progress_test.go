package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

const envStepsTool = "EXECUTOR_TEST_STEPS_TOOL"

// addStepsTool gives ts a tool "steps" that reports its progress through n steps when the
// call asks for progress. Between steps 2 and 3 it also sends what a faulty server might: a
// report that goes backwards, one for a token nobody asked for, and one whose progress is not
// a number.
func addStepsTool(ts *testMCP) {
	ts.srv.AddTool(mcp.NewTool("steps", mcp.WithDescription("Works through n steps"), mcp.WithNumber("n", mcp.Required())),
		func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n, _ := r.RequireFloat("n")
			var token mcp.ProgressToken
			if r.Params.Meta != nil {
				token = r.Params.Meta.ProgressToken
			}
			srv := server.ServerFromContext(ctx)
			send := func(params map[string]any) error {
				if token == nil {
					return nil
				}
				return srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), params)
			}
			for i := 1; i <= int(n); i++ {
				time.Sleep(5 * time.Millisecond)
				if err := send(map[string]any{"progressToken": token, "progress": i, "total": n, "message": fmt.Sprintf("step %d", i)}); err != nil {
					return nil, err
				}
				if i == 2 {
					// mcp-go's server may send a session's notifications on different streams,
					// so they can arrive in any order: the report that does not grow repeats
					// step 1 whole, and is right whichever of the two is dropped.
					time.Sleep(5 * time.Millisecond)
					for _, bad := range []map[string]any{
						{"progressToken": token, "progress": 1, "total": n, "message": "step 1"},
						{"progressToken": "toolmesh-999999", "progress": 100},
						{"progressToken": token, "progress": "most"},
					} {
						if err := send(bad); err != nil {
							return nil, err
						}
					}
				}
			}
			return mcp.NewToolResultText("done"), nil
		})
}

// collect reads a CallToolStream to its end.
func collect(t *testing.T, st toolmeshv1.ExecutorService_CallToolStreamClient) ([]*toolmeshv1.CallProgress, *toolmeshv1.ExecutorServiceCallToolResponse, error) {
	t.Helper()
	var progress []*toolmeshv1.CallProgress
	var result *toolmeshv1.ExecutorServiceCallToolResponse
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return progress, result, nil
		}
		if err != nil {
			return progress, result, err
		}
		if result != nil {
			t.Fatalf("a message after the result: %v", m)
		}
		switch e := m.GetEvent().(type) {
		case *toolmeshv1.ExecutorServiceCallToolStreamResponse_Progress:
			progress = append(progress, e.Progress)
		case *toolmeshv1.ExecutorServiceCallToolStreamResponse_Result:
			result = e.Result
		default:
			t.Fatalf("message with no event: %v", m)
		}
	}
}

// TestCallProgress: a call made with CallToolStream gets the server's progress reports before
// its result, over every transport and protocol era: growing, and none of the faulty ones. A
// plain CallTool asks for none.
func TestCallProgress(t *testing.T) {
	for _, tc := range transportCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := newTestMCP(tc.name, 0)
			addStepsTool(ts)
			var srv mcpconfig.Server
			if tc.stdio {
				srv, _ = stdioServer(t, 0)
				srv.Env[envStepsTool] = "1"
			} else {
				srv, _ = tc.setup(t, ts)
			}
			h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"calc": srv}})
			h.waitReady(t)

			args, _ := structpb.NewStruct(map[string]any{"n": 4})
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				st, err := h.client.CallToolStream(ctx, &toolmeshv1.ExecutorServiceCallToolStreamRequest{
					Call: &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "calc.steps", Arguments: args}})
				if err != nil {
					t.Fatal(err)
				}
				progress, result, err := collect(t, st)
				cancel()
				if err != nil || result == nil || text(result) != "done" {
					t.Fatalf("result %v, err %v; want done", result, err)
				}
				if len(progress) == 0 {
					t.Fatal("no progress reports")
				}
				for i, p := range progress {
					if i > 0 && p.GetProgress() <= progress[i-1].GetProgress() {
						t.Errorf("progress went from %v to %v", progress[i-1].GetProgress(), p.GetProgress())
					}
					if p.GetProgress() != float64(int(p.GetProgress())) || p.GetProgress() > 4 {
						t.Errorf("a report the server should not have got through: %v", p)
					}
					if p.Total == nil || p.GetTotal() != 4 || p.GetMessage() != fmt.Sprintf("step %d", int(p.GetProgress())) {
						t.Errorf("report %v: want total 4 and its step's message", p)
					}
				}
				// Not checked here: that the last report comes through. mcp-go's server writes
				// notifications from a goroutine of its own, so its result may overtake them;
				// TestEverythingProgress checks it with a server that keeps the order.
			}

			// A plain call asks for no progress; the tool then sends none.
			if r, err := call(t, h, "calc.steps", map[string]any{"n": 2}); err != nil || text(r) != "done" {
				t.Fatalf("plain call: %v %v", r, err)
			}
		})
	}
}

// TestCallProgressErrors: a streamed call fails as CallTool does, with the stream's status.
func TestCallProgressErrors(t *testing.T) {
	ts := newTestMCP("errors", 0)
	hh := newHTTPHarness(t, streamableHandler(fixed(ts)))
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"calc": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"}}})
	h.waitReady(t)
	for _, tc := range []struct {
		name string
		call *toolmeshv1.ExecutorServiceCallToolRequest
		code codes.Code
	}{
		{"unknown tool", &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "calc.nope"}, codes.NotFound},
		{"bad arguments", &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "calc.add"}, codes.InvalidArgument},
		{"no call", nil, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := h.client.CallToolStream(ctx, &toolmeshv1.ExecutorServiceCallToolStreamRequest{Call: tc.call})
			if err != nil {
				t.Fatal(err)
			}
			_, result, err := collect(t, st)
			if result != nil {
				t.Fatalf("result %v, want an error", result)
			}
			wantCode(t, err, tc.code)
		})
	}
}

func TestProgressOf(t *testing.T) {
	four := 4.0
	for _, tc := range []struct {
		name   string
		fields map[string]any
		want   *toolmeshv1.CallProgress // nil: dropped
	}{
		{"progress only", map[string]any{"progressToken": "t", "progress": 1.0}, &toolmeshv1.CallProgress{Progress: 1}},
		{"total and message", map[string]any{"progressToken": "t", "progress": 2.0, "total": 4.0, "message": "half"}, &toolmeshv1.CallProgress{Progress: 2, Total: &four, Message: "half"}},
		{"null total", map[string]any{"progressToken": "t", "progress": 2.0, "total": nil}, &toolmeshv1.CallProgress{Progress: 2}},
		{"number token: not ours", map[string]any{"progressToken": 7.0, "progress": 1.0}, nil},
		{"no progress", map[string]any{"progressToken": "t"}, nil},
		{"progress not a number", map[string]any{"progressToken": "t", "progress": "1"}, nil},
		{"total not a number", map[string]any{"progressToken": "t", "progress": 1.0, "total": "4"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p, ok := progressOf(tc.fields)
			if ok != (tc.want != nil) {
				t.Fatalf("ok = %v, want %v", ok, tc.want != nil)
			}
			if ok && !proto.Equal(p, tc.want) {
				t.Errorf("got %v, want %v", p, tc.want)
			}
		})
	}
	long := strings.Repeat("é", 3000)
	_, p, _ := progressOf(map[string]any{"progressToken": "t", "progress": 1.0, "message": long})
	if len(p.GetMessage()) > maxProgressMessage+64 || !utf8.ValidString(p.GetMessage()) {
		t.Errorf("a %d-byte message was passed on as %d bytes (valid UTF-8: %v)", len(long), len(p.GetMessage()), utf8.ValidString(p.GetMessage()))
	}
}
