// Package configfuzz fuzzes the app's config loading from a package of its own: its test
// binary holds the app without the app's test dependencies (a browser driver, an OpenID
// provider, the OpenAI SDK), which fuzzing would otherwise compile again, instrumented.
package configfuzz

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
)

// FuzzConfigLoad feeds Config.Load a YAML file (seeded from testdata and the deploy configs)
// with one command-line flag on top: it must return a config or an error, never panic, and
// a loaded config must survive Validate.
func FuzzConfigLoad(f *testing.F) {
	files, err := filepath.Glob("../testdata/syntax/*.yaml") // each a mistake the errors must place
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range append([]string{"../testdata/toolmesh.yaml", "../testdata/unknown-key.yaml", "../../../../deploy/toolmesh.yaml"}, files...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "--drain-timeout=1s")
	}
	for _, s := range []string{
		"", "{}", "[]", "null", "api:\n  k: 3\n", "api: [1, 2]\n", "drain-timeout: ~\n", "config: other.yaml\n",
		"api:\n  - {a: 1}\n", "mcpServers: 3\n", "mcpServers:\n  Bad Name:\n    url: http://x\n",
		"mcpServers:\n  s:\n    command: echo\n    args: [hi]\n    env: {A: '${B:-c}'}\n",
		"mcpServers:\n  s:\n    url: ':::'\n    transport: carrier-pigeon\n",
		"log: {level: loud}\n", "&a [*a]\n", "a: &a {b: *a}\n", "? [1]\n: 2\n", "api.http-addr: 127.0.0.1:1\n",
		"inference:\n  llm:\n    url: http://127.0.0.1:8080\n", "!!binary aGk=\n", "\xff\xfe: 1\n",
	} {
		f.Add(s, "--log.format=json")
	}
	// One file per process, rewritten for each input: a fresh t.TempDir costs more than Load.
	path := filepath.Join(f.TempDir(), "toolmesh.yaml")
	f.Fuzz(func(t *testing.T, yamlText, flagArg string) {
		if err := os.WriteFile(path, []byte(yamlText), 0o600); err != nil {
			t.Fatal(err)
		}
		fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var c app.Config
		c.RegisterFlags(fs)
		c.RegisterDemoFlags(fs)
		args := []string{"--config", path}
		if strings.HasPrefix(flagArg, "--") && !strings.HasPrefix(flagArg, "--config") && !strings.HasPrefix(flagArg, "--mcp-config") {
			args = append(args, flagArg)
		}
		if err := c.Load(fs, args); err != nil {
			if err.Error() == "" {
				t.Fatalf("Load(%q) failed with an empty error", yamlText)
			}
			return
		}
		c.Targets = app.ServeTargets()
		_ = c.Validate()
	})
}
