package main

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

// runBin runs the binary and returns its exit code and combined output.
func runBin(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestUpNames: the names a user types wrong or in another form (issue 31 items 6 and 9): a
// server that does not exist is a 400 naming the servers there are, closest first, wherever a
// request names servers; the CLI takes the MCP endpoints' SERVER__TOOL names, and says "did you
// mean" for a tool, a flag or a command it does not know; the MCP endpoints' serverInfo.version
// is what `toolmesh version` says.
func TestUpNames(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinary(t)
	_, base := startUp(t, bin)

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a typo in query --server", []string{"query", "--server", "calculatr", `@calculator.add({"a":2,"b":3})`}, 1,
			`servers[0]: unknown server "calculatr" (the servers: calculator, `},
		{"a typo in tools --server", []string{"tools", "--server", "calculatr"}, 1, `unknown server "calculatr" (the servers: calculator, `},
		{"the MCP endpoints' name of a tool", []string{"call", "calculator__add", "a=2", "b=3"}, 0, "5"},
		{"a typo in a tool", []string{"call", "calculator.ad", "a=2", "b=3"}, 1, `unknown tool "calculator.ad" (HTTP 404); did you mean calculator.add?`},
		{"a typo in an MCP name", []string{"call", "calculator__ad"}, 2, "did you mean calculator.add?"},
		{"a typo in a flag", []string{"tools", "--sever", "calculator"}, 2, "flag provided but not defined: -sever (did you mean --server?)"},
		{"a typo in a command", []string{"tool"}, 2, `unknown command "tool" (did you mean "tools"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if args[0] != "tool" {
				args = append(args, "--api", base)
			}
			code, out := runBin(t, bin, args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("toolmesh %s: exit %d, output %q; want exit %d and %q", strings.Join(tc.args, " "), code, out, tc.code, tc.want)
			}
		})
	}

	t.Run("a typo in connect --server", func(t *testing.T) {
		cmd := exec.Command(bin, "connect", "--server", "calculatr", "--api", base)
		cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n")
		out, err := cmd.Output()
		var m struct {
			Error struct{ Message string } `json:"error"`
		}
		if err != nil || json.Unmarshal(out, &m) != nil || !strings.Contains(m.Error.Message, `no MCP server "calculatr" (the servers: calculator, `) {
			t.Errorf("toolmesh connect --server calculatr: %v, %s", err, out)
		}
	})

	t.Run("the MCP endpoints report the version toolmesh version says", func(t *testing.T) {
		var v struct{ Version string }
		out, err := exec.Command(bin, "version", "--json").Output()
		if err != nil || json.Unmarshal(out, &v) != nil || v.Version == "" {
			t.Fatalf("toolmesh version --json: %v\n%s", err, out)
		}
		c, err := client.NewStreamableHttpClient(base + "/mcp")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := mcp.InitializeRequest{}
		req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
		req.Params.ClientInfo = mcp.Implementation{Name: "names-test", Version: "1"}
		res, err := c.Initialize(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.ServerInfo.Version != v.Version {
			t.Errorf("serverInfo.version = %q, toolmesh version says %q", res.ServerInfo.Version, v.Version)
		}
	})

	t.Run("a typo in a request's servers is a 400", func(t *testing.T) {
		b := postJSON(t, base+"/v1/query", `{"query":"What is 2 plus 3?","servers":["converter","sqlit"]}`, 400)
		if msg, _ := b["message"].(string); !strings.HasPrefix(msg, `servers[1]: unknown server "sqlit" (the servers: sqlite, `) {
			t.Errorf("message %q", msg)
		}
		c := postJSON(t, base+"/v1/chat/completions", `{"model":"gorilla-openfunctions-v2","messages":[{"role":"user","content":"What is 2 plus 3?"}],"toolmesh":{"servers":["calculatr"]}}`, 400)
		e, _ := c["error"].(map[string]any)
		if e["param"] != "toolmesh.servers[0]" || !strings.Contains(e["message"].(string), `unknown server "calculatr" (the servers: calculator, `) {
			t.Errorf("chat completion error %v", e)
		}
	})
}

// TestConnectMeshDown: `toolmesh connect` with nothing at --api answers each request with an
// error that says what to do and logs it once (issue 31 item 10).
func TestConnectMeshDown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinary(t)
	api := "http://" + freeAddr(t)
	cmd := exec.Command(bin, "connect", "--api", api)
	cmd.Stdin = strings.NewReader(strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"resources/list"}`,
	}, "\n") + "\n")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("toolmesh connect: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("stdout = %q, want an answer to each of the 3 requests", out)
	}
	want := "cannot reach " + api + "/mcp (connect: connection refused): is `toolmesh up` running?"
	for _, l := range lines {
		var m struct {
			Error struct{ Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil || !strings.Contains(m.Error.Message, want) {
			t.Errorf("answer %q does not say %q", l, want)
		}
	}
	if n := strings.Count(stderr.String(), "level=WARN"); n != 1 || !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr has %d WARN lines, want one saying %q:\n%s", n, want, stderr.String())
	}
}

// TestPortInUse: `up` and `serve` on an address another process holds say which flag moves it
// (issue 31 item 10).
func TestPortInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := buildBinary(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	held := lis.Addr().String()
	free := []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--demo.calculator-addr=127.0.0.1:0",
		"--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0"}
	for _, tc := range []struct {
		name, flag string
		args       []string
	}{
		{"up's REST port", "api.http-addr", append([]string{"up"}, free...)},
		{"up's demo server", "demo.sqlite-addr", append([]string{"up"}, free...)},
		{"serve's executor", "executor.grpc-addr", []string{"serve", "--target=executor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, "--"+tc.flag+"="+held)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(cmd.Environ(), modelfetch.EnvDir+"="+t.TempDir())
			done := make(chan struct{})
			var out []byte
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("toolmesh %s did not stop on a port in use within 60 s:\n%s", strings.Join(args, " "), out)
			}
			want := "give --" + tc.flag + " another address"
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "address already in use") || !strings.Contains(string(out), want) {
				t.Errorf("toolmesh %s: %v, output:\n%s\nwant exit 1 saying %q", strings.Join(args, " "), err, out, want)
			}
		})
	}
}
