package deploy

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
)

// chartServed holds what each toolmesh container of the Helm chart runs with, one file per
// case of values (deploy/helm/chartcheck renders the chart with Helm and writes them; that
// module is separate so that Helm stays out of this module's dependencies).
const chartServed = "helm/chartcheck/testdata/served"

// chartMount is where the chart mounts everything toolmesh reads.
const chartMount = "/etc/toolmesh/"

// TestChartConfig loads the configuration every toolmesh container of the Helm chart starts
// with (its arguments and the files of its ConfigMap) with toolmesh's own config code and
// validates it for its target, as `toolmesh serve` does at start-up: a key the chart writes
// that is not a flag, or a value a target refuses, fails here instead of in a crash-looping pod.
func TestChartConfig(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartServed, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no %s/*.json: run the chart's tests (scripts/chartcheck)", chartServed)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var s struct {
				Files   map[string]string `json:"files"`
				Targets map[string]struct {
					Args []string `json:"args"`
					Env  []string `json:"env"`
				} `json:"targets"`
			}
			if err := json.Unmarshal(data, &s); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(s.Targets) != len(serveTargets) {
				t.Fatalf("%s: targets %v, want %v", file, slices.Sorted(maps.Keys(s.Targets)), serveTargets)
			}
			root := t.TempDir()
			local := func(p string) string {
				return strings.ReplaceAll(p, chartMount, root+"/")
			}
			for path, content := range s.Files {
				if !strings.HasPrefix(path, chartMount) {
					t.Fatalf("%s: file %s is not under %s", file, path, chartMount)
				}
				// The config names other mounted paths (the tokens file, certificates): keep
				// them pointing into this folder too.
				p := local(path)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(local(content)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// api is loaded first, before any other target's secrets are set: it must start
			// without them.
			cfgs := map[string]app.Config{}
			for _, tg := range serveTargets {
				target, ok := s.Targets[tg]
				if !ok {
					t.Fatalf("%s: no target %s", file, tg)
				}
				if len(target.Args) == 0 || target.Args[0] != "serve" {
					t.Fatalf("%s: %s args %v: want `serve ...`", file, tg, target.Args)
				}
				// Secrets are only named in the file; ${VAR} in mcpServers needs them set.
				for _, e := range target.Env {
					t.Setenv(e, "value-of-"+e)
				}
				var args []string
				for _, a := range target.Args[1:] {
					args = append(args, local(a))
				}
				cfg := loadServe(t, args)
				if strings.Join(cfg.Targets, ",") != tg {
					t.Errorf("%s: --target %v, want %s", file, cfg.Targets, tg)
				}
				if err := cfg.Validate(); err != nil {
					t.Errorf("%s: toolmesh serve --target=%s: %v", file, tg, err)
				}
				// The internal ports beyond loopback are plaintext on purpose only without mTLS.
				if cfg.AllowInsecureInternal && cfg.TLS.Mutual() {
					t.Errorf("%s: %s runs with mutual TLS and allow-insecure-internal: drop the opt-out", file, tg)
				}
				cfgs[tg] = cfg
			}
			// The executor reads the MCP servers, and publishes their rules to the api, which
			// reads none of them itself.
			if len(cfgs["executor"].Executor.Servers) == 0 {
				t.Errorf("%s: the executor has no MCP servers", file)
			}
			if cfgs["api"].MCPConfig != "" {
				t.Errorf("%s: the api is given --mcp-config %s; the servers' rules come from the executor", file, cfgs["api"].MCPConfig)
			}
		})
	}
}

// TestChartModelPull runs the Helm chart's model-pull init container's command for real (see
// runModelPull) and checks that it writes the file the chart's llama-server loads.
func TestChartModelPull(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartServed, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Model *struct {
				PullArgs []string `json:"pull_args"`
				Dir      string   `json:"dir"`
				Loads    string   `json:"loads"`
			} `json:"model"`
		}
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if s.Model == nil {
			continue
		}
		n++
		t.Run(strings.TrimSuffix(filepath.Base(file), ".json"), func(t *testing.T) {
			m := s.Model
			if len(m.PullArgs) < 3 || m.PullArgs[0] != "model" || m.PullArgs[1] != "pull" {
				t.Fatalf("model-pull runs `toolmesh %s`, want `toolmesh model pull NAME`", strings.Join(m.PullArgs, " "))
			}
			if dir, _ := flagValue(m.PullArgs, "models-dir"); dir != m.Dir {
				t.Errorf("model-pull: --models-dir %q, but the volume is mounted at %s", dir, m.Dir)
			}
			runModelPull(t, m.PullArgs, m.Dir, m.Loads, "llama-server")
		})
	}
	if n == 0 {
		t.Fatalf("no case of %s runs llama-server", chartServed)
	}
}
