package deploy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/cli"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/modelfetch/hubtest"
)

// TestComposeModelInit: each model server's GGUF is put in the models volume by a one-shot
// service that runs the toolmesh image's own fetcher (`toolmesh model pull NAME --models-dir
// /models`) for a registry name pinned to a commit, and the server loads the file from
// where that fetcher puts it. The command is run here for real, with the models volume a
// temporary folder and the hub a double serving the pinned coordinates (a few bytes in place
// of the model): it asks for the pinned commit, verifies the bytes against the SHA-256 the hub
// states, and writes the file llama-server is told to load.
func TestComposeModelInit(t *testing.T) {
	p := loadProject(t, []string{composeFile}, []string{"*"}, nil)
	image := serveServices(t, p)["api"].Image
	for _, pair := range []struct{ init, server string }{{"model-init", "llama-server"}, {"model-init-embed", "llama-embed"}} {
		t.Run(pair.init, func(t *testing.T) {
			init, server := p.Services[pair.init], p.Services[pair.server]
			cmd := init.Command
			if init.Image != image || len(cmd) < 3 || cmd[0] != "model" || cmd[1] != "pull" {
				t.Fatalf("%s: image %q, command %v; want the toolmesh image %q running `toolmesh model pull NAME`", pair.init, init.Image, cmd, image)
			}
			if dir, _ := flagValue(cmd, "models-dir"); dir != "/models" {
				t.Errorf("%s: --models-dir %q, want /models", pair.init, dir)
			}
			if !sharesVolume(init, server, "/models") {
				t.Errorf("%s does not write the models volume %s reads at /models", pair.init, pair.server)
			}
			if dep, ok := server.DependsOn[pair.init]; !ok || dep.Condition != "service_completed_successfully" {
				t.Errorf("%s does not wait for %s to finish: %+v", pair.server, pair.init, dep)
			}
			if _, ok := init.Environment[modelfetch.EnvToken]; !ok {
				t.Errorf("%s does not pass %s on (gated repositories need it)", pair.init, modelfetch.EnvToken)
			}
			loads, _ := flagValue(server.Command, "m")
			runModelPull(t, cmd, "/models", loads, pair.server)
		})
	}
}

// runModelPull runs `toolmesh CMD` (`model pull NAME --models-dir MOUNT`) for real, with the
// models volume a temporary folder and the hub a double serving the pinned coordinates (a few
// bytes in place of the model), and checks that it asks for the pinned commit, verifies the
// bytes against the SHA-256 the hub states, and writes the file server loads as `loads`.
func runModelPull(t *testing.T, cmd []string, mount, loads, server string) {
	t.Helper()
	k, ok := modelfetch.Lookup(cmd[2])
	if !ok || !k.Ref().Pinned() {
		t.Fatalf("`toolmesh %s` pulls %q: want a registry name pinned to a commit (got %+v)", strings.Join(cmd, " "), cmd[2], k)
	}
	rel, ok := strings.CutPrefix(loads, mount+"/")
	if !ok {
		t.Fatalf("%s loads %q, not a file of the models volume %s", server, loads, mount)
	}
	hub := hubtest.NewFromEnv(t)
	sum := hub.File(k.Repo, k.Revision, k.File, []byte("GGUF stand-in for "+k.Name), true)
	dir := t.TempDir()
	args := slices.Clone(cmd)
	i := slices.Index(args, mount)
	if i < 0 {
		t.Fatalf("`toolmesh %s` does not name the models volume %s", strings.Join(cmd, " "), mount)
	}
	args[i] = dir
	var stdout, stderr bytes.Buffer
	if code := cli.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("toolmesh %s: exit %d\n%s", strings.Join(cmd, " "), code, stderr.String())
	}
	want := filepath.Join(dir, filepath.FromSlash(rel))
	if got := strings.TrimSpace(stdout.String()); got != want {
		t.Errorf("`toolmesh %s` wrote %s, but %s loads %s", strings.Join(cmd, " "), got, server, loads)
	}
	if _, err := os.Stat(want); err != nil {
		t.Errorf("%s: %v", server, err)
	}
	var asked bool
	for _, r := range hub.Requests() {
		asked = asked || (r.Method == "HEAD" && strings.Contains(r.Path, "/resolve/"+k.Revision+"/"))
	}
	if !asked || !strings.Contains(stderr.String(), "sha256="+sum) {
		t.Errorf("the pull did not ask for commit %s or did not check sha256 %s:\n%s", k.Revision, sum, stderr.String())
	}
}
