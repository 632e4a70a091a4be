package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// TestEverythingPromptsAndResources lists, gets and reads the prompts and resources of the
// reference server, over stdio, with the server's rules applied and its result limit kept.
func TestEverythingPromptsAndResources(t *testing.T) {
	paths := testbackend.Everything.Need(t)
	node, entry := paths[0], paths[1]
	srv := mcpconfig.Server{Transport: mcpconfig.TransportStdio, Command: node, Args: []string{entry, "stdio"},
		ExcludedPrompts:   []string{"simple-prompt"},
		ExcludedResources: []string{"demo://resource/static/document/instructions.md"},
		MaxResultBytes:    4096}
	h := startExecutor(t, Config{ConnectTimeout: 20 * time.Second, Servers: map[string]mcpconfig.Server{"everything": srv}})
	h.waitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lp, err := h.client.ListPrompts(ctx, &toolmeshv1.ExecutorServiceListPromptsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	prompts := map[string]*toolmeshv1.Prompt{}
	for _, p := range lp.GetPrompts() {
		prompts[p.GetId()] = p
	}
	args := prompts["everything.args-prompt"]
	if args == nil || len(args.GetArguments()) != 2 || args.GetArguments()[0].GetName() != "city" || !args.GetArguments()[0].GetRequired() {
		t.Fatalf("args-prompt: got %v (all: %v)", args, lp.GetPrompts())
	}
	if prompts["everything.simple-prompt"] != nil {
		t.Errorf("simple-prompt is listed although excludedPrompts names it")
	}

	gp, err := h.client.GetPrompt(ctx, &toolmeshv1.ExecutorServiceGetPromptRequest{Server: "everything", Name: "args-prompt",
		Arguments: map[string]string{"city": "Paris", "state": "Texas"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(gp.GetMessages()) != 1 || gp.GetMessages()[0].GetRole() != "user" || gp.GetMessages()[0].GetContent().GetText() != "What's weather in Paris, Texas?" {
		t.Errorf("args-prompt got %v", gp.GetMessages())
	}
	_, err = h.client.GetPrompt(ctx, &toolmeshv1.ExecutorServiceGetPromptRequest{Server: "everything", Name: "simple-prompt"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("excluded prompt: got %v, want NotFound", err)
	}

	lr, err := h.client.ListResources(ctx, &toolmeshv1.ExecutorServiceListResourcesRequest{Server: "everything"})
	if err != nil {
		t.Fatal(err)
	}
	uris := map[string]bool{}
	for _, r := range lr.GetResources() {
		uris[r.GetUri()] = true
	}
	if !uris["demo://resource/static/document/architecture.md"] || uris["demo://resource/static/document/instructions.md"] {
		t.Errorf("resources: got %v", uris)
	}
	lt, err := h.client.ListResourceTemplates(ctx, &toolmeshv1.ExecutorServiceListResourceTemplatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var templates []string
	for _, rt := range lt.GetResourceTemplates() {
		templates = append(templates, rt.GetUriTemplate())
	}
	if !strings.Contains(strings.Join(templates, " "), "demo://resource/dynamic/blob/{resourceId}") {
		t.Errorf("templates: got %v", templates)
	}

	text, err := h.client.ReadResource(ctx, &toolmeshv1.ExecutorServiceReadResourceRequest{Server: "everything", Uri: "demo://resource/dynamic/text/7"})
	if err != nil {
		t.Fatal(err)
	}
	if c := text.GetContents(); len(c) != 1 || !strings.HasPrefix(c[0].GetText(), "Resource 7: This is a plaintext resource") || c[0].Blob != nil {
		t.Errorf("text resource: got %v", c)
	}
	blob, err := h.client.ReadResource(ctx, &toolmeshv1.ExecutorServiceReadResourceRequest{Server: "everything", Uri: "demo://resource/dynamic/blob/7"})
	if err != nil {
		t.Fatal(err)
	}
	if c := blob.GetContents(); len(c) != 1 || !strings.HasPrefix(string(c[0].GetBlob()), "Resource 7: This is a base64 blob") || c[0].Text != nil {
		t.Errorf("blob resource: got %v", c)
	}

	_, err = h.client.ReadResource(ctx, &toolmeshv1.ExecutorServiceReadResourceRequest{Server: "everything", Uri: "demo://resource/static/document/instructions.md"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("excluded resource: got %v, want NotFound", err)
	}
	// structure.md is 12 KB, over the server's 4096-byte limit.
	_, err = h.client.ReadResource(ctx, &toolmeshv1.ExecutorServiceReadResourceRequest{Server: "everything", Uri: "demo://resource/static/document/structure.md"})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "over the 4096-byte limit (mcpServers.everything.maxResultBytes)") {
		t.Errorf("oversized resource: got %v", err)
	}
	_, err = h.client.ReadResource(ctx, &toolmeshv1.ExecutorServiceReadResourceRequest{Server: "nope", Uri: "x://y"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unknown server: got %v, want NotFound", err)
	}
}

// TestPromptsListChanged: a server that adds a prompt and a resource tells the executor, and the
// executor tells its WatchListChanged streams; the new ones are listed at once.
func TestPromptsListChanged(t *testing.T) {
	ts := newTestMCP("changing", 0, server.WithPromptCapabilities(true), server.WithResourceCapabilities(false, true))
	m := ts.srv
	m.AddPrompt(mcp.NewPrompt("first"), func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return mcp.NewGetPromptResult("", nil), nil
	})
	hh := newHTTPHarness(t, streamableHandler(fixed(ts)))
	h := startExecutor(t, Config{Servers: map[string]mcpconfig.Server{"changing": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp"}}})
	h.waitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := h.client.WatchListChanged(ctx, &toolmeshv1.WatchListChangedRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The stream may first say what the connection already said; what matters is what follows.
	time.Sleep(200 * time.Millisecond)
	m.AddPrompt(mcp.NewPrompt("second"), func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return mcp.NewGetPromptResult("", nil), nil
	})
	m.AddResource(mcp.NewResource("test://new", "new"), func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: "test://new", Text: "new"}}, nil
	})
	seen := map[toolmeshv1.ListKind]bool{}
	for !seen[toolmeshv1.ListKind_LIST_KIND_PROMPTS] || !seen[toolmeshv1.ListKind_LIST_KIND_RESOURCES] {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for the changes (seen %v): %v", seen, err)
		}
		if ev.GetServer() == "changing" {
			seen[ev.GetKind()] = true
		}
	}
	lp, err := h.client.ListPrompts(ctx, &toolmeshv1.ExecutorServiceListPromptsRequest{})
	if err != nil || len(lp.GetPrompts()) != 2 || lp.GetPrompts()[1].GetId() != "changing.second" {
		t.Errorf("prompts after the change: %v, %v", lp.GetPrompts(), err)
	}
}
