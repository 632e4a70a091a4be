package deploy

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
)

// loadProject loads compose files with the Compose specification's own loader, as
// `docker compose` would with the given profiles and environment (and nothing from the
// test's own environment or a .env file).
func loadProject(t *testing.T, files []string, profiles []string, env map[string]string) *types.Project {
	t.Helper()
	p, err := tryLoadProject(t, files, profiles, env)
	if err != nil {
		t.Fatalf("load %v (profiles %v): %v", files, profiles, err)
	}
	return p
}

func tryLoadProject(t *testing.T, files []string, profiles []string, env map[string]string) (*types.Project, error) {
	t.Helper()
	root := repoRoot(t)
	var abs, envList []string
	for _, f := range files {
		abs = append(abs, filepath.Join(root, f))
	}
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	opts, err := cli.NewProjectOptions(abs,
		cli.WithWorkingDirectory(root),
		cli.WithEnv(envList),
		cli.WithProfiles(profiles),
	)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(context.Background())
}

// target is the --target of a `toolmesh serve` service, or "".
func target(svc types.ServiceConfig) string {
	if len(svc.Command) == 0 || svc.Command[0] != "serve" {
		return ""
	}
	for _, a := range svc.Command[1:] {
		if v, ok := strings.CutPrefix(a, "--target="); ok {
			return v
		}
	}
	return ""
}

// serveServices maps each --target to its service.
func serveServices(t *testing.T, p *types.Project) map[string]types.ServiceConfig {
	t.Helper()
	out := map[string]types.ServiceConfig{}
	for _, name := range sortedNames(p.Services) {
		svc := p.Services[name]
		if tg := target(svc); tg != "" {
			if prev, dup := out[tg]; dup {
				t.Errorf("services %s and %s both run --target=%s", prev.Name, name, tg)
			}
			out[tg] = svc
		}
	}
	return out
}

func sortedNames(s types.Services) []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// hostFile maps a path inside svc's container to the repository file bind-mounted there.
func hostFile(t *testing.T, svc types.ServiceConfig, containerPath string) string {
	t.Helper()
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == containerPath {
			return v.Source
		}
	}
	t.Fatalf("service %s: nothing is mounted at %s", svc.Name, containerPath)
	return ""
}

// serveConfig loads the toolmesh config a `serve` service runs with (see loadServe), with
// the container paths of --config and --mcp-config mapped to the repository files compose
// mounts there, plus extra flags.
func serveConfig(t *testing.T, svc types.ServiceConfig, extra ...string) app.Config {
	t.Helper()
	return loadServe(t, append(containerArgsToHost(t, svc), extra...))
}

// containerArgsToHost is svc's command after "serve" with --config and --mcp-config pointing
// at the repository files compose mounts at those container paths.
func containerArgsToHost(t *testing.T, svc types.ServiceConfig) []string {
	t.Helper()
	var args []string
	for _, a := range svc.Command[1:] {
		for _, f := range []string{"--config=", "--mcp-config="} {
			if p, ok := strings.CutPrefix(a, f); ok {
				a = f + hostFile(t, svc, p)
			}
		}
		args = append(args, a)
	}
	return args
}

// exposed lists the container ports svc publishes or exposes.
func exposed(svc types.ServiceConfig) []string {
	var out []string
	for _, p := range svc.Ports {
		out = append(out, strconv.FormatUint(uint64(p.Target), 10))
	}
	for _, e := range svc.Expose {
		out = append(out, strings.Split(e, "/")[0])
	}
	slices.Sort(out)
	return slices.Compact(out)
}
