package chartcheck

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// servedDir holds, for each case, what each toolmesh container of the rendered chart runs
// with: its arguments, its environment variables' names and the files its ConfigMap mount
// holds. This module cannot import toolmesh's own config code without taking in the whole
// main module, so the main module reads these files instead: deploy/chart_test.go loads each
// target's configuration with toolmesh's loader and validates it, as `toolmesh serve` would
// at start-up. A stale file fails here; -update rewrites them.
const servedDir = "testdata/served"

// served is one case's file.
type served struct {
	// Files are the ConfigMap files by their path in the container.
	Files map[string]string `json:"files"`
	// Targets are the toolmesh containers by --target.
	Targets map[string]servedTarget `json:"targets"`
	// Model is llama-server's model, when llama-server runs in the release.
	Model *servedModel `json:"model,omitempty"`
}

// servedModel: the init container's `toolmesh model pull` arguments, where it mounts the
// model volume, and the file llama-server loads from it (-m).
type servedModel struct {
	PullArgs []string `json:"pull_args"`
	Dir      string   `json:"dir"`
	Loads    string   `json:"loads"`
}

type servedTarget struct {
	Args []string `json:"args"`
	// Env names every variable; secrets are only named, never valued (the chart has none).
	Env []string `json:"env"`
}

func TestServedConfig(t *testing.T) {
	for _, name := range cases {
		t.Run(name, func(t *testing.T) {
			r := render(t, valuesFile(t, name))
			got := served{Files: map[string]string{}, Targets: map[string]servedTarget{}}
			for _, c := range toolmeshTargets {
				d := r.deployments[c]
				ctr := container(t, d, c)
				var env []string
				for _, e := range ctr.Env {
					env = append(env, e.Name)
				}
				got.Targets[c] = servedTarget{Args: ctr.Args, Env: env}
				for path, f := range configMapFiles(t, r, c) {
					if prev, dup := got.Files[path]; dup && prev != f.data {
						t.Fatalf("%s differs between containers", path)
					}
					got.Files[path] = f.data
				}
			}
			if d := r.deployments["llama-server"]; d != nil && len(d.Spec.Template.Spec.InitContainers) == 1 {
				pull := d.Spec.Template.Spec.InitContainers[0]
				llama := container(t, d, "llama-server")
				i := slices.Index(llama.Args, "-m")
				if i < 0 || len(pull.VolumeMounts) == 0 {
					t.Fatalf("llama-server: no -m, or model-pull mounts nothing")
				}
				got.Model = &servedModel{PullArgs: pull.Args, Dir: pull.VolumeMounts[0].MountPath, Loads: llama.Args[i+1]}
			}
			js, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			js = append(js, '\n')
			file := filepath.Join(servedDir, name+".json")
			want, err := os.ReadFile(file)
			if bytes.Equal(js, want) {
				return
			}
			if *update {
				if err := os.MkdirAll(servedDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, js, 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("rewrote %s", file)
				return
			}
			if err != nil {
				t.Fatalf("%v (run go test -run TestServedConfig -update here, or make docs)", err)
			}
			t.Errorf("%s is stale: run `make docs` (or go test -run TestServedConfig -update in deploy/helm/chartcheck), then the main module's go test ./deploy", file)
		})
	}
	// A case dropped from the list must not leave its file behind for the main module to check.
	entries, err := os.ReadDir(servedDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.Contains(cases, strings.TrimSuffix(e.Name(), ".json")) {
			t.Errorf("%s/%s belongs to no case: remove it", servedDir, e.Name())
		}
	}
}

// mountedFile is one ConfigMap key as a container has it mounted.
type mountedFile struct {
	key  string // ConfigMap/key
	data string
}

// configMapFiles are the ConfigMap files component's container mounts, by their path in it.
func configMapFiles(t *testing.T, r *rendered, component string) map[string]mountedFile {
	t.Helper()
	d := r.deployments[component]
	out := map[string]mountedFile{}
	for _, m := range container(t, d, component).VolumeMounts {
		v := volumeOf(d, &m)
		if v == nil || v.ConfigMap == nil {
			continue
		}
		cm := r.configMaps[v.ConfigMap.Name]
		if cm == nil {
			t.Fatalf("%s mounts ConfigMap %s, which is not rendered", component, v.ConfigMap.Name)
		}
		for _, it := range configMapItems(v.ConfigMap, cm) {
			data, ok := cm.Data[it.Key]
			if !ok {
				t.Fatalf("%s mounts key %s of ConfigMap %s, which has no such key", component, it.Key, cm.Name)
			}
			out[filepath.Join(m.MountPath, it.Path)] = mountedFile{key: cm.Name + "/" + it.Key, data: data}
		}
	}
	return out
}

func configMapItems(src *corev1.ConfigMapVolumeSource, cm *corev1.ConfigMap) []corev1.KeyToPath {
	if len(src.Items) > 0 {
		return src.Items
	}
	var items []corev1.KeyToPath
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		items = append(items, corev1.KeyToPath{Key: k, Path: k})
	}
	return items
}
