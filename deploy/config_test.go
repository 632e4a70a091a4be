package deploy

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// TestDeployConfig loads deploy/toolmesh.yaml and deploy/mcp.json with toolmesh's own config
// code (flags, then the YAML file whose keys are flag names) and validates them for every
// target, as `toolmesh serve --target=T --config deploy/toolmesh.yaml --mcp-config
// deploy/mcp.json` would.
func TestDeployConfig(t *testing.T) {
	root := repoRoot(t)
	file := filepath.Join(root, toolmeshConfig)
	servers := filepath.Join(root, mcpConfig)
	for _, tg := range append(slices.Clone(serveTargets), "all") {
		t.Run(tg, func(t *testing.T) {
			cfg := loadServe(t, []string{"--target=" + tg, "--config=" + file, "--mcp-config=" + servers})
			if tg == "all" {
				cfg.Targets = serveTargets
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}

	cfg := loadServe(t, []string{"--config=" + file, "--mcp-config=" + servers})
	for _, c := range []struct{ name, got, want string }{
		{"log.format", cfg.LogFormat, "json"},
		{"retriever.store", cfg.Retriever.Store, "qdrant"},
		{"retriever.embedder (default)", cfg.Retriever.Embedder, "lexical"},
		{"inference.backend", cfg.Inference.Backend, "gorilla"},
		{"api.http-addr", cfg.API.HTTPAddr, "0.0.0.0:7700"},
		{"otel.endpoint", cfg.Telemetry.Endpoint, "jaeger:4317"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if got := mcpconfig.Names(cfg.Executor.Servers); !slices.Equal(got, []string{"calculator", "converter", "sqlite"}) {
		t.Errorf("mcp servers = %v, want calculator, converter (SSE) and sqlite (stdio)", got)
	}
	for name, want := range map[string]mcpconfig.Transport{"calculator": mcpconfig.TransportSSE, "converter": mcpconfig.TransportSSE, "sqlite": mcpconfig.TransportStdio} {
		if got := cfg.Executor.Servers[name].Transport; got != want {
			t.Errorf("mcp server %s: transport %s, want %s", name, got, want)
		}
	}
}
