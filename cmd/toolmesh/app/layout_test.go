package app

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// module is the import path every package of the repository starts with.
const module = "github.com/toolmesh/toolmesh/"

// testOnly are the packages that exist for tests only: product code never imports them.
var testOnly = []string{
	"internal/eventually", "internal/fdcheck", "internal/testbackend", "internal/telemetry/jaegertest",
	"internal/llamatest", "services/inference/chat/chattest",
	"services/retriever/store/qdrant/qdranttest", "services/inference/gorilla/gbnf", "mcpservers/internal/mcptesting",
}

// TestImportRules keeps docs/architecture.md's "Where things live" true, test files included:
// the layers only point down (cmd → the composition root and the CLI → services → the shared
// libraries of internal/ and mcpservers/), a service never imports another service (they talk
// over gRPC, in one process too), nothing outside bench/ imports bench/, and no product code
// imports a test-only package.
func TestImportRules(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case strings.HasPrefix(d.Name(), ".") && rel != ".", d.Name() == "testdata", d.Name() == "node_modules",
				rel == "tools", rel == "gen":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		from := filepath.ToSlash(filepath.Dir(rel))
		test := strings.HasSuffix(path, "_test.go")
		for _, im := range f.Imports {
			imp, _ := strconv.Unquote(im.Path.Value)
			to, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if why := importRule(from, test, to); why != "" {
				t.Errorf("%s imports %s: %s", rel, imp, why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked only %d files: is the walk rooted at the repository?", checked)
	}
}

// TestImportRuleCases: the rules refuse each way of pointing up (or across) and let through
// what the layers allow, on synthetic imports (the tree itself has none to refuse).
func TestImportRuleCases(t *testing.T) {
	cases := []struct {
		from string
		test bool
		to   string
		want string // a part of the refusal; "" for an import the rules allow
	}{
		// Down the layers.
		{from: "cmd/toolmesh", to: "cmd/toolmesh/cli"},
		{from: "cmd/toolmesh/cli", to: "cmd/toolmesh/app"},
		{from: "cmd/toolmesh/app", to: "services/executor"},
		{from: "services/api", to: "internal/policy"},
		{from: "services/api/mcpface", to: "services/api"},
		{from: "mcpservers/calculator", to: "mcpservers/serve"},
		{from: "mcpservers/serve", to: "internal/webguard"},
		{from: "internal/llamaserver", to: "internal/modelfetch"},
		{from: "services/executor", test: true, to: "internal/testbackend"},
		// The programs that run the whole mesh in their own process.
		{from: "bench/loop", to: "cmd/toolmesh/app"},
		{from: "bench/internal/inproc", to: "services/api"},
		{from: "deploy", test: true, to: "cmd/toolmesh/app"},
		{from: "deploy", test: true, to: "cmd/toolmesh/cli"},
		{from: "conformance", test: true, to: "cmd/toolmesh/cli"},
		{from: "cmd/toolmesh-conformance", to: "conformance"},
		// Up from the shared libraries.
		{from: "internal/policy", to: "services/api", want: "a shared library never imports a service"},
		{from: "internal/llamatest", test: true, to: "services/inference/llama", want: "a shared library never imports a service"},
		{from: "mcpservers/serve", to: "services/executor", want: "a shared library never imports a service"},
		{from: "internal/server", to: "cmd/toolmesh/app", want: "a shared library never imports cmd/"},
		{from: "mcpservers/calculator", test: true, to: "cmd/toolmesh/cli", want: "a shared library never imports cmd/"},
		// Up from the services.
		{from: "services/api", to: "cmd/toolmesh/app", want: "a service never imports cmd/"},
		{from: "services/executor", test: true, to: "cmd/toolmesh/cli", want: "a service never imports cmd/"},
		// Across the services.
		{from: "services/api", to: "services/executor", want: "services talk over gRPC"},
		{from: "services/retriever/index", test: true, to: "services/inference/llama", want: "a service's tests never import another service's package"},
		// The composition root and the CLI from outside cmd/.
		{from: "internal/localclient", to: "cmd/toolmesh/app", want: "a shared library never imports cmd/"},
		{from: "scripts", test: true, to: "cmd/toolmesh/cli", want: "only cmd/, bench/, deploy/ and conformance/ import"},
		{from: "testdata/bfcl", to: "cmd/toolmesh/app", want: "only cmd/, bench/, deploy/ and conformance/ import"},
		// bench/ and the test-only packages.
		{from: "services/api", to: "bench/internal/inproc", want: "bench/ is imported by nothing outside it"},
		{from: "services/api", test: true, to: "bench/internal/inproc", want: "bench/ is imported by nothing outside it"},
		{from: "internal/server", to: "internal/eventually", want: "exists for tests only"},
		{from: "internal/server", test: true, to: "internal/eventually"},
		{from: "bench/loop", to: "internal/llamatest"},
		{from: "deploy", test: true, to: "bench/internal/inproc", want: "bench/ is imported by nothing outside it"},
	}
	for _, tc := range cases {
		got := importRule(tc.from, tc.test, tc.to)
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s (test %v) importing %s refused (%s), want it allowed", tc.from, tc.test, tc.to, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s (test %v) importing %s: got %q, want it refused with %q", tc.from, tc.test, tc.to, got, tc.want)
		}
	}
}

// importRule is why the package from (its folder, relative to the repository) may not import
// the package to (its import path without the module's prefix), or "" when it may. test says
// whether the importing file is a test.
func importRule(from string, test bool, to string) string {
	switch fromLayer, toLayer := layerOf(from), layerOf(to); {
	case fromLayer == "library" && toLayer == "service":
		return "a shared library never imports a service (the layers point down: cmd → the composition root and the CLI → services → internal/ and mcpservers/)"
	case fromLayer == "library" && toLayer == "cmd":
		return "a shared library never imports cmd/ (the composition root and the CLI stand on it)"
	case fromLayer == "service" && toLayer == "cmd":
		return "a service never imports cmd/ (the composition root wires the services, not the other way round)"
	case fromLayer == "service" && toLayer == "service" && serviceOf(from) != serviceOf(to):
		if test {
			// A service's tests use the shared doubles (internal/llamatest...), not another
			// service's packages.
			return "a service's tests never import another service's package"
		}
		return "services talk over gRPC, never by import"
	case toLayer == "cmd" && !under(from, "cmd", "bench", "deploy", "conformance"):
		// They stand outside the layers and run the binary's own code in their process:
		// bench/ runs the targets (or the whole CLI) as `toolmesh up` does, to measure the
		// mesh without a build between runs; deploy/'s tests read compose's and the chart's
		// configuration with the root's own Config and run model-init's command through the
		// CLI, so that what they check is what the binary does; conformance/'s test binary
		// runs as `toolmesh` itself (cli.Main) for the MCP conformance suite.
		return "only cmd/, bench/, deploy/ and conformance/ import the composition root and the CLI"
	case under(to, "bench") && !under(from, "bench"):
		return "bench/ is imported by nothing outside it: product code (and its tests) never depends on bench/"
	}
	if test || under(from, "bench", "conformance", "cmd/toolmesh-conformance") || isTestOnly(from) {
		return ""
	}
	if isTestOnly(to) {
		return "it exists for tests only"
	}
	return ""
}

// layerOf is the layer of a package: "cmd" (the binaries, the composition root and the CLI),
// "service" (services/), "library" (internal/ and mcpservers/), or "" (bench/, deploy/,
// conformance/, scripts/ and the rest, which stand outside the layers).
func layerOf(pkg string) string {
	switch {
	case under(pkg, "cmd"):
		return "cmd"
	case under(pkg, "services"):
		return "service"
	case under(pkg, "internal", "mcpservers"):
		return "library"
	}
	return ""
}

// under reports whether pkg is one of folders or below one.
func under(pkg string, folders ...string) bool {
	for _, f := range folders {
		if pkg == f || strings.HasPrefix(pkg, f+"/") {
			return true
		}
	}
	return false
}

func isTestOnly(pkg string) bool { return under(pkg, testOnly...) }

// serviceOf is the service a package belongs to (services/NAME/...), or "".
func serviceOf(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, "services/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}
