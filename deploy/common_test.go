package deploy

import (
	"flag"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Files, relative to the repository root.
const (
	composeFile    = "compose.yaml"
	cpuOverride    = "deploy/compose.cpu.yaml"
	mtlsOverride   = "deploy/compose.mtls.yaml"
	toolmeshConfig = "deploy/toolmesh.yaml"
	mcpConfig      = "deploy/mcp.json"
)

// serveTargets are the four toolmesh services of compose.yaml, by their --target.
var serveTargets = []string{"api", "executor", "inference", "retriever"}

// gorillaContext is Gorilla OpenFunctions v2's context window (max_position_embeddings).
const gorillaContext = 4096

// repoRoot is the repository root: the tests run in deploy/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// loadServe loads a toolmesh config the way `toolmesh serve ARGS` does: flags set defaults,
// the --config file overlays them, flags given on the command line overlay it again.
func loadServe(t *testing.T, args []string) app.Config {
	t.Helper()
	cfg, _ := loadServeFlags(t, args)
	return cfg
}

// loadServeFlags is loadServe that also returns the flag set, holding every value in force.
func loadServeFlags(t *testing.T, args []string) (app.Config, *flag.FlagSet) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg app.Config
	cfg.RegisterFlags(fs)
	tg := fs.String("target", "", "as in toolmesh serve")
	if err := cfg.Load(fs, args); err != nil {
		t.Fatalf("toolmesh serve %s: %v", strings.Join(args, " "), err)
	}
	if fs.NArg() > 0 {
		t.Fatalf("toolmesh serve %s: unexpected arguments %v", strings.Join(args, " "), fs.Args())
	}
	if *tg != "" {
		cfg.Targets = strings.Split(*tg, ",")
	}
	return cfg, fs
}

// flagValue returns the value of --name=V, --name V, -name=V or -name V in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		for _, p := range []string{"--" + name, "-" + name} {
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v, true
			}
			if a == p && i+1 < len(args) {
				return args[i+1], true
			}
		}
	}
	return "", false
}

// splitAddr splits host:port, failing the test on anything else.
func splitAddr(t *testing.T, what, addr string) (host, port string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: %q is not host:port: %v", what, addr, err)
	}
	return host, port
}
