package app

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(envStdioServer) != "" {
		os.Exit(serveStdioDouble()) // re-executed as a stdio MCP server (confignames_test.go)
	}
	goleak.VerifyTestMain(m)
}

func load(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c Config
	c.RegisterFlags(fs)
	err := c.Load(fs, args)
	return c, err
}

func TestConfigPrecedence(t *testing.T) {
	tests := []struct {
		name             string
		args             []string
		wantAPICall      time.Duration
		wantExecutorCall time.Duration
		wantHTTPAddr     string
		wantDrain        time.Duration
		wantServers      []string
	}{
		{"defaults", nil, 2 * time.Minute, 60 * time.Second, "127.0.0.1:7700", 10 * time.Second, nil},
		{"file overlays defaults", []string{"--config", "testdata/toolmesh.yaml"}, 45 * time.Second, 20 * time.Second, "127.0.0.1:9700", 3 * time.Second, []string{"weather"}},
		{"flags overlay the file", []string{"--api.call-timeout=5s", "--config", "testdata/toolmesh.yaml", "--drain-timeout=1s"}, 5 * time.Second, 20 * time.Second, "127.0.0.1:9700", time.Second, []string{"weather"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if c.API.CallTimeout != tc.wantAPICall {
				t.Errorf("api.call-timeout = %v, want %v", c.API.CallTimeout, tc.wantAPICall)
			}
			if c.Executor.CallTimeout != tc.wantExecutorCall {
				t.Errorf("executor.call-timeout = %v, want %v", c.Executor.CallTimeout, tc.wantExecutorCall)
			}
			if c.API.HTTPAddr != tc.wantHTTPAddr {
				t.Errorf("api.http-addr = %v, want %v", c.API.HTTPAddr, tc.wantHTTPAddr)
			}
			if c.DrainTimeout != tc.wantDrain {
				t.Errorf("drain-timeout = %v, want %v", c.DrainTimeout, tc.wantDrain)
			}
			var names []string
			for n := range c.Executor.Servers {
				names = append(names, n)
			}
			if !slices.Equal(names, tc.wantServers) {
				t.Errorf("servers = %v, want %v", names, tc.wantServers)
			}
		})
	}
}

// TestConfigPolicy: the policy section reaches the api's config, and the servers' rules the
// executor's, with its servers (the api has them from the executor, not from its config).
func TestConfigPolicy(t *testing.T) {
	c, err := load(t, "--config", "testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := c.API.Policy
	if p.Default == nil || !slices.Equal(p.Default.Call, []string{"calculator"}) || !p.Default.Query {
		t.Errorf("policy.default = %+v", p.Default)
	}
	if ci := p.Tokens["ci-bot"]; !slices.Equal(ci.Call, []string{"calculator.*", "sqlite.list_*"}) || ci.Query || ci.List != nil {
		t.Errorf("policy.tokens.ci-bot = %+v", ci)
	}
	if p.Servers != nil {
		t.Errorf("the api's own server rules = %+v; want none", p.Servers)
	}
	if s := c.Executor.Servers["notes"]; !slices.Equal(s.ExcludedTools, []string{"secret_*"}) || !s.AllowDestructive {
		t.Errorf("the executor's notes = %+v", s)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"unknown key names it", []string{"--config", "testdata/unknown-key.yaml"}, `unknown key "api.htp-addr"`},
		{"missing file", []string{"--config", "testdata/nope.yaml"}, "nope.yaml"},
		{"bad flag value", []string{"--api.call-timeout=soon"}, "api.call-timeout"},
		{"a bad policy names the key", []string{"--config", "testdata/bad-policy.yaml"}, "policy.tokens.ci-bot.cal: unknown key; want call, list, search or query"},
		{"a FIFO is not read", []string{"--config", fifo(t)}, "not a regular file"},
		{"nor as the mcp config", []string{"--mcp-config", fifo(t)}, "not a regular file"},
		{"a rule with no value", []string{"--config", "testdata/rule-without-value.yaml"}, "excludedTools: has no value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// fifo is a named pipe in a folder of the test's: reading it would block until someone writes.
func fifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOrder(t *testing.T) {
	tests := []struct {
		requested, want []string
	}{
		{[]string{"api", "executor", "demo"}, []string{"demo", "executor", "api"}},
		{[]string{"api", "retriever", "executor", "demo"}, []string{"demo", "executor", "retriever", "api"}},
		{[]string{"api"}, []string{"api"}},
		{[]string{"api", "executor"}, []string{"executor", "api"}},
	}
	for _, tc := range tests {
		if got := order(tc.requested); !slices.Equal(got, tc.want) {
			t.Errorf("order(%v) = %v, want %v", tc.requested, got, tc.want)
		}
	}
}

// TestConfigSecrets: Load fills every declared secret from the environment, and a secret is not
// a flag (so it cannot be given on a command line or in the config file).
func TestConfigSecrets(t *testing.T) {
	var probe Config
	want := map[string]string{}
	for _, v := range probe.Secrets() {
		want[v.Env] = "value-of-" + v.Env
		t.Setenv(v.Env, want[v.Env])
	}
	c, err := load(t)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{
		"TOOLMESH_API_TOKENS":     c.API.Tokens,
		"TOOLMESH_LLM_API_KEY":    c.Inference.LLM.APIKey,
		"TOOLMESH_EMBED_API_KEY":  c.Retriever.EmbedAPIKey,
		"TOOLMESH_QDRANT_API_KEY": c.Retriever.QdrantAPIKey,
	}
	if len(got) != len(want) {
		t.Errorf("declared secrets %v, want the four this test knows %v", want, got)
	}
	for env, v := range got {
		if v != want[env] {
			t.Errorf("%s filled %q, want %q", env, v, want[env])
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if strings.Contains(f.Name, "api-key") || strings.HasSuffix(f.Name, ".tokens") {
			t.Errorf("flag --%s holds a secret: secrets come from the environment only", f.Name)
		}
	})
}

// TestConfigRulesWithoutSecrets: in microservices mode the api's pod has none of the secrets
// the MCP servers' config names (${VAR} in headers, env, url), and reads none of the servers:
// the api has their rules from the executor. `serve --target=api` still loads a config that
// names them (given --mcp-config as before), while the executor refuses to start without them,
// naming the variable and never a value.
func TestConfigRulesWithoutSecrets(t *testing.T) {
	mcp := filepath.Join(t.TempDir(), "mcp.json")
	doc := `{"mcpServers": {"gh": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${TOOLMESH_TEST_GH_TOKEN}"},
		"allowDestructive": true, "excludedTools": ["delete_*"]}}}`
	if err := os.WriteFile(mcp, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}

	c, err := load(t, "--mcp-config", mcp)
	if err != nil {
		t.Fatalf("without TOOLMESH_TEST_GH_TOKEN: %v", err)
	}
	if c.API.Policy.Servers != nil {
		t.Errorf("the api's own rules = %+v; want none (they come from the executor)", c.API.Policy.Servers)
	}
	c.Targets = []string{"api"}
	if err := c.Validate(); err != nil {
		t.Errorf("serve --target=api: %v", err)
	}
	c.Targets = []string{"executor"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "TOOLMESH_TEST_GH_TOKEN") {
		t.Errorf("serve --target=executor without the secret: err = %v, want one naming TOOLMESH_TEST_GH_TOKEN", err)
	}

	t.Setenv("TOOLMESH_TEST_GH_TOKEN", "s3cret-value")
	c, err = load(t, "--mcp-config", mcp)
	if err != nil {
		t.Fatal(err)
	}
	c.Targets = []string{"executor", "api"}
	if err := c.Validate(); err != nil {
		t.Errorf("with the secret: %v", err)
	}
	gh := c.Executor.Servers["gh"]
	if got := gh.Headers["Authorization"]; got != "Bearer s3cret-value" {
		t.Errorf("the executor's header = %q, want the secret resolved", got)
	}
	if !gh.AllowDestructive || !slices.Equal(gh.ExcludedTools, []string{"delete_*"}) {
		t.Errorf("the executor's gh = %+v, want its rules", gh)
	}
}

// TestConfigGivenOnPurpose: a flag counts as given on purpose when the command line or the
// config file sets it, never when it keeps its default: `up` listens on a private socket
// instead of a default address, never instead of one that was asked for.
func TestConfigGivenOnPurpose(t *testing.T) {
	file := filepath.Join(t.TempDir(), "toolmesh.yaml")
	if err := os.WriteFile(file, []byte("executor:\n  grpc-addr: 127.0.0.1:9704\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string // of the three listen addresses
	}{
		{"defaults", nil, nil},
		{"on the command line", []string{"--retriever.grpc-addr=127.0.0.1:7702"}, []string{"retriever.grpc-addr"}},
		{"in the file", []string{"--config=" + file}, []string{"executor.grpc-addr"}},
		{"both", []string{"--config=" + file, "--inference.grpc-addr=127.0.0.1:0"}, []string{"executor.grpc-addr", "inference.grpc-addr"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, name := range []string{"executor.grpc-addr", "retriever.grpc-addr", "inference.grpc-addr"} {
				if c.given(name) {
					got = append(got, name)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("given %v, want %v", got, tc.want)
			}
		})
	}
}
