package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// slowCall is the reference server's long-running tool: 3 s in three steps.
const (
	slowTool = "trigger-long-running-operation"
	slowArgs = `{"duration":3,"steps":3}`
)

// everythingConfig is an mcp.json that runs @modelcontextprotocol/server-everything over stdio.
func everythingConfig(t *testing.T) string {
	t.Helper()
	paths := testbackend.Everything.Need(t)
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	doc, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"everything": map[string]any{"command": paths[0], "args": []string{paths[1], "stdio"}},
	}})
	if err := os.WriteFile(cfg, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// callResult is how a call made during a stop ended.
type callResult struct {
	status int // HTTP status, or 0 for gRPC
	body   string
	err    error
}

// TestDrain stops toolmesh with SIGTERM while a 3 s tool call is in flight, over REST, through
// /v1/query and over gRPC in `up`, and straight to a lone `serve --target=executor`: the call
// answers with its result, and the process then exits on its own, within the drain timeout.
func TestDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	cfg := everythingConfig(t)
	bin := buildBinary(t)
	cases := []struct {
		name  string
		start func(t *testing.T) (*upProcess, func() callResult)
	}{
		{"up, REST call", func(t *testing.T) (*upProcess, func() callResult) {
			p, base := startUp(t, bin, "--mcp-config="+cfg, "--drain-timeout=10s")
			return p, func() callResult {
				return post(base+"/v1/tools/everything/"+slowTool+":call", `{"arguments":`+slowArgs+`}`)
			}
		}},
		{"up, direct query", func(t *testing.T) (*upProcess, func() callResult) {
			p, base := startUp(t, bin, "--mcp-config="+cfg, "--drain-timeout=10s")
			q, _ := json.Marshal("@everything." + slowTool + "(" + slowArgs + ")")
			return p, func() callResult { return post(base+"/v1/query", `{"query":`+string(q)+`}`) }
		}},
		{"up, gRPC call", func(t *testing.T) (*upProcess, func() callResult) {
			addr := freeAddr(t)
			p, _ := startUp(t, bin, "--mcp-config="+cfg, "--drain-timeout=10s", "--api.grpc-addr="+addr)
			return p, func() callResult {
				conn := dial(t, addr)
				res, err := toolmeshv1.NewToolServiceClient(conn).CallTool(context.Background(), &toolmeshv1.CallToolRequest{
					Server: "everything", Name: slowTool, Arguments: slowArguments(t)})
				return callResult{body: fmt.Sprint(res.GetContent()), err: err}
			}
		}},
		{"serve executor alone", func(t *testing.T) (*upProcess, func() callResult) {
			addr := freeAddr(t)
			cmd := start(t, bin, "serve", "--target=executor", "--executor.grpc-addr="+addr, "--mcp-config="+cfg, "--drain-timeout=10s")
			p := &upProcess{cmd: cmd, done: make(chan struct{})}
			go func() { p.err = cmd.Wait(); close(p.done) }()
			conn := dial(t, addr)
			exe := toolmeshv1.NewExecutorServiceClient(conn)
			deadline := time.Now().Add(30 * time.Second)
			for { // until the server is connected and its tools listed
				list, err := exe.ListTools(context.Background(), &toolmeshv1.ExecutorServiceListToolsRequest{Server: "everything"})
				if err == nil && len(list.GetTools()) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the executor listed no tool of server-everything within 30 s: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			return p, func() callResult {
				res, err := exe.CallTool(context.Background(), &toolmeshv1.ExecutorServiceCallToolRequest{
					ToolId: "everything." + slowTool, Arguments: slowArguments(t)})
				return callResult{body: fmt.Sprint(res.GetContent()), err: err}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, call := tc.start(t)
			got := make(chan callResult, 1)
			go func() { got <- call() }()
			time.Sleep(time.Second) // the call is in flight: it takes 3 s
			stopped := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-got:
				if r.err != nil || (r.status != 0 && r.status != http.StatusOK) || !strings.Contains(r.body, "completed") {
					t.Errorf("the call in flight during the stop: status %d, error %v, body %.300s; want its result", r.status, r.err, r.body)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the call in flight did not end within 15 s of the stop")
			}
			select {
			case <-p.done:
				if p.err != nil {
					t.Errorf("toolmesh exited with %v after SIGTERM, want 0", p.err)
				}
				t.Logf("exited %s after SIGTERM", time.Since(stopped).Round(10*time.Millisecond))
				if p.stderr != nil {
					// A clean stop is not a problem: nothing it logs may read like one.
					_, after, _ := strings.Cut(p.stderr.String(), "stopping:")
					for _, line := range strings.Split(after, "\n") {
						if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
							t.Errorf("a clean stop logged: %s", line)
						}
					}
				}
			case <-time.After(12 * time.Second):
				t.Error("toolmesh did not exit within the 10 s drain timeout (+2 s) of SIGTERM")
			}
		})
	}

	t.Run("second signal stops at once", func(t *testing.T) {
		p, base := startUp(t, bin, "--mcp-config="+cfg, "--drain-timeout=30s")
		got := make(chan callResult, 1)
		go func() {
			got <- post(base+"/v1/tools/everything/"+slowTool+":call", `{"arguments":{"duration":20,"steps":2}}`)
		}()
		time.Sleep(time.Second)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		second := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
			if took := time.Since(second); took > 5*time.Second {
				t.Errorf("exited %s after the second SIGTERM, want at once", took)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("toolmesh still running 10 s after a second SIGTERM (its drain timeout is 30 s)")
		}
		if r := <-got; r.err == nil && r.status == http.StatusOK {
			t.Errorf("a 20 s call survived a second SIGTERM: %d %.200s", r.status, r.body)
		}
	})
}

func post(url, body string) callResult {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return callResult{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return callResult{status: resp.StatusCode, body: string(b)}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func slowArguments(t *testing.T) *structpb.Struct {
	t.Helper()
	var m map[string]any
	_ = json.Unmarshal([]byte(slowArgs), &m)
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
