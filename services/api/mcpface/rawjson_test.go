package mcpface

import (
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// TestRawJSON: a call's arguments reach the tools handler as the JSON text the client wrote
// (an integer over 2^53 keeps its digits), and the server's structured content reaches the
// client as the server wrote it; call_tool passes its "arguments" on the same way.
func TestRawJSON(t *testing.T) {
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.echo")), harnessOptions{})
	const structured = `{"z":1,"big":12345678901234567890}`
	h.tools.result = func(req *toolmeshv1.CallToolRequest) (*toolmeshv1.CallToolResponse, error) {
		return &toolmeshv1.CallToolResponse{Content: []*toolmeshv1.Content{{Type: "text", Text: proto.String(string(req.GetArgumentsJson()))}},
			StructuredContentJson: []byte(structured)}, nil
	}
	const args = `{"n":98765432109876543210,"s":"x"}`
	for _, tc := range []struct {
		name, path, tool string
		args             any
		want             string
	}{
		{"catalog", CatalogPath, "srv__echo", rawArgs(args), args},
		{"no arguments", CatalogPath, "srv__echo", nil, `{}`},
		{"call_tool", SearchPath, callToolName, rawArgs(`{"tool":"srv.echo","arguments":` + args + `}`), args},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := h.connect(t, tc.path, mcp.LATEST_PROTOCOL_VERSION, "")
			res, err := call(t, c, tc.tool, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if text(res) != tc.want {
				t.Errorf("the tools handler got arguments %s, want %s", text(res), tc.want)
			}
			if string(res.RawStructuredContent) != structured {
				t.Errorf("structured content %s, want the server's %s", res.RawStructuredContent, structured)
			}
		})
	}
}

// rawArgs is arguments a client sends as they are written.
type rawArgs string

func (r rawArgs) MarshalJSON() ([]byte, error) { return []byte(r), nil }
