package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/audit"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/server"
)

// TestAuditTrail makes 1,000 mixed calls through every front of a whole mesh (REST, gRPC, the
// MCP face, a direct query, the agent loop, chat completions; calls refused by a token's scope,
// calls of a tool that does not exist) with --audit.file set: each writes exactly one record
// naming its front, origin, token and decision, and the trail verifies.
func TestAuditTrail(t *testing.T) {
	const ci, narrow, probe = "ci-token-0123456789abcdef", "narrow-token-0123456789abcdef", "probe-token-0123456789abcdef"
	t.Setenv("TOOLMESH_API_TOKENS", "ci:"+ci+",narrow:"+narrow+",probe:"+probe)
	dir := t.TempDir()
	file := filepath.Join(dir, "audit.jsonl")
	cfg := filepath.Join(dir, "toolmesh.yaml")
	if err := os.WriteFile(cfg, []byte("policy:\n  tokens:\n    ci: {call: [\"*\"], list: [\"*\"], query: true}\n    narrow: {call: [converter]}\n    probe: {list: [\"*\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr := freeAddr(t)
	m := startMeshToken(t, probe, "--config="+cfg, "--audit.file="+file, "--audit.max-bytes=65536", "--api.grpc-addr="+grpcAddr)
	chatScripts(m)
	base := m.base
	waitMCPTools(t, base+"/mcp", ci, "calculator__add")

	conn, err := grpc.NewClient(grpcAddr, server.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tools := toolmeshv1.NewToolServiceClient(conn)
	gctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+ci)
	face := mcpClient(t, base+"/mcp", mcp.LATEST_PROTOCOL_VERSION, ci)
	model := modelNameAs(t, base, ci)

	type kind struct{ via, origin, token, decision, tool string }
	var want []kind
	for i := range 1000 {
		switch i % 8 {
		case 0:
			if code, b := do(t, ci, http.MethodPost, base+"/v1/tools/calculator/add:call", `{"arguments":{"a":2,"b":3}}`); code != 200 {
				t.Fatalf("REST call: %d %s", code, b)
			}
			want = append(want, kind{"rest", "call", "ci", "allowed", "calculator.add"})
		case 1:
			args, _ := structpb.NewStruct(map[string]any{"a": i, "b": 1})
			if _, err := tools.CallTool(gctx, &toolmeshv1.CallToolRequest{Server: "calculator", Name: "add", Arguments: args}); err != nil {
				t.Fatalf("gRPC call: %v", err)
			}
			want = append(want, kind{"grpc", "call", "ci", "allowed", "calculator.add"})
		case 2:
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = "calculator__add", map[string]any{"a": 1, "b": 2}
			if res, err := face.CallTool(context.Background(), req); err != nil || res.IsError {
				t.Fatalf("MCP call: %v %v", res, err)
			}
			want = append(want, kind{"mcp", "call", "ci", "allowed", "calculator.add"})
		case 3:
			if code, b := do(t, ci, http.MethodPost, base+"/v1/query", `{"query":"@calculator.multiply({\"a\":2,\"b\":3})"}`); code != 200 {
				t.Fatalf("direct query: %d %s", code, b)
			}
			want = append(want, kind{"rest", "query", "ci", "allowed", "calculator.multiply"})
		case 4:
			if code, b := do(t, ci, http.MethodPost, base+"/v1/query", `{"query":"What is 2 plus 3?"}`); code != 200 {
				t.Fatalf("question: %d %s", code, b)
			}
			want = append(want, kind{"rest", "model", "ci", "allowed", "calculator.add"})
		case 5:
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"What is 2 plus 3?"}]}`, model)
			if code, b := do(t, ci, http.MethodPost, base+"/v1/chat/completions", body); code != 200 {
				t.Fatalf("chat: %d %s", code, b)
			}
			want = append(want, kind{"chat", "model", "ci", "allowed", "calculator.add"})
		case 6:
			if code, b := do(t, narrow, http.MethodPost, base+"/v1/tools/calculator/add:call", `{"arguments":{"a":2,"b":3}}`); code != 403 {
				t.Fatalf("refused call: %d %s", code, b)
			}
			want = append(want, kind{"rest", "call", "narrow", "denied", "calculator.add"})
		case 7:
			if code, b := do(t, ci, http.MethodPost, base+"/v1/tools/calculator/nope:call", `{}`); code != 404 {
				t.Fatalf("unknown tool: %d %s", code, b)
			}
			want = append(want, kind{"rest", "call", "ci", "allowed", "calculator.nope"})
		}
	}
	files, err := audit.Files(file)
	if err != nil {
		t.Fatal(err)
	}
	var got []kind
	eventually.Check(t, 10*time.Second, "every record written", func() string {
		got = got[:0]
		for _, f := range files {
			data, _ := os.ReadFile(f)
			for l := range bytes.Lines(data) {
				var r map[string]any
				if json.Unmarshal(l, &r) != nil || r["type"] != "call" {
					continue
				}
				s := func(k string) string { v, _ := r[k].(string); return v }
				got = append(got, kind{s("via"), s("origin"), s("token"), s("decision"), s("tool")})
			}
		}
		if files, _ = audit.Files(file); len(got) < len(want) {
			return fmt.Sprintf("%d of %d records", len(got), len(want))
		}
		return ""
	})
	count := func(ks []kind) map[kind]int {
		m := map[kind]int{}
		for _, k := range ks {
			m[k]++
		}
		return m
	}
	if g, w := count(got), count(want); len(got) != len(want) || fmt.Sprint(g) != fmt.Sprint(w) {
		t.Errorf("records by kind %v (%d), want %v (%d)", g, len(got), w, len(want))
	}
	files, err = audit.Files(file)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Verify(files, nil)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	var lines int
	for _, f := range files {
		data, _ := os.ReadFile(f)
		lines += bytes.Count(data, []byte("\n"))
	}
	// Besides the calls and a start record per file: the executor's pin events (the demo's
	// tools first seen).
	if len(files) < 2 || rep.Records != lines || lines < 1000+len(files) {
		t.Errorf("%d files (rotated at 64 KiB) holding %d lines, %d verified; want several, every line verified", len(files), lines, rep.Records)
	}
}
