package app

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/tlsfiles/tlstest"
)

// The attacks of issue 16 that a web page, a stray client or a user's own config can make on a
// default install, each as the attacker would send it.

// meshArgs are the flags of every target in one process on free loopback ports.
func meshArgs(extra ...string) []string {
	return append([]string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=http://127.0.0.1:1",
	}, extra...)
}

var allTargets = []string{"demo", "executor", "retriever", "inference", "api"}

// launch loads args like `up` does, lets edit change the config, and runs targets with logger
// (nil discards) until the test ends or stop is called. It returns the app once every listener
// is bound, or the error Run returned before that.
func launch(t *testing.T, args []string, logger *slog.Logger, edit func(*Config), targets ...string) (a *App, stop func(), err error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg Config
	cfg.RegisterFlags(fs)
	cfg.RegisterDemoFlags(fs)
	if err := cfg.Load(fs, args); err != nil {
		t.Fatal(err)
	}
	cfg.Targets = targets
	if edit != nil {
		edit(&cfg)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if a, err = New(cfg, logger); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() { done <- a.Run(ctx, func() { close(started) }) }()
	select {
	case <-started:
	case err := <-done:
		cancel()
		return nil, nil, err
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Error("the app did not stop within 15s")
			}
		})
	}
	t.Cleanup(stop)
	return a, stop, nil
}

// waitReady waits until /readyz says ready (every MCP server connected, the index in step).
func waitReady(t *testing.T, base, token string) {
	t.Helper()
	auth := ""
	if token != "" {
		auth = "Bearer " + token
	}
	eventually.True(t, 60*time.Second, "/readyz ready", func() bool {
		code, _, _ := attack{method: "GET", path: "/readyz", auth: auth}.send(t, base)
		return code == http.StatusOK
	})
}

func endpoint(a *App, name string) string {
	for _, e := range a.Endpoints {
		if e.Name == name {
			return e.Addr
		}
	}
	return ""
}

// attack is one request as a web page or a stray client sends it.
type attack struct {
	name        string
	method      string
	path        string
	host        string // the Host header; "" for the address dialled
	origin      string
	contentType string
	body        string
	auth        string
	fetch       string // Sec-Fetch-Site, -Mode and -Dest, space-separated, as a browser sends them
	want        int
	wantIn      string // in the body
	notIn       string // never in the body
}

func (at attack) send(t *testing.T, base string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var body io.Reader
	if at.body != "" {
		body = strings.NewReader(at.body)
	}
	req, err := http.NewRequestWithContext(ctx, at.method, base+at.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if at.host != "" {
		req.Host = at.host
	}
	if at.origin != "" {
		req.Header.Set("Origin", at.origin)
	}
	if at.method == "OPTIONS" {
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type")
	}
	if at.contentType != "" {
		req.Header.Set("Content-Type", at.contentType)
	}
	if at.auth != "" {
		req.Header.Set("Authorization", at.auth)
	}
	if f := strings.Fields(at.fetch); len(f) == 3 {
		req.Header.Set("Sec-Fetch-Site", f[0])
		req.Header.Set("Sec-Fetch-Mode", f[1])
		req.Header.Set("Sec-Fetch-Dest", f[2])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", at.method, at.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (at attack) check(t *testing.T, base string) {
	t.Helper()
	code, header, body := at.send(t, base)
	if code != at.want || !strings.Contains(body, at.wantIn) || (at.notIn != "" && strings.Contains(body, at.notIn)) {
		t.Fatalf("got %d %.300s; want %d with %q and without %q", code, body, at.want, at.wantIn, at.notIn)
	}
	if code >= 400 {
		if got := header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Errorf("refused, but with Access-Control-Allow-Origin %q", got)
		}
		if e := decodeError(t, []byte(body)); !strings.Contains(body, `"details":[]`) || e.Code == nil || e.Message == "" {
			t.Errorf("body %s, want the JSON error {code, message, details}", body)
		}
	}
}

// TestAttackWebPage: what a page the user visits can do to a default install (no tokens, REST
// on 127.0.0.1): a "simple" cross-site POST that needs no preflight, DNS rebinding (the
// page's own name resolves to 127.0.0.1, so its requests carry that name in Host), and plain
// cross-origin requests. The console's own requests and the liveness probe keep working.
func TestAttackWebPage(t *testing.T) {
	a, _, err := launch(t, meshArgs("--metrics-addr=127.0.0.1:0"), nil, nil, allTargets...)
	if err != nil {
		t.Fatal(err)
	}
	base := endpoint(a, "REST")
	waitReady(t, base, "")
	self := strings.TrimPrefix(base, "http://")
	_, port, _ := net.SplitHostPort(self)
	evil := "evil.example:" + port
	const add = `{"query":"@calculator.add({\"a\":2,\"b\":3})"}`
	const ran = `"output":"5"`
	for _, at := range []attack{
		{name: "cross-site text/plain POST runs a tool", method: "POST", path: "/v1/query", origin: "https://evil.example",
			contentType: "text/plain;charset=UTF-8", body: add, want: 403, wantIn: "origin", notIn: ran},
		{name: "text/plain POST from a browser that sends no Origin", method: "POST", path: "/v1/query",
			contentType: "text/plain", body: add, want: 415, wantIn: "application/json", notIn: ran},
		{name: "form POST to a tool", method: "POST", path: "/v1/tools/calculator/add:call",
			contentType: "application/x-www-form-urlencoded", body: "a=2&b=3", want: 415, notIn: `"text":"5"`},
		{name: "POST without a body type", method: "POST", path: "/v1/tools/sqlite/list_tables:call", want: 415},
		{name: "DNS rebinding reads the servers", method: "GET", path: "/v1/servers", host: evil, want: 403, wantIn: "allowed-hosts", notIn: "calculator"},
		{name: "DNS rebinding runs a query", method: "POST", path: "/v1/query", host: evil, origin: "http://" + evil,
			contentType: "application/json", body: add, want: 403, notIn: ran},
		{name: "DNS rebinding loads the console", method: "GET", path: "/ui/", host: evil, want: 403},
		{name: "DNS rebinding reads readiness", method: "GET", path: "/readyz", host: evil, want: 403},
		{name: "cross-origin read of the tools", method: "GET", path: "/v1/tools", origin: "https://evil.example", want: 403, notIn: "calculator.add"},
		{name: "cross-origin preflight", method: "OPTIONS", path: "/v1/query", origin: "https://evil.example", want: 403},
		{name: "cross-origin JSON call", method: "POST", path: "/v1/tools/calculator/add:call", origin: "null",
			contentType: "application/json", body: `{"arguments":{"a":2,"b":3}}`, want: 403, notIn: `"text":"5"`},
		// A page's no-cors requests carry no Origin (issue 26 item 3); the browser says where
		// they come from. Another port of localhost is the same site, and no more the console.
		{name: "<img> from another site", method: "GET", path: "/v1/tools", fetch: "cross-site no-cors image", want: 403, wantIn: "Sec-Fetch-Site", notIn: "calculator.add"},
		{name: "<script> from another port of localhost", method: "GET", path: "/v1/servers", fetch: "same-site no-cors script", want: 403, notIn: "calculator"},
		{name: "another site frames the console", method: "GET", path: "/ui/", fetch: "cross-site navigate iframe", want: 403},
		{name: "DNS rebinding reaches the MCP endpoint", method: "POST", path: "/mcp", host: evil, contentType: "application/json", body: mcpInit, want: 403, notIn: "protocolVersion"},
		// What must keep working.
		{name: "the console's own query", method: "POST", path: "/v1/query", origin: base,
			contentType: "application/json", body: add, want: 200, wantIn: ran},
		{name: "a client without Origin", method: "GET", path: "/v1/tools", want: 200, wantIn: "calculator.add"},
		{name: "localhost", method: "GET", path: "/v1/tools", host: "localhost:" + port, want: 200},
		{name: "a typed URL", method: "GET", path: "/v1/tools", fetch: "none navigate document", want: 200, wantIn: "calculator.add"},
		{name: "a link to the console from another site", method: "GET", path: "/ui/", fetch: "cross-site navigate document", want: 200},
		{name: "the console's own fetch", method: "GET", path: "/v1/tools", fetch: "same-origin cors empty", want: 200, wantIn: "calculator.add"},
		// One Host rule for every path (issue 26 item 11): mcp-go's own refused *.localhost.
		{name: "the MCP endpoint under a .localhost name", method: "POST", path: "/mcp", host: "toolmesh.localhost:" + port,
			contentType: "application/json", body: mcpInit, want: 200, wantIn: "protocolVersion"},
		{name: "liveness from any page", method: "GET", path: "/healthz", origin: "https://evil.example", want: 200, wantIn: "ok"},
	} {
		t.Run(at.name, func(t *testing.T) { at.check(t, base) })
	}
	metrics := strings.TrimSuffix(endpoint(a, "metrics"), "/metrics")
	t.Run("DNS rebinding reads the metrics port", func(t *testing.T) {
		attack{method: "GET", path: "/metrics", host: "evil.example", want: 403}.check(t, metrics)
	})
}

// mcpInit is an MCP client's first request.
const mcpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"attack","version":"0"}}}`

// TestAttackAllowedOrigin: an origin the operator names gets CORS, others still do not; a host
// name the operator names is served on every path, /mcp included.
func TestAttackAllowedOrigin(t *testing.T) {
	a, _, err := launch(t, meshArgs("--api.allowed-origins=https://app.example", "--api.allowed-hosts=toolmesh.example"), nil, nil, allTargets...)
	if err != nil {
		t.Fatal(err)
	}
	base := endpoint(a, "REST")
	waitReady(t, base, "")
	code, header, _ := attack{method: "OPTIONS", path: "/v1/query", origin: "https://app.example"}.send(t, base)
	if code != 204 || header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(header.Get("Access-Control-Allow-Headers"), "Content-Type") {
		t.Errorf("preflight from the allowed origin: %d %v, want 204 with CORS headers", code, header)
	}
	attack{method: "POST", path: "/v1/query", origin: "https://app.example", contentType: "application/json",
		body: `{"query":"@calculator.add({\"a\":2,\"b\":3})"}`, want: 200, wantIn: `"output":"5"`}.check(t, base)
	attack{method: "GET", path: "/v1/tools", host: "toolmesh.example", want: 200}.check(t, base)
	// Reached through a proxy on the same host, the connection is loopback's: mcp-go's own
	// check refused the name there (issue 26 item 11).
	attack{method: "POST", path: "/mcp", host: "toolmesh.example", contentType: "application/json", body: mcpInit,
		want: 200, wantIn: "protocolVersion"}.check(t, base)
	// A configured origin's CORS fetch is cross-site, and welcome; its no-cors <img> is not.
	attack{method: "GET", path: "/v1/tools", origin: "https://app.example", fetch: "cross-site cors empty", want: 200}.check(t, base)
	attack{method: "GET", path: "/v1/tools", fetch: "cross-site no-cors image", want: 403}.check(t, base)
	attack{method: "GET", path: "/v1/tools", origin: "https://other.example", want: 403}.check(t, base)
}

// TestAttackOpenBind: `up` and `serve` refuse to start an api that listens beyond loopback
// without tokens, naming the token flag and the opt-out; with either it starts.
func TestAttackOpenBind(t *testing.T) {
	t.Setenv("TOOLMESH_API_TOKENS", "")
	for _, tc := range []struct {
		name    string
		args    []string
		env     string
		refused string // the flag the error names; "" when it must start
	}{
		{name: "REST on every interface", args: []string{"--api.http-addr=0.0.0.0:0"}, refused: "api.http-addr"},
		{name: "gRPC on every interface", args: []string{"--api.grpc-addr=0.0.0.0:0"}, refused: "api.grpc-addr"},
		{name: "open on purpose", args: []string{"--api.http-addr=0.0.0.0:0", "--api.allow-open"}},
		{name: "with tokens", args: []string{"--api.http-addr=0.0.0.0:0"}, env: "ci:a-long-enough-test-token-0123456789"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TOOLMESH_API_TOKENS", tc.env)
			_, _, err := launch(t, meshArgs(tc.args...), nil, nil, "executor", "api")
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("an open api without tokens started")
			}
			for _, want := range []string{tc.refused, "--api.tokens-file", "TOOLMESH_API_TOKENS", "--api.allow-open"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
}

// upArgs are the flags of `up` in a test: the api and the demo servers on free loopback ports
// and no model; the executor, retriever and inference keep their defaults.
var upArgs = []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0",
	"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
	"--drain-timeout=2s", "--llm-url=http://127.0.0.1:1"}

// freeDefaults puts the executor, retriever and inference on free loopback ports without
// giving them on purpose (as defaults are), so that no case binds the real 7702-7704.
func freeDefaults(c *Config) {
	c.Executor.GRPCAddr, c.Retriever.GRPCAddr, c.Inference.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
}

// TestAttackInternalPorts: in one process (`up`) the executor, retriever and inference take no
// connection at all: on main any local user could call ExecutorService/CallTool on loopback
// and run any tool past the api's tokens and scopes. Issue 26 moved them to private Unix
// sockets; now (issue 28) they have no listener: the api and the retriever call them in the
// process, the banner says so, and the mesh still answers. A target keeps its TCP port when
// its address was given on purpose (command line or config file) or when a target that calls
// it runs elsewhere.
func TestAttackInternalPorts(t *testing.T) {
	internal := []string{"executor gRPC", "retriever gRPC", "inference gRPC"}
	// tcp reports whether the banner gives name a TCP address.
	tcp := func(a *App, name string) bool {
		_, port, err := net.SplitHostPort(endpointOf(t, a, name))
		return err == nil && port != "0"
	}
	t.Run("up", func(t *testing.T) {
		before := listeners(t)
		a, _, err := launch(t, upArgs, nil, freeDefaults, allTargets...)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range internal {
			if addr := endpoint(a, name); !strings.HasPrefix(addr, "in-process (no listener)") {
				t.Errorf("%s at %q; want in-process, no listener", name, addr)
			}
		}
		// What the process listens on: the api's two ports and the demo's three servers.
		if got := listeners(t) - before; got != 5 {
			t.Errorf("%d new listening sockets; want 5 (REST, api gRPC, 3 demo MCP servers): %v", got, a.Endpoints)
		}
		base := endpoint(a, "REST")
		waitReady(t, base, "")
		attack{method: "POST", path: "/v1/tools/calculator/add:call", contentType: "application/json",
			body: `{"arguments":{"a":2,"b":3}}`, want: 200, wantIn: `"text":"5"`}.check(t, base)
	})
	t.Run("an address given on purpose", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "toolmesh.yaml")
		if err := os.WriteFile(file, []byte("inference:\n  grpc-addr: 127.0.0.1:0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args := append(slices.Clone(upArgs), "--executor.grpc-addr=127.0.0.1:0", "--config="+file)
		a, _, err := launch(t, args, nil, func(c *Config) { c.Retriever.GRPCAddr = "127.0.0.1:0" }, allTargets...)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]bool{"executor gRPC": true, "retriever gRPC": false, "inference gRPC": true} {
			if got := tcp(a, name); got != want {
				t.Errorf("%s at %q: TCP %v, want %v", name, endpoint(a, name), got, want)
			}
		}
		waitReady(t, endpoint(a, "REST"), "")
	})
	t.Run("with mutual TLS", func(t *testing.T) {
		// The executor on a TCP port with mutual TLS (given on purpose), the retriever and
		// inference in the process: the api reaches all three, the retriever the executor,
		// and a question is answered.
		ca := tlstest.NewCA(t)
		d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
		m := &scriptedModel{scripts: map[string]script{}}
		d.ScriptFunc(m.reply)
		m.set("What is 2 plus 3?", addTwoAndThree)
		args := append(slices.Clone(upArgs), "--executor.grpc-addr=127.0.0.1:0", "--llm-url="+d.URL)
		args = append(args, tlsFlags(tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "toolmesh", "localhost", "127.0.0.1")).Files())...)
		a, _, err := launch(t, args, nil, freeDefaults, allTargets...)
		if err != nil {
			t.Fatal(err)
		}
		if !tcp(a, "executor gRPC") || tcp(a, "retriever gRPC") || tcp(a, "inference gRPC") {
			t.Fatalf("endpoints %v; want the executor on TCP, the others in-process", a.Endpoints)
		}
		if _, err := tlstest.HealthCheck(t, endpointOf(t, a, "executor gRPC"), "toolmesh.v1.ExecutorService", grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
			t.Error("the executor's TCP port answered a plaintext client")
		}
		base := endpoint(a, "REST")
		waitReady(t, base, "")
		if got := query(t, base, `{"query":"What is 2 plus 3?"}`); got.Answer != "2 plus 3 is 5." {
			t.Errorf("query: %+v", got)
		}
	})
	t.Run("a caller in another process", func(t *testing.T) {
		// `serve --target=executor`: the api and the retriever that call it run elsewhere.
		a, _, err := launch(t, upArgs, nil, freeDefaults, "demo", "executor")
		if err != nil {
			t.Fatal(err)
		}
		if !tcp(a, "executor gRPC") {
			t.Errorf("executor at %q; want its TCP port", endpoint(a, "executor gRPC"))
		}
	})
}

// TestAttackInternalOpenBind: an executor, retriever or inference port beyond loopback without
// mutual TLS is refused at start, in `up` and alone (`serve --target=...`), as the api's is
// without tokens (on main they started without a word), naming the flag, mutual TLS and the
// opt-out; with mutual TLS or --allow-insecure-internal it starts. Validate refuses the same.
func TestAttackInternalOpenBind(t *testing.T) {
	ca := tlstest.NewCA(t)
	mtls := tlsFlags(tlstest.NewSecretDir(t, tlstest.Issue(t, ca, "toolmesh", "localhost", "127.0.0.1")).Files())
	for _, tc := range []struct {
		name    string
		args    []string
		targets []string
		refused string // the flag the error names; "" when it must start
	}{
		{"executor in up", meshArgs("--executor.grpc-addr=0.0.0.0:0"), allTargets, "executor.grpc-addr"},
		{"retriever in up", meshArgs("--retriever.grpc-addr=0.0.0.0:0"), allTargets, "retriever.grpc-addr"},
		{"inference in up", meshArgs("--inference.grpc-addr=:0"), allTargets, "inference.grpc-addr"},
		{"executor alone", []string{"--executor.grpc-addr=0.0.0.0:0"}, []string{"executor"}, "executor.grpc-addr"},
		{"retriever alone", []string{"--retriever.grpc-addr=0.0.0.0:0", "--retriever.executor-addr=127.0.0.1:1"}, []string{"retriever"}, "retriever.grpc-addr"},
		{"inference alone", []string{"--inference.grpc-addr=0.0.0.0:0", "--llm-url=http://127.0.0.1:1"}, []string{"inference"}, "inference.grpc-addr"},
		{"open on purpose", []string{"--executor.grpc-addr=0.0.0.0:0", "--allow-insecure-internal"}, []string{"executor"}, ""},
		{"with mutual TLS", append([]string{"--executor.grpc-addr=0.0.0.0:0"}, mtls...), []string{"executor"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--drain-timeout=2s"}, tc.args...)
			c := demoConfig(t, args...)
			c.Targets = tc.targets
			verr := c.Validate()
			_, _, err := launch(t, args, nil, nil, tc.targets...)
			if tc.refused == "" {
				if err != nil || verr != nil {
					t.Fatalf("refused: %v (Validate: %v)", err, verr)
				}
				return
			}
			if err == nil || verr == nil {
				t.Fatalf("an open %s without mutual TLS: start %v, Validate %v; want both refused", tc.refused, err, verr)
			}
			for _, want := range []string{tc.refused, "--tls.cert-file", "--allow-insecure-internal"} {
				if !strings.Contains(err.Error(), want) || !strings.Contains(verr.Error(), want) {
					t.Errorf("error %q (Validate: %q) does not name %s", err, verr, want)
				}
			}
		})
	}
}

// syncLog is a log sink the targets write to concurrently.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

const testToken = "a-long-enough-test-token-0123456789"

// otherToken is a second token, never used from the test's address until a case says so.
const otherToken = "another-long-enough-test-token-9876543210"

// TestAttackUnauthenticated: with tokens, a client that guesses is refused before its body is
// read, throttled after a few tries (429 with Retry-After, and so is a right token never used
// from its address), and leaves a few log lines, not one a try. A web page's requests through
// the user's browser carry no token and cost nothing (issue 26 item 3: ten <img>s locked every
// token out of 127.0.0.1), and a token in use from an address is never locked out by someone
// else's guesses there.
func TestAttackUnauthenticated(t *testing.T) {
	t.Setenv("TOOLMESH_API_TOKENS", "tester:"+testToken+",other:"+otherToken)
	var logs syncLog
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	a, _, err := launch(t, meshArgs("--api.max-body-bytes=65536"), logger, nil, allTargets...)
	if err != nil {
		t.Fatal(err)
	}
	base := endpoint(a, "REST")
	waitReady(t, base, testToken)
	// Before any guessing: an unknown token with a body over the limit is a 401, not a 413.
	huge := `{"query":"` + strings.Repeat("a", 100<<10) + `"}`
	attack{method: "POST", path: "/v1/query", contentType: "application/json", body: huge, auth: "Bearer wrong-token-wrong-token-0000",
		want: 401, wantIn: "unknown token"}.check(t, base)
	attack{method: "POST", path: "/v1/tools/calculator/add:call", contentType: "application/json", body: "{",
		want: 401, wantIn: "missing Authorization"}.check(t, base)
	// A page's no-cors requests: a browser that sends Sec-Fetch-Site is turned away before
	// the token check; one that does not (or a request the web guard lets by) is refused 401
	// as often as it likes, and spends nothing of the address's budget.
	attack{method: "GET", path: "/v1/tools", fetch: "cross-site no-cors image", want: 403, wantIn: "Sec-Fetch-Site"}.check(t, base)
	for range 30 {
		attack{method: "GET", path: "/v1/tools", want: 401, wantIn: "missing Authorization"}.check(t, base)
		attack{method: "GET", path: "/v1/servers", auth: "Basic dGVzdGVyOnBhc3N3b3Jk", want: 401}.check(t, base)
	}
	attack{method: "GET", path: "/v1/tools", auth: "Bearer " + testToken, want: 200, wantIn: "calculator.add"}.check(t, base)
	attack{method: "GET", path: "/v1/tools", auth: "Bearer still-guessing-0123456789abcdef", want: 401, wantIn: "unknown token"}.check(t, base)

	throttled := 0
	for i := range 60 {
		code, header, body := attack{method: "GET", path: "/v1/tools", auth: "Bearer guess-" + strconv.Itoa(i) + "-0123456789abcdef"}.send(t, base)
		switch code {
		case 401:
		case 429:
			throttled++
			if secs, err := strconv.Atoi(header.Get("Retry-After")); err != nil || secs < 1 {
				t.Fatalf("429 with Retry-After %q, want whole seconds", header.Get("Retry-After"))
			}
			if !strings.Contains(body, "too many failed authentication attempts") {
				t.Fatalf("429 body %s", body)
			}
		default:
			t.Fatalf("guess %d: %d %s", i, code, body)
		}
	}
	if throttled < 45 {
		t.Errorf("%d of 60 guesses throttled, want all but the first few", throttled)
	}
	// The guesser's address is throttled whatever it sends, but for a token already in use
	// from it: the tester's token (waitReady, above) still works; the other token is right
	// but new here, so it gets a guess's answer, or the guesser would learn it was right.
	attack{method: "GET", path: "/v1/tools", auth: "Bearer " + testToken, want: 200, wantIn: "calculator.add"}.check(t, base)
	gCode, _, guess := attack{method: "GET", path: "/v1/tools", auth: "Bearer guess-after-0123456789abcdef"}.send(t, base)
	oCode, _, other := attack{method: "GET", path: "/v1/tools", auth: "Bearer " + otherToken}.send(t, base)
	if g, o := decodeError(t, []byte(guess)), decodeError(t, []byte(other)); oCode != 429 || oCode != gCode || o.Message != g.Message {
		t.Errorf("a right token new to a throttled address: %d %q; want a guess's answer, %d %q", oCode, o.Message, gCode, g.Message)
	}
	if n := strings.Count(logs.String(), "api call refused"); n > 20 {
		t.Errorf("125 refused calls made %d log lines, want them sampled", n)
	}
}

// TestAttackTrickledBody: a client that sends its body a byte at a time holds a connection no
// longer than api.body-timeout, with or without a good token.
func TestAttackTrickledBody(t *testing.T) {
	t.Setenv("TOOLMESH_API_TOKENS", "tester:"+testToken)
	a, _, err := launch(t, meshArgs("--api.body-timeout=1s"), nil, nil, allTargets...)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(endpoint(a, "REST"), "http://")
	for _, tc := range []struct{ name, token, want string }{
		{"good token", testToken, "408"},
		{"no token", "", "401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			auth := ""
			if tc.token != "" {
				auth = "Authorization: Bearer " + tc.token + "\r\n"
			}
			start := time.Now()
			fmt.Fprintf(conn, "POST /v1/query HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: 100000\r\n\r\n{", addr, auth)
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
						if _, err := conn.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			}()
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			line, err := bufio.NewReader(conn).ReadString('\n')
			if took := time.Since(start); err != nil || !strings.Contains(line, tc.want) || took > 8*time.Second {
				t.Fatalf("got %q (%v) after %s; want %s within the 1 s body timeout (and some slack)", line, err, took.Round(time.Millisecond), tc.want)
			}
		})
	}
}

// TestSecretsNeverShown puts a secret in every place a user can put one in mcpServers (a URL's
// query and userinfo, a header, a stdio server's env), lets the servers fail, asks every status
// and calls their tools, and greps everything toolmesh says (logs at debug, the REST answers,
// every span) for the secrets.
func TestSecretsNeverShown(t *testing.T) {
	secrets := map[string]string{
		"query":    "S3CRET-query-value-1234",
		"userinfo": "S3CRET-userinfo-pass-5678",
		"user":     "S3CRET-user-token-9012",
		"header":   "S3CRET-header-value-3456",
		"env":      "S3CRET-env-value-7890",
		"fragment": "S3CRET-fragment-2345",
	}
	closed := freeAddr(t) // nothing listens here
	// A server that answers, but not as MCP: its errors quote the URL too.
	broken := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream says no to "+r.URL.String(), http.StatusInternalServerError)
	}), ReadHeaderTimeout: time.Second}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = broken.Serve(bl) }()
	t.Cleanup(func() { _ = broken.Close() })
	cfgPath := filepath.Join(t.TempDir(), "toolmesh.yaml")
	doc := fmt.Sprintf(`mcpServers:
  remote:
    url: "http://me:%s@%s/sse?api_key=%s&page=1#%s"
    transport: sse
    headers:
      Authorization: "Bearer %s"
  streaming:
    url: "http://%s@%s/mcp?token=%s"
    transport: streamable-http
  broken:
    url: "http://%s/mcp?api_key=%s"
    transport: streamable-http
    headers:
      X-Api-Key: "%s"
  local:
    command: sh
    args: ["-c", "echo started; exit 3"]
    env:
      API_TOKEN: "%s"
`, secrets["userinfo"], closed, secrets["query"], secrets["fragment"], secrets["header"],
		secrets["user"], closed, secrets["query"],
		bl.Addr(), secrets["query"], secrets["header"],
		secrets["env"])
	if err := os.WriteFile(cfgPath, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncLog
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	spans := tracetest.NewInMemoryExporter()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	a, _, err := launch(t, meshArgs("--config="+cfgPath), logger, func(c *Config) { c.Telemetry.SpanExporter = spans }, allTargets...)
	if err != nil {
		t.Fatal(err)
	}
	base := endpoint(a, "REST")

	var answers []string
	get := func(path string) string {
		code, _, body := attack{method: "GET", path: path}.send(t, base)
		answers = append(answers, fmt.Sprintf("GET %s %d %s", path, code, body))
		return body
	}
	// Every failing server has tried, and said why, at least once.
	eventually.True(t, 30*time.Second, "every failing MCP server reports a last_error", func() bool {
		servers := get("/v1/servers")
		return strings.Count(servers, `"last_error":"`)-strings.Count(servers, `"last_error":""`) >= 4
	})
	time.Sleep(2 * time.Second) // a retry or two, with their log lines
	for _, path := range []string{"/v1/servers", "/readyz", "/v1/tools", "/v1/tools?server=remote", "/ui/", "/v1/tools:search?q=remote"} {
		get(path)
	}
	for _, server := range []string{"remote", "streaming", "broken", "local"} {
		for _, at := range []attack{
			{method: "POST", path: "/v1/tools/" + server + "/anything:call", contentType: "application/json", body: `{"arguments":{}}`},
			{method: "POST", path: "/v1/query", contentType: "application/json", body: `{"query":"@` + server + `.anything({})"}`},
			{method: "POST", path: "/v1/query:stream", contentType: "application/json", body: `{"query":"@` + server + `.anything({})"}`},
		} {
			code, _, body := at.send(t, base)
			answers = append(answers, fmt.Sprintf("%s %s %d %s", at.method, at.path, code, body))
		}
	}
	// The spans of those calls leave in a batch.
	eventually.True(t, 10*time.Second, "spans exported", func() bool { return len(spans.GetSpans()) > 0 })
	time.Sleep(300 * time.Millisecond)
	var spanText strings.Builder
	for _, s := range spans.GetSpans() {
		fmt.Fprintf(&spanText, "%+v\n", s)
	}
	outputs := map[string]string{"logs": logs.String(), "REST answers": strings.Join(answers, "\n"), "spans": spanText.String()}
	for where, text := range outputs {
		for place, secret := range secrets {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("the secret in the %s shows in the %s: ...%s...", place, where, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
	// The outputs do talk about those servers' URLs, so the test would see a leak.
	for where, want := range map[string]string{"logs": "api_key=REDACTED", "REST answers": "api_key=REDACTED", "spans": "REDACTED"} {
		if !strings.Contains(outputs[where], want) {
			t.Errorf("the %s never mention the masked URL (%q), so the test cannot see a leak there:\n%.2000s", where, want, outputs[where])
		}
	}
}

// listeners counts the listening TCP and Unix sockets of this process (Linux: /proc).
func listeners(t *testing.T) int {
	t.Helper()
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6", "/proc/net/unix"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Skipf("no %s: %v", f, err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			switch {
			case strings.HasPrefix(f, "/proc/net/tcp") && len(fs) > 9 && fs[3] == "0A": // LISTEN
				inodes[fs[9]] = true
			case f == "/proc/net/unix" && len(fs) > 6 && fs[5] == "01" && fs[3] == "00010000": // listening stream
				inodes[fs[6]] = true
			}
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		link, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if ino, ok := strings.CutPrefix(link, "socket:["); err == nil && ok && inodes[strings.TrimSuffix(ino, "]")] {
			n++
		}
	}
	return n
}
