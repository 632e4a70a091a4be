package executor

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// TestEverythingServer runs the official reference server
// @modelcontextprotocol/server-everything over stdio and streamable HTTP.
func TestEverythingServer(t *testing.T) {
	paths := testbackend.Everything.Need(t)
	node, entry := paths[0], paths[1]
	cases := []struct {
		name  string
		setup func(t *testing.T) mcpconfig.Server
	}{
		{"stdio", func(t *testing.T) mcpconfig.Server {
			return mcpconfig.Server{Transport: mcpconfig.TransportStdio, Command: node, Args: []string{entry, "stdio"}}
		}},
		{"streamable-http", func(t *testing.T) mcpconfig.Server {
			port := freePort(t)
			cmd := exec.Command(node, entry, "streamableHttp")
			cmd.Env = append(childEnv(nil), "PORT="+strconv.Itoa(port))
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				_ = cmd.Wait()
			})
			addr := "127.0.0.1:" + strconv.Itoa(port)
			deadline := time.Now().Add(15 * time.Second)
			for {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					c.Close()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("server-everything did not listen on %s", addr)
				}
				time.Sleep(50 * time.Millisecond)
			}
			return mcpconfig.Server{Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + addr + "/mcp"}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.setup(t)
			h := startExecutor(t, Config{ConnectTimeout: 20 * time.Second, Servers: map[string]mcpconfig.Server{"everything": srv}})
			h.waitReady(t)

			lt, err := h.client.ListTools(context.Background(), &toolmeshv1.ExecutorServiceListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]*toolmeshv1.Tool{}
			for _, tool := range lt.GetTools() {
				ids[tool.GetId()] = tool
			}
			for _, want := range []string{"everything.echo", "everything.get-sum"} {
				if ids[want] == nil {
					t.Fatalf("tool %s missing; have %d tools", want, len(ids))
				}
			}
			if a := ids["everything.get-sum"].GetAnnotations(); a == nil || !a.GetReadOnlyHint() {
				t.Errorf("get-sum annotations = %v", a)
			}
			r, err := call(t, h, "everything.echo", map[string]any{"message": "hi there"})
			if err != nil || !strings.Contains(text(r), "hi there") {
				t.Fatalf("echo: %v %v", r, err)
			}
			r, err = call(t, h, "everything.get-sum", map[string]any{"a": 2, "b": 40})
			if err != nil || !strings.Contains(text(r), "42") {
				t.Fatalf("get-sum: %v %v", r, err)
			}
			_, err = call(t, h, "everything.get-sum", map[string]any{"a": "two", "b": 40})
			wantCode(t, err, codes.InvalidArgument, "arguments.a")

			// Progress: the server sends a report after each step, before its result; the
			// last one always comes through.
			args, _ := structpb.NewStruct(map[string]any{"duration": 0.3, "steps": 3})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := h.client.CallToolStream(ctx, &toolmeshv1.ExecutorServiceCallToolStreamRequest{
				Call: &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "everything.trigger-long-running-operation", Arguments: args}})
			if err != nil {
				t.Fatal(err)
			}
			progress, result, err := collect(t, st)
			if err != nil || !strings.Contains(text(result), "completed") {
				t.Fatalf("long running operation: %v %v", result, err)
			}
			if len(progress) == 0 || progress[len(progress)-1].GetProgress() != 3 || progress[len(progress)-1].GetTotal() != 3 {
				t.Fatalf("progress %v, want growing reports ending at 3 of 3", progress)
			}
			for i := 1; i < len(progress); i++ {
				if progress[i].GetProgress() <= progress[i-1].GetProgress() {
					t.Errorf("progress went from %v to %v", progress[i-1], progress[i])
				}
			}

			ls, _ := h.client.ListServers(context.Background(), &toolmeshv1.ExecutorServiceListServersRequest{})
			t.Logf("server-everything: %v", ls.GetServers()[0])
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
