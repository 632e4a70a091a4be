package app

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// promptsMesh runs the mesh with the reference server-everything (over stdio) beside the demo
// servers, its prompt and resource rules leaving out simple-prompt and instructions.md, its
// results bounded to 4 KiB, and three tokens: root (everything), every (the server
// everything whole) and calc (calculator only). It returns the mesh and its api's gRPC address.
func promptsMesh(t *testing.T) (*mesh, string, [3]string) {
	t.Helper()
	paths := testbackend.Everything.Need(t)
	tokens := [3]string{"root-token-0123456789abcdef", "every-token-0123456789abcdef", "calc-token-0123456789abcdef"}
	t.Setenv("TOOLMESH_API_TOKENS", "root:"+tokens[0]+",every:"+tokens[1]+",calc:"+tokens[2])
	args, _ := json.Marshal([]string{paths[1], "stdio"})
	doc := `mcpServers:
  everything:
    command: ` + paths[0] + `
    args: ` + string(args) + `
    excludedPrompts: ["simple-prompt"]
    excludedResources: ["demo://resource/static/document/instructions.md"]
    maxResultBytes: 4096
policy:
  tokens:
    root: {call: ["*"]}
    every: {call: [everything]}
    calc: {call: [calculator]}
`
	cfg := filepath.Join(t.TempDir(), "toolmesh.yaml")
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr := freeAddr(t)
	m := startMeshToken(t, tokens[0], "--config="+cfg, "--api.grpc-addr="+grpcAddr)
	// A stdio server takes a Node start.
	waitMCPTools(t, m.base+"/mcp", tokens[0], "everything__get-sum")
	return m, grpcAddr, tokens
}

// TestPromptsAndResources gets server-everything's prompts and reads its resources through
// REST and gRPC, as each token may.
func TestPromptsAndResources(t *testing.T) {
	m, grpcAddr, tokens := promptsMesh(t)
	root, every, calc := tokens[0], tokens[1], tokens[2]

	cases := []struct {
		name, token, method, path, body string
		code                            int
		want, notWant                   []string
	}{
		{name: "list prompts", token: every, method: "GET", path: "/v1/prompts", code: 200,
			want:    []string{`"id":"everything.args-prompt"`, `"name":"city"`, `"required":true`},
			notWant: []string{"simple-prompt"}},
		{name: "get a prompt with arguments", token: every, method: "POST", path: "/v1/prompts/everything/args-prompt:get",
			body: `{"arguments":{"city":"Paris","state":"Texas"}}`, code: 200,
			want: []string{`"role":"user"`, `What's weather in Paris, Texas?`}},
		{name: "an excluded prompt is not there", token: root, method: "POST", path: "/v1/prompts/everything/simple-prompt:get", body: `{}`, code: 404,
			want: []string{`prompt \"simple-prompt\" of server \"everything\" not found`}, notWant: []string{"excludedPrompts"}},
		{name: "list resources", token: every, method: "GET", path: "/v1/resources?server=everything", code: 200,
			want: []string{`"uri":"demo://resource/static/document/architecture.md"`}, notWant: []string{"instructions.md"}},
		{name: "list resource templates", token: every, method: "GET", path: "/v1/resources:templates", code: 200,
			want: []string{`"uri_template":"demo://resource/dynamic/text/{resourceId}"`}},
		{name: "read a text resource", token: every, method: "GET", path: "/v1/resources/everything:read?uri=demo%3A%2F%2Fresource%2Fdynamic%2Ftext%2F3", code: 200,
			want: []string{`"text":"Resource 3: This is a plaintext resource`}},
		{name: "read a binary resource", token: every, method: "GET", path: "/v1/resources/everything:read?uri=demo://resource/dynamic/blob/3", code: 200,
			want: []string{`"blob":"` + base64.StdEncoding.EncodeToString([]byte("Resource 3: This is a base64 blob"))[:40]}},
		{name: "an excluded resource is not there", token: root, method: "GET", path: "/v1/resources/everything:read?uri=demo://resource/static/document/instructions.md", code: 404,
			notWant: []string{"excludedResources"}},
		{name: "nor listed", token: root, method: "GET", path: "/v1/resources", code: 200,
			want: []string{"architecture.md"}, notWant: []string{"instructions.md"}},
		{name: "an oversized resource is refused saying why", token: every, method: "GET", path: "/v1/resources/everything:read?uri=demo://resource/static/document/structure.md", code: 502,
			want: []string{`over the 4096-byte limit (mcpServers.everything.maxResultBytes)`, "TOOL_RESULT_TOO_LARGE"}},
		{name: "a scoped token sees none of another server's prompts", token: calc, method: "GET", path: "/v1/prompts", code: 200,
			notWant: []string{"everything"}},
		{name: "nor its resources", token: calc, method: "GET", path: "/v1/resources", code: 200,
			notWant: []string{"everything"}},
		{name: "nor by name", token: calc, method: "GET", path: "/v1/prompts?server=everything", code: 404,
			want: []string{`unknown server \"everything\"`}},
		{name: "nor gets them", token: calc, method: "POST", path: "/v1/prompts/everything/args-prompt:get", body: `{"arguments":{"city":"Paris"}}`, code: 404},
		{name: "nor reads them", token: calc, method: "GET", path: "/v1/resources/everything:read?uri=demo://resource/dynamic/text/3", code: 404},
		{name: "a read names its uri", token: every, method: "GET", path: "/v1/resources/everything:read", code: 400,
			want: []string{"uri: is required"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, b := do(t, tc.token, tc.method, m.base+tc.path, tc.body)
			if code != tc.code {
				t.Errorf("%s %s: %d %.600s; want %d", tc.method, tc.path, code, b, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("body %.600s; want it to contain %q", b, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(string(b), w) {
					t.Errorf("body %.600s; want no %q", b, w)
				}
			}
		})
	}

	t.Run("grpc", func(t *testing.T) {
		conn, err := grpc.NewClient(grpcAddr, server.DialOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		as := func(token string) context.Context {
			return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		prompts := toolmeshv1.NewPromptServiceClient(conn)
		got, err := prompts.GetPrompt(as(every), &toolmeshv1.GetPromptRequest{Server: "everything", Name: "args-prompt", Arguments: map[string]string{"city": "Oslo"}})
		if err != nil || len(got.GetMessages()) != 1 || got.GetMessages()[0].GetContent().GetText() != "What's weather in Oslo?" {
			t.Errorf("GetPrompt: %v, %v", got, err)
		}
		resources := toolmeshv1.NewResourceServiceClient(conn)
		read, err := resources.ReadResource(as(every), &toolmeshv1.ReadResourceRequest{Server: "everything", Uri: "demo://resource/dynamic/blob/9"})
		if err != nil || len(read.GetContents()) != 1 || !strings.HasPrefix(string(read.GetContents()[0].GetBlob()), "Resource 9: This is a base64 blob") {
			t.Errorf("ReadResource: %v, %v", read, err)
		}
		list, err := resources.ListResources(as(calc), &toolmeshv1.ListResourcesRequest{})
		if err != nil || len(list.GetResources()) != 0 {
			t.Errorf("calc's ListResources: %v, %v; want none", list, err)
		}
		if _, err := resources.ReadResource(as(calc), &toolmeshv1.ReadResourceRequest{Server: "everything", Uri: "demo://resource/dynamic/blob/9"}); status.Code(err) != codes.NotFound {
			t.Errorf("calc's ReadResource: %v; want NotFound", err)
		}
	})
}

// TestMCPPromptsAndResources gets server-everything's prompts and reads its resources through
// the MCP endpoints, in both protocol eras, as each token may.
func TestMCPPromptsAndResources(t *testing.T) {
	m, _, tokens := promptsMesh(t)
	every, calc := tokens[1], tokens[2]
	for _, version := range []string{mcp.LATEST_PROTOCOL_VERSION, "2025-06-18"} {
		t.Run(version, func(t *testing.T) {
			c := mcpClient(t, m.base+"/mcp", version, every)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// The face lists the executor's prompts once the server is up.
			eventually.Check(t, 20*time.Second, "everything__args-prompt on /mcp", func() string {
				ps, err := c.ListPrompts(ctx, mcp.ListPromptsRequest{})
				if err != nil {
					return err.Error()
				}
				for _, p := range ps.Prompts {
					if p.Name == "everything__simple-prompt" {
						t.Errorf("an excluded prompt is listed: %v", p)
					}
					if p.Name == "everything__args-prompt" && len(p.Arguments) == 2 && p.Meta.AdditionalFields["toolmesh/id"] == "everything.args-prompt" {
						return ""
					}
				}
				return fmt.Sprintf("prompts: %v", ps.Prompts)
			})
			req := mcp.GetPromptRequest{}
			req.Params.Name = "everything__args-prompt"
			req.Params.Arguments = map[string]string{"city": "Lima"}
			got, err := c.GetPrompt(ctx, req)
			if err != nil || len(got.Messages) != 1 || got.Messages[0].Content.(mcp.TextContent).Text != "What's weather in Lima?" {
				t.Errorf("prompts/get: %+v, %v", got, err)
			}
			req.Params.Name = "everything__simple-prompt"
			if _, err := c.GetPrompt(ctx, req); err == nil {
				t.Errorf("prompts/get of an excluded prompt: no error")
			}

			rs, err := c.ListResources(ctx, mcp.ListResourcesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for _, r := range rs.Resources {
				if r.URI == "demo://resource/static/document/instructions.md" {
					t.Errorf("an excluded resource is listed")
				}
				if r.URI == "demo://resource/static/document/architecture.md" {
					found = r.Meta != nil && r.Meta.AdditionalFields["toolmesh/server"] == "everything"
				}
			}
			if !found {
				t.Errorf("architecture.md with its server in _meta not listed: %v", rs.Resources)
			}
			ts, err := c.ListResourceTemplates(ctx, mcp.ListResourceTemplatesRequest{})
			if err != nil || len(ts.ResourceTemplates) == 0 {
				t.Errorf("resources/templates/list: %v, %v", ts, err)
			}
			read := func(uri string) (*mcp.ReadResourceResult, error) {
				r := mcp.ReadResourceRequest{}
				r.Params.URI = uri
				return c.ReadResource(ctx, r)
			}
			text, err := read("demo://resource/dynamic/text/5")
			if err != nil || len(text.Contents) != 1 || !strings.HasPrefix(text.Contents[0].(mcp.TextResourceContents).Text, "Resource 5: This is a plaintext resource") {
				t.Errorf("text resource: %+v, %v", text, err)
			}
			blob, err := read("demo://resource/dynamic/blob/5")
			if err != nil || len(blob.Contents) != 1 {
				t.Fatalf("blob resource: %+v, %v", blob, err)
			}
			if b, _ := base64.StdEncoding.DecodeString(blob.Contents[0].(mcp.BlobResourceContents).Blob); !strings.HasPrefix(string(b), "Resource 5: This is a base64 blob") {
				t.Errorf("blob resource: %q", b)
			}
			if _, err := read("demo://resource/static/document/structure.md"); err == nil || !strings.Contains(err.Error(), "over the 4096-byte limit (mcpServers.everything.maxResultBytes)") {
				t.Errorf("oversized resource: %v", err)
			}

			other := mcpClient(t, m.base+"/mcp", version, calc)
			if ps, err := other.ListPrompts(ctx, mcp.ListPromptsRequest{}); err != nil || len(ps.Prompts) != 0 {
				t.Errorf("calc's prompts: %v, %v; want none", ps, err)
			}
			if rs, err := other.ListResources(ctx, mcp.ListResourcesRequest{}); err != nil || len(rs.Resources) != 0 {
				t.Errorf("calc's resources: %v, %v; want none", rs, err)
			}
			r := mcp.ReadResourceRequest{}
			r.Params.URI = "demo://resource/dynamic/text/5"
			if _, err := other.ReadResource(ctx, r); err == nil {
				t.Errorf("calc read everything's resource")
			}
			if _, err := other.GetPrompt(ctx, mcp.GetPromptRequest{Params: mcp.GetPromptParams{Name: "everything__args-prompt", Arguments: map[string]string{"city": "Lima"}}}); err == nil {
				t.Errorf("calc got everything's prompt")
			}

			one := mcpClient(t, m.base+"/mcp/servers/everything", version, every)
			ps, err := one.ListPrompts(ctx, mcp.ListPromptsRequest{})
			if err != nil || !slices.ContainsFunc(ps.Prompts, func(p mcp.Prompt) bool { return p.Name == "args-prompt" }) {
				t.Errorf("/mcp/servers/everything prompts: %v, %v", ps, err)
			}
		})
	}
}

// TestMCPPromptsListChanged: a server that adds a prompt reaches an MCP client of the mesh as
// notifications/prompts/list_changed, and the new prompt is listed.
func TestMCPPromptsListChanged(t *testing.T) {
	srv := mcpserver.NewMCPServer("changing", "0.1.0", mcpserver.WithToolCapabilities(true), mcpserver.WithPromptCapabilities(true))
	srv.AddTool(mcp.NewTool("noop"), constText("ok"))
	empty := func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return mcp.NewGetPromptResult("", []mcp.PromptMessage{mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent("hi"))}), nil
	}
	srv.AddPrompt(mcp.NewPrompt("first"), empty)
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	doc, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"changing": map[string]any{"url": serveMCP(t, srv)}}})
	if err := os.WriteFile(cfg, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	m := startMeshToken(t, "", "--mcp-config="+cfg, "--api.mcp-list-changed-delay=50ms")
	waitMCPTools(t, m.base+"/mcp", "", "changing__noop")

	c := mcpClient(t, m.base+"/mcp", "2025-06-18", "")
	changed := make(chan struct{}, 8)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == mcp.MethodNotificationPromptsListChanged {
			changed <- struct{}{}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listed := func() []string {
		ps, err := c.ListPrompts(ctx, mcp.ListPromptsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range ps.Prompts {
			names = append(names, p.Name)
		}
		return names
	}
	eventually.Check(t, 10*time.Second, "changing__first listed", func() string {
		if got := listed(); !slices.Contains(got, "changing__first") {
			return fmt.Sprint(got)
		}
		return ""
	})
	srv.AddPrompt(mcp.NewPrompt("second"), empty)
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no notifications/prompts/list_changed after the server added a prompt")
	}
	if got := listed(); !slices.Contains(got, "changing__second") {
		t.Errorf("after the change: %v", got)
	}
}
