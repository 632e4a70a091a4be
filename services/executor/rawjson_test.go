package executor

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// rawStructured is what the echo tool of TestRawJSON answers as its structured content, in the
// server's own spelling: an integer over 2^53 and keys out of order, which a decode and
// re-encode would change.
const rawStructured = `{"z":1,"big":12345678901234567890,"a":[true,null]}`

// TestRawJSON: a caller that sends its arguments as JSON text (arguments_json) has the MCP server
// read that text, and reads the server's structured content as the server wrote it; a caller
// that sends a Struct (an api older than the field) is answered as before.
func TestRawJSON(t *testing.T) {
	ts := newTestMCP("raw", 0)
	ts.srv.AddTool(mcp.NewTool("echo", mcp.WithDescription("Echo the arguments as the server read them"),
		mcp.WithNumber("n", mcp.Required()), mcp.WithString("note")),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var sc any
			_ = json.Unmarshal([]byte(rawStructured), &sc)
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(string(r.Params.RawArguments))},
				StructuredContent: sc, RawStructuredContent: json.RawMessage(rawStructured)}, nil
		})
	hh := newHTTPHarness(t, streamableHandler(fixed(ts)))
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{
		"raw": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"},
	}})
	h.waitReady(t)
	callJSON := func(args string) (*toolmeshv1.ExecutorServiceCallToolResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return h.client.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "raw.echo", ArgumentsJson: []byte(args)})
	}

	t.Run("as sent", func(t *testing.T) {
		const args = `{"n":98765432109876543210,"note":"é<&>"}`
		r, err := callJSON(args)
		if err != nil {
			t.Fatal(err)
		}
		// The number would read 98765432109876540000 after a float64; mcp-go writes < & > as
		// \u003c... when it encodes, which is the same JSON.
		var got, want any
		if err := json.Unmarshal([]byte(text(r)), &got); err != nil {
			t.Fatalf("server read %q: %v", text(r), err)
		}
		_ = json.Unmarshal([]byte(args), &want)
		if text(r) != `{"n":98765432109876543210,"note":"é\u003c\u0026\u003e"}` && text(r) != args {
			t.Errorf("server read %s, want %s", text(r), args)
		}
		if got := string(r.GetStructuredContentJson()); got != rawStructured {
			t.Errorf("structured_content_json = %s, want the server's %s", got, rawStructured)
		}
		if r.GetStructuredContent() != nil {
			t.Errorf("structured_content set too: %v", r.GetStructuredContent())
		}
	})

	t.Run("optional null dropped", func(t *testing.T) {
		r, err := callJSON(`{"n":1,"note":null}`)
		if err != nil {
			t.Fatal(err)
		}
		if text(r) != `{"n":1}` {
			t.Errorf("server read %s, want {\"n\":1}", text(r))
		}
	})

	t.Run("struct caller", func(t *testing.T) {
		st, _ := structpb.NewStruct(map[string]any{"n": 2})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := h.client.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "raw.echo", Arguments: st})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetStructuredContentJson() != nil {
			t.Errorf("structured_content_json = %s for a Struct caller", r.GetStructuredContentJson())
		}
		if got := r.GetStructuredContent().AsMap()["z"]; got != 1.0 {
			t.Errorf("structured_content.z = %v, want 1", got)
		}
	})

	for _, bad := range []string{`[1]`, `null`, `{"n":`, `"n"`, `{"n":"x"}`} {
		t.Run("refused "+bad, func(t *testing.T) {
			_, err := callJSON(bad)
			wantCode(t, err, codes.InvalidArgument, "arguments")
		})
	}
}
