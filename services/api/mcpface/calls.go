package mcpface

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/searchbounds"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// callHandler is the handler of the tool id in every view that serves it. The arguments go
// on as the JSON text mcp-go kept of them (RawArguments): the face decodes nothing more.
//
// What mcp-go's tool handler middleware would do for every call (wrap the handler in closures
// anew: recovery, and the end of a legacy SSE stream ending the call) is done here, in the
// handler made once per tool and catalog.
func (f *Face) callHandler(id string) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			if r := recover(); r != nil {
				res, err = nil, fmt.Errorf("panic recovered in %s tool handler: %v", req.Params.Name, r)
			}
		}()
		if st := streamOf(ctx); st != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(st.ctx, cancel)()
		}
		return f.callTool(ctx, id, rawArguments(req.Params), progressToken(req), false)
	}
}

// noArguments is what a call without arguments sends on.
var noArguments = json.RawMessage(`{}`)

// rawArguments is the call's arguments as the client wrote them. mcp-go keeps that text of a
// request it decoded; a request made in the process (a test's) has only the value.
func rawArguments(p mcp.CallToolParams) json.RawMessage {
	if len(p.RawArguments) > 0 {
		return p.RawArguments
	}
	if p.Arguments == nil {
		return nil
	}
	b, err := json.Marshal(p.Arguments)
	if err != nil {
		return json.RawMessage(`"unencodable"`) // refused as not an object
	}
	return b
}

// objectText reports whether raw, JSON text that mcp-go has parsed already, is an object: its
// first byte past white space opens one.
func objectText(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

// progressToken is the token of a call whose client asked for progress reports, or nil.
func progressToken(req mcp.CallToolRequest) mcp.ProgressToken {
	if req.Params.Meta == nil {
		return nil
	}
	return req.Params.Meta.ProgressToken
}

// progressTo returns what passes a call's progress reports on to its client as
// notifications/progress under the client's token; nil when the client asked for none.
func progressTo(ctx context.Context, token mcp.ProgressToken) func(*toolmeshv1.CallProgress) {
	srv := server.ServerFromContext(ctx)
	if token == nil || srv == nil {
		return nil
	}
	return func(p *toolmeshv1.CallProgress) {
		params := map[string]any{"progressToken": token, "progress": p.GetProgress()}
		if p.Total != nil {
			params["total"] = p.GetTotal()
		}
		if p.GetMessage() != "" {
			params["message"] = p.GetMessage()
		}
		// A client that went away misses its progress; the call itself ends with its context.
		_ = srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), params)
	}
}

// callTool calls the tool id through the api's tools handler, as a REST call does. Its
// failures come back as a result with isError set, which the client's model reads and can act
// on (arguments that do not match the tool's schema, a refusal, a server that is down or too
// slow), except the ones that are not about the call: an unknown tool (for call_tool, with
// unknownAsResult, a result too: that tool is call_tool's argument) and internal errors.
//
// With a progress token, the tool's progress reports go to the client under it.
//
// arguments is their JSON text (nil or null: none), passed on as it is: the executor parses it
// once, to validate it, and the MCP server gets it.
func (f *Face) callTool(ctx context.Context, id string, arguments json.RawMessage, token mcp.ProgressToken, unknownAsResult bool) (*mcp.CallToolResult, error) {
	srv, name, ok := toolid.Split(id)
	if !ok {
		return nil, fmt.Errorf("%q is not a tool id (SERVER.TOOL)", id)
	}
	switch {
	case len(arguments) == 0 || string(arguments) == "null":
		arguments = noArguments
	case !objectText(arguments):
		return mcp.NewToolResultError("arguments: must be a JSON object of the tool's arguments"), nil
	}
	ctx = f.ins.callContext(ctx, id)
	resp, err := f.tools.CallToolProgress(ctx, &toolmeshv1.CallToolRequest{Server: srv, Name: name, ArgumentsJson: arguments}, progressTo(ctx, token))
	if err != nil {
		return failure(ctx, err, unknownAsResult)
	}
	return resultOf(resp), nil
}

// failure turns the tools handler's error (a gRPC status) into a tool result or an error.
func failure(ctx context.Context, err error, unknownAsResult bool) (*mcp.CallToolResult, error) {
	st, _ := status.FromError(err)
	noteCode(ctx, st.Code())
	switch st.Code() {
	case codes.Canceled:
		// The client cancelled: it reads no answer.
		return nil, errors.New("request cancelled")
	case codes.NotFound:
		if unknownAsResult {
			return mcp.NewToolResultError(st.Message()), nil
		}
		return nil, errors.New(st.Message())
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		return nil, errors.New(st.Message())
	}
	return mcp.NewToolResultError(fmt.Sprintf("%s (%s)", st.Message(), st.Code())), nil
}

// resultOf is the MCP form of a call's response.
func resultOf(resp *toolmeshv1.CallToolResponse) *mcp.CallToolResult {
	out := &mcp.CallToolResult{Content: make([]mcp.Content, 0, len(resp.GetContent())), IsError: resp.GetIsError()}
	for _, c := range resp.GetContent() {
		out.Content = append(out.Content, contentOf(c))
	}
	if sc := resp.GetStructuredContentJson(); sc != nil {
		// The client gets the text the MCP server sent.
		out.RawStructuredContent = sc
	} else if sc := resp.GetStructuredContent(); sc != nil {
		out.StructuredContent = sc.AsMap()
	}
	return out
}

// contentOf is the MCP form of one content block, as the executor read it from the server.
func contentOf(c *toolmeshv1.Content) mcp.Content {
	data := base64.StdEncoding.EncodeToString(c.GetData())
	switch c.GetType() {
	case "image":
		return mcp.ImageContent{Type: "image", Data: data, MIMEType: c.GetMimeType()}
	case "audio":
		return mcp.AudioContent{Type: "audio", Data: data, MIMEType: c.GetMimeType()}
	case "resource_link":
		return mcp.ResourceLink{Type: "resource_link", URI: c.GetUri(), Name: c.GetName(), Description: c.GetText(), MIMEType: c.GetMimeType()}
	case "resource":
		if c.Text != nil {
			return mcp.EmbeddedResource{Type: "resource", Resource: mcp.TextResourceContents{URI: c.GetUri(), MIMEType: c.GetMimeType(), Text: c.GetText()}}
		}
		return mcp.EmbeddedResource{Type: "resource", Resource: mcp.BlobResourceContents{URI: c.GetUri(), MIMEType: c.GetMimeType(), Blob: data}}
	}
	return mcp.TextContent{Type: "text", Text: c.GetText()}
}

// The two tools of the search view.
const (
	searchToolName = "search_tools"
	callToolName   = "call_tool"
)

var (
	searchSchema = json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{`+
		`"query":{"type":"string","minLength":1,"maxLength":%d,"description":"What a tool should do, in a few words or the user's own request, e.g. \"convert 3 miles to kilometres\"."},`+
		`"k":{"type":"integer","minimum":1,"maximum":%d,"description":"How many tools to return, best first (default %d)."}},`+
		`"required":["query"],"additionalProperties":false}`, searchbounds.MaxQueryBytes, searchbounds.MaxK, searchbounds.DefaultK))
	callSchema = json.RawMessage(`{"type":"object","properties":{` +
		`"tool":{"type":"string","description":"The tool to call: its name or id as search_tools returned it (SERVER__TOOL or SERVER.TOOL)."},` +
		`"arguments":{"type":"object","description":"The tool's arguments, as its inputSchema describes them."}},` +
		`"required":["tool"],"additionalProperties":false}`)
)

func (f *Face) searchTools() []server.ServerTool {
	yes, no := true, false
	return []server.ServerTool{
		{Tool: mcp.Tool{Name: searchToolName, Title: "Search tools",
			Description: "Find the tools that fit a task among all of toolmesh's tools. Returns the best k with their " +
				"definitions (name, id, description, inputSchema); call one with call_tool.",
			RawInputSchema: searchSchema,
			Annotations:    mcp.ToolAnnotation{ReadOnlyHint: &yes, DestructiveHint: &no, IdempotentHint: &yes, OpenWorldHint: &no}},
			Handler: f.handleSearch},
		{Tool: mcp.Tool{Name: callToolName, Title: "Call a tool",
			Description:    "Call one of toolmesh's tools, by the name or id search_tools returned, with its arguments.",
			RawInputSchema: callSchema},
			Handler: f.handleCall},
	}
}

// handleSearch is search_tools: the retriever's top k for the query, through the api's tools
// handler (so the policy leaves out what the token may not see), with each tool's definition
// as the catalog has it.
func (f *Face) handleSearch(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	q, ok := args["query"].(string)
	if !ok || strings.TrimSpace(q) == "" {
		return mcp.NewToolResultError("query: is required: say what the tool should do"), nil
	}
	k := 0
	switch v := args["k"].(type) {
	case nil:
	case float64:
		if v != math.Trunc(v) || v < 1 || v > searchbounds.MaxK {
			return mcp.NewToolResultError(fmt.Sprintf("k: must be a whole number between 1 and %d", searchbounds.MaxK)), nil
		}
		k = int(v)
	default:
		return mcp.NewToolResultError(fmt.Sprintf("k: must be a whole number between 1 and %d", searchbounds.MaxK)), nil
	}
	resp, err := f.tools.SearchTools(ctx, &toolmeshv1.SearchToolsRequest{Q: q, K: int32(k)})
	if err != nil {
		return failure(ctx, err, true)
	}
	pub := f.state.published()
	found := make([]any, 0, len(resp.GetResults()))
	for _, r := range resp.GetResults() {
		t := r.GetTool()
		if current := pub.tools[t.GetId()]; current != nil {
			t = current
		}
		found = append(found, searchEntry(t, pub.names.Name(t.GetId()), r.GetScore()))
	}
	structured := map[string]any{"tools": found}
	text, err := json.Marshal(structured)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(string(text))}, StructuredContent: structured}, nil
}

// searchEntry is one tool as search_tools returns it: its MCP definition, its toolmesh id and
// its score. name is its catalog name ("" when the catalog has not seen it yet).
func searchEntry(t *toolmeshv1.Tool, name string, score float64) map[string]any {
	e := map[string]any{"id": t.GetId(), "score": score}
	if name != "" {
		e["name"] = name
	}
	if t.GetTitle() != "" {
		e["title"] = t.GetTitle()
	}
	if t.GetDescription() != "" {
		e["description"] = t.GetDescription()
	}
	if s := t.GetInputSchema(); s != nil {
		e["inputSchema"] = s.AsMap()
	} else {
		e["inputSchema"] = map[string]any{"type": "object"}
	}
	if s := t.GetOutputSchema(); s != nil {
		e["outputSchema"] = s.AsMap()
	}
	if a := t.GetAnnotations(); a != nil {
		ann := map[string]any{}
		for k, v := range map[string]*bool{"readOnlyHint": a.ReadOnlyHint, "destructiveHint": a.DestructiveHint,
			"idempotentHint": a.IdempotentHint, "openWorldHint": a.OpenWorldHint} {
			if v != nil {
				ann[k] = *v
			}
		}
		e["annotations"] = ann
	}
	return e
}

// handleCall is call_tool: the tool named by its catalog name or id, called as the catalog
// would call it.
func (f *Face) handleCall(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	tool, _ := args["tool"].(string)
	if tool == "" {
		return mcp.NewToolResultError("tool: is required: the name or id of a tool search_tools returned"), nil
	}
	id := tool
	if !strings.Contains(tool, ".") {
		var ok bool
		if id, ok = f.state.published().names.ID(tool); !ok {
			return mcp.NewToolResultError(fmt.Sprintf("tool: no tool is named %q: use a name or id search_tools returned", tool)), nil
		}
	}
	if _, _, ok := toolid.Split(id); !ok {
		return mcp.NewToolResultError(fmt.Sprintf("tool: %q is neither a tool name nor an id (SERVER.TOOL, the server matching %s)", tool, toolid.ServerRule)), nil
	}
	return f.callTool(ctx, id, callToolArguments(req.Params, args["arguments"]), progressToken(req), true)
}

// callToolArguments is the text of call_tool's own "arguments" argument: cut from the text
// mcp-go kept (a scan, not a decode into values), or encoded from the value it decoded.
func callToolArguments(p mcp.CallToolParams, decoded any) json.RawMessage {
	if decoded == nil {
		return nil
	}
	if len(p.RawArguments) > 0 {
		var outer struct {
			Arguments json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal(p.RawArguments, &outer) == nil {
			return outer.Arguments
		}
	}
	return rawArguments(mcp.CallToolParams{Arguments: decoded})
}
