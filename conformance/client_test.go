package conformance

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// newAddServer serves an MCP server with the tools_call scenario's tool over
// streamable HTTP, recording the arguments it is called with.
func newAddServer(t *testing.T) (url string, calls chan map[string]any) {
	t.Helper()
	calls = make(chan map[string]any, 4)
	s := server.NewMCPServer("conformance-test", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("add_numbers",
		mcp.WithNumber("a", mcp.Required()),
		mcp.WithNumber("b", mcp.Required()),
	), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls <- req.GetArguments()
		return mcp.NewToolResultText("8"), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp", calls
}

// TestRunClient runs the client command's code against an in-process
// server, so the client is tested even where the suite is not installed.
func TestRunClient(t *testing.T) {
	for _, version := range []string{"", "2025-11-25", "2026-07-28"} {
		t.Run("version="+version, func(t *testing.T) {
			url, calls := newAddServer(t)
			var out bytes.Buffer
			err := RunClient(context.Background(), ClientOptions{
				URL: url, Scenario: "tools_call", ProtocolVersion: version, Out: &out, Timeout: 20 * time.Second,
			})
			if err != nil {
				t.Fatalf("RunClient: %v\n%s", err, out.String())
			}
			select {
			case args := <-calls:
				if want := map[string]any{"a": 5.0, "b": 3.0}; !reflect.DeepEqual(args, want) {
					t.Errorf("add_numbers got %v, want %v", args, want)
				}
			default:
				t.Fatalf("add_numbers was not called; output:\n%s", out.String())
			}
			if !strings.Contains(out.String(), "tool conformance.add_numbers") {
				t.Errorf("output does not list the tool:\n%s", out.String())
			}
		})
	}
}

func TestMainExitCodes(t *testing.T) {
	var stdout, stderr bytes.Buffer
	getenv := func(string) string { return "" }
	if got := Main(context.Background(), nil, getenv, &stdout, &stderr); got != 2 {
		t.Errorf("Main without a URL: got exit %d, want 2", got)
	}
	// Nothing listens on port 1: the connection fails at once, and the
	// client says so instead of retrying until its timeout.
	start := time.Now()
	if got := Main(context.Background(), []string{"http://127.0.0.1:1/mcp"}, getenv, &stdout, &stderr); got != 1 {
		t.Errorf("Main against a closed port: got exit %d, want 1", got)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Main against a closed port took %s", d)
	}
	if !strings.Contains(stderr.String(), "toolmesh-conformance: connect") {
		t.Errorf("stderr does not say the connection failed:\n%s", stderr.String())
	}
}

func TestPlan(t *testing.T) {
	focal, _ := structpb.NewStruct(map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"})
	needs, _ := structpb.NewStruct(map[string]any{
		"type":       "object",
		"properties": map[string]any{"region": map[string]any{"type": "string"}, "n": map[string]any{"type": "integer"}, "opt": map[string]any{"type": "boolean"}},
		"required":   []any{"region", "n"},
	})
	tools := []*toolmeshv1.Tool{
		{Name: "json_schema_2020_12_tool", InputSchema: focal},
		{Name: "valid_tool", InputSchema: needs},
	}
	tests := []struct {
		scenario, context string
		want              []toolCall
		wantErr           bool
	}{
		{scenario: "initialize"},
		{scenario: "tools_call", want: []toolCall{{Name: "add_numbers", Arguments: map[string]any{"a": 5, "b": 3}}}},
		{scenario: "http-custom-headers", context: `{"name":"http-custom-headers","toolCalls":[{"name":"x","arguments":{"v":null}}]}`,
			want: []toolCall{{Name: "x", Arguments: map[string]any{"v": nil}}}},
		{scenario: "json-schema-2020-12-preservation",
			want: []toolCall{{Name: "json_schema_echo", Arguments: map[string]any{"schema": focal.AsMap()}}}},
		{scenario: "http-invalid-tool-headers", want: []toolCall{
			{Name: "json_schema_2020_12_tool", Arguments: map[string]any{}},
			{Name: "valid_tool", Arguments: map[string]any{"region": "conformance", "n": 1}},
		}},
		{scenario: "auth/metadata-default", wantErr: true},
		{scenario: "x", context: "{not json", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			got, err := plan(tt.scenario, tt.context, tools)
			if (err != nil) != tt.wantErr {
				t.Fatalf("plan: got error %v, want error %v", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("plan: got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestLoadExpectations(t *testing.T) {
	dir := t.TempDir()
	write := func(text string) string {
		f := filepath.Join(dir, "x.txt")
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	xs, err := loadExpectations(write("# comment\n\nclient/2026-07-28/a  why a\nserver/*/*/b#c-* why b\nflaky server/x/v/s#d why d\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(xs) != 3 || xs[0].reason != "why a" || xs[1].line != 4 || xs[1].check != "c-*" || !xs[2].flaky || xs[2].check != "d" {
		t.Fatalf("got %+v", xs)
	}
	got := xs.forScenario("server/calculator/2025-11-25/b")
	if len(got) != 1 || got[0] != xs[1] {
		t.Fatalf("forScenario(server/calculator/2025-11-25/b): got %v, want line 4", got)
	}
	if x := covering(got, "c-1"); x != xs[1] {
		t.Errorf("covering c-1: got %v, want line 4", x)
	}
	if x := covering(got, "other"); x != nil {
		t.Errorf("covering other: got %v, want none", x)
	}
	if x := covering(xs.forScenario("client/2026-07-28/a"), "anything"); x != xs[0] {
		t.Errorf("a scenario entry covers every check: got %v", x)
	}
	if got := xs.forScenario("server/calculator/2025-11-25/bb"); len(got) != 0 {
		t.Errorf("forScenario(.../bb): got %v, want none", got)
	}
	for _, bad := range []string{
		"client/x/y\n",                    // no reason
		"other/x why\n",                   // not client/ or server/
		"client/[ why\n",                  // bad pattern
		"client/a r\nclient/a r\n",        // twice
		"flaky client/a whole scenario\n", // flaky without a check
	} {
		if _, err := loadExpectations(write(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// The real file parses.
	if _, err := loadExpectations(expectedFailuresFile); err != nil {
		t.Error(err)
	}
}

func TestReadResults(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"server-tools-list-2026-12-02T16-33-50-947Z", "auth/metadata-var1-2026-12-02T16-31-55-657Z"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "checks.json"), []byte(`[{"id":"c","status":"SUCCESS"}]`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readResults(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tools-list", "auth/metadata-var1"} {
		if r, ok := got[name]; !ok || len(r.checks) != 1 || r.checks[0].Status != "SUCCESS" {
			t.Errorf("%s: got %+v", name, r)
		}
	}
}
