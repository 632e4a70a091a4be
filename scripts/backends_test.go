// Package scripts tests the shell scripts that install the tests' real backends: a required
// backend that cannot be installed must fail the run, never turn its tests into skips.
package scripts

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// closed is an address nothing listens on: every download from it fails at once.
const closed = "http://127.0.0.1:1"

// run runs a script of this folder with env added to a clean environment, bounded in time.
func run(t *testing.T, env []string, name string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./"+name, args...)
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GOTOOLCHAIN=local"}
	for _, v := range []string{"GOCACHE", "GOROOT"} {
		if val, ok := os.LookupEnv(v); ok {
			base = append(base, v+"="+val)
		}
	}
	cmd.Env = append(base, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not end within 2 minutes; stderr:\n%s", name, args, errb.String())
	}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String(), errb.String()
		}
		t.Fatalf("%s: %v", name, err)
	}
	return 0, out.String(), errb.String()
}

// TestFailedInstall breaks each backend's download (a mirror or registry on a closed port, an
// empty module cache with the proxy off, a fresh cache folder) and checks that it fails the run
// when the backend is required, and is reported and skipped when it is not.
func TestFailedInstall(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("bash: %v", err)
	}
	cases := []struct {
		backend  string
		required string
		exports  []string // every variable the backend's script exports
		env      func(t *testing.T) []string
	}{
		{"llama", "TOOLMESH_LLAMA_REQUIRED", []string{"TOOLMESH_LLAMA_SERVER"}, func(t *testing.T) []string {
			return []string{"TOOLMESH_DEBIAN_MIRROR=" + closed}
		}},
		{"chromium", "TOOLMESH_CHROMIUM_REQUIRED", []string{"TOOLMESH_CHROMIUM"}, func(t *testing.T) []string {
			return []string{"TOOLMESH_DEBIAN_MIRROR=" + closed, "TOOLMESH_DEBIAN_SECURITY_MIRROR=" + closed}
		}},
		{"jaeger", "TOOLMESH_JAEGER_REQUIRED", []string{"TOOLMESH_JAEGER"}, func(t *testing.T) []string {
			return []string{"TOOLMESH_SHARED_CACHE=" + t.TempDir(), "GOMODCACHE=" + t.TempDir(), "GOPROXY=off", "GOFLAGS=-modcacherw"}
		}},
		{"node", "TOOLMESH_NODE_REQUIRED", []string{
			"TOOLMESH_NODE", "TOOLMESH_EVERYTHING", "TOOLMESH_CONFORMANCE", "TOOLMESH_MCP_SDK", "TOOLMESH_OPENAI_SDK",
		}, func(t *testing.T) []string {
			return []string{"npm_config_registry=" + closed + "/", "npm_config_fetch_retries=0", "npm_config_fetch_timeout=2000"}
		}},
	}
	for _, tc := range cases {
		for _, required := range []bool{true, false} {
			name := tc.backend + "/optional"
			if required {
				name = tc.backend + "/required"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				env := append(tc.env(t), "TOOLMESH_CACHE="+t.TempDir())
				if required {
					env = append(env, tc.required+"=1")
				}
				code, stdout, stderr := run(t, env, "backends", tc.backend)
				for _, export := range tc.exports {
					if strings.Contains(stdout, export+"=") {
						t.Errorf("a failed install exported %s:\n%s", export, stdout)
					}
				}
				switch {
				case required && code == 0:
					t.Errorf("a failed install of a required %s exited 0; stderr:\n%s", tc.backend, stderr)
				case !required && code != 0:
					t.Errorf("a failed install of an optional %s exited %d, want 0 (its tests skip); stderr:\n%s", tc.backend, code, stderr)
				case !required && !strings.Contains(stderr, "tests will skip"):
					t.Errorf("an optional %s that failed to install does not say its tests skip; stderr:\n%s", tc.backend, stderr)
				}
			})
		}
	}
}

// TestTestStopsOnFailedInstall runs the README's test command (scripts/test) with the first
// install broken: it must stop with an error naming it, before the tests run.
func TestTestStopsOnFailedInstall(t *testing.T) {
	env := []string{
		"TOOLMESH_CACHE=" + t.TempDir(),
		"npm_config_registry=" + closed + "/", "npm_config_fetch_retries=0", "npm_config_fetch_timeout=2000",
	}
	code, stdout, stderr := run(t, env, "test")
	if code == 0 {
		t.Fatalf("scripts/test with Node 22 impossible to install exited 0\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	// The Go checks run while the backends install; the failed install stops the run at the
	// next step, long before the tests or the fuzz targets.
	if strings.Contains(stdout, "== fuzz") || strings.Contains(stdout, "== go test") {
		t.Errorf("scripts/test went on after the failed install:\n%s", stdout)
	}
	if !strings.Contains(stderr, "node is required") || !strings.Contains(stderr, "stopping") {
		t.Errorf("scripts/test does not say which required backend failed; stderr:\n%s", stderr)
	}
}
