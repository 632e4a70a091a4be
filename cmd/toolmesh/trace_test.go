package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/telemetry/jaegertest"
)

// TestOneQueryOneTrace runs the mesh in microservices mode exporting to a real Jaeger v2 and
// checks, through Jaeger's query API, that one question is one trace: spans from all four
// services and the MCP server, each with its parent in the trace, with the GenAI and MCP
// attributes; and that a failing tool call shows as an error span.
func TestOneQueryOneTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	j := jaegertest.Start(t)
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	d.ScriptFunc(func(r llamatest.Request) (llamatest.Reply, bool) {
		calls := strings.Count(r.Prompt, "<<call>>")
		switch {
		case r.Grammar == "":
			return llamatest.Reply{Pieces: []string{"Done."}}, true
		case calls > 0:
			return llamatest.Reply{Pieces: []string{"Done."}}, true
		case strings.Contains(r.Prompt, "What is 2 plus 3?"):
			return llamatest.Reply{Pieces: []string{"<<function>>calculator.add(a=2, b=3)"}}, true
		case strings.Contains(r.Prompt, "Divide 1 by 0."):
			return llamatest.Reply{Pieces: []string{"<<function>>calculator.divide(a=1, b=0)"}}, true
		}
		return llamatest.Reply{}, false
	})
	bin := buildBinary(t)
	calc := freeAddr(t)
	exe, ret, inf, api, rest := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	doc := fmt.Sprintf(`{"mcpServers": {"calculator": {"url": "http://%s/mcp", "transport": "streamable-http"}}}`, calc)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	// Spans leave in batches: a short delay keeps the test quick.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	otel := "--otel.endpoint=" + j.OTLPEndpoint
	start(t, bin, "mcp", "calculator", "--transport", "streamable-http", "--addr", calc, otel)
	start(t, bin, "serve", "--target=executor", "--executor.grpc-addr="+exe, "--mcp-config="+cfg, otel)
	start(t, bin, "serve", "--target=retriever", "--retriever.grpc-addr="+ret, "--retriever.executor-addr="+exe, otel)
	start(t, bin, "serve", "--target=inference", "--inference.grpc-addr="+inf, "--inference.llm.url="+d.URL, otel)
	start(t, bin, "serve", "--target=api", "--api.http-addr="+rest, "--api.grpc-addr="+api,
		"--api.executor-addr="+exe, "--api.retriever-addr="+ret, "--api.inference-addr="+inf,
		// Questions go to the model at once: ready means the inference process answers too.
		"--api.ready-needs-inference", otel)
	base := "http://" + rest
	waitReady(t, base)

	services := []string{"toolmesh-api", "toolmesh-retriever", "toolmesh-inference", "toolmesh-executor", "mcp-calculator"}
	ask := func(question string) jaegertest.Trace {
		t.Helper()
		q, _ := json.Marshal(question)
		b := postJSON(t, base+"/v1/query", `{"query":`+string(q)+`}`, http.StatusOK)
		id, _ := b["trace_id"].(string)
		if len(id) != 32 {
			t.Fatalf("query response trace_id = %q", id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tr, err := j.WaitTrace(ctx, id, func(tr jaegertest.Trace) bool {
			got := tr.Services()
			for _, s := range services {
				if !slices.Contains(got, s) {
					return false
				}
			}
			if len(tr.Named("tools/call add")) < 2 && len(tr.Named("tools/call divide")) < 2 {
				return false
			}
			// Processes export in their own batches, and the api's last one holds the root
			// span: until every parent has arrived, the trace is still coming in.
			for _, s := range tr.Spans {
				if _, ok := tr.Span(s.ParentSpanID); s.ParentSpanID != "" && !ok {
					return false
				}
			}
			return true
		})
		if err != nil {
			t.Fatalf("trace %s never held spans of %v: %v\n%s", id, services, err, tr)
		}
		return tr
	}

	tr := ask("What is 2 plus 3?")
	// Every span but the root has its parent in the same trace.
	roots := 0
	for _, s := range tr.Spans {
		if s.ParentSpanID == "" {
			roots++
			continue
		}
		if _, ok := tr.Span(s.ParentSpanID); !ok {
			t.Errorf("span %q (%s) has a parent %s outside the trace", s.Name, s.Service, s.ParentSpanID)
		}
	}
	if roots != 1 {
		t.Errorf("%d root spans, want 1:\n%s", roots, tr)
	}
	one := func(name, service string) jaegertest.Span {
		t.Helper()
		for _, s := range tr.Spans {
			// A name ending in "*" matches by prefix (the retrieval span names the embedder's id).
			if s.Service == service && (s.Name == name || strings.HasSuffix(name, "*") && strings.HasPrefix(s.Name, strings.TrimSuffix(name, "*"))) {
				return s
			}
		}
		t.Fatalf("no span %q from %s in:\n%s", name, service, tr)
		return jaegertest.Span{}
	}
	agent := one("invoke_agent toolmesh", "toolmesh-api")
	step1 := one("step 1", "toolmesh-api")
	if step1.ParentSpanID != agent.SpanID {
		t.Errorf("step 1's parent is %s, want invoke_agent %s", step1.ParentSpanID, agent.SpanID)
	}
	one("step 2", "toolmesh-api")
	want := []struct {
		name, service string
		attrs         map[string]any
	}{
		{"invoke_agent toolmesh", "toolmesh-api", map[string]any{"gen_ai.operation.name": "invoke_agent", "toolmesh.query.stop_reason": "answered"}},
		{"execute_tool calculator.add", "toolmesh-api", map[string]any{"gen_ai.tool.name": "calculator.add"}},
		{"retrieval memory/lexical-v1*", "toolmesh-retriever", map[string]any{"gen_ai.operation.name": "retrieval", "gen_ai.request.top_k": int64(4)}},
		{"chat gorilla-openfunctions-v2", "toolmesh-inference", map[string]any{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "llama.cpp",
			"gen_ai.request.model": "gorilla-openfunctions-v2", "toolmesh.llm.grammar": true}},
		{"tools/call add", "toolmesh-executor", map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "add", "network.transport": "tcp"}},
		{"tools/call add", "mcp-calculator", map[string]any{"mcp.method.name": "tools/call", "gen_ai.tool.name": "add"}},
	}
	for _, w := range want {
		s := one(w.name, w.service)
		for k, v := range w.attrs {
			if s.Attributes[k] != v {
				t.Errorf("%s (%s): %s = %v, want %v", w.name, w.service, k, s.Attributes[k], v)
			}
		}
	}
	for _, s := range tr.Named("chat gorilla-openfunctions-v2") {
		if in, _ := s.Attributes["gen_ai.usage.input_tokens"].(int64); in <= 0 {
			t.Errorf("chat span without input tokens: %v", s.Attributes)
		}
	}
	// The MCP server continued the executor's trace from params._meta.
	client, server := one("tools/call add", "toolmesh-executor"), one("tools/call add", "mcp-calculator")
	if p, ok := tr.Span(server.ParentSpanID); !ok || (p.SpanID != client.SpanID && p.Service != "toolmesh-executor") {
		t.Errorf("the MCP server span's parent is %v, want the executor's tools/call span", p)
	}
	// Arguments and results are not recorded by default.
	for _, s := range tr.Spans {
		if _, ok := s.Attributes["gen_ai.tool.call.arguments"]; ok {
			t.Errorf("span %s (%s) records tool arguments without --otel.record-payloads", s.Name, s.Service)
		}
	}

	tr = ask("Divide 1 by 0.")
	for _, w := range []struct{ name, service string }{
		{"execute_tool calculator.divide", "toolmesh-api"},
		{"tools/call divide", "toolmesh-executor"},
		{"tools/call divide", "mcp-calculator"},
	} {
		s := one(w.name, w.service)
		if s.Status.Code != "Error" || s.Attributes["error.type"] != "tool_error" {
			t.Errorf("%s (%s): status %v, error.type %v; want Error, tool_error", w.name, w.service, s.Status, s.Attributes["error.type"])
		}
	}
}
