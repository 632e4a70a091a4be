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

// TestImportRules keeps docs/architecture.md's "Where things live" true: a service package never
// imports another service (they talk over gRPC, in one process too), nor do its tests, and no
// product code (test files aside) imports bench/ or the packages that exist only for tests.
func TestImportRules(t *testing.T) {
	const mod = "github.com/toolmesh/toolmesh/"
	testOnly := []string{
		"internal/eventually", "internal/fdcheck", "internal/testbackend", "internal/telemetry/jaegertest",
		"internal/llamatest", "services/inference/chat/chattest",
		"services/retriever/store/qdrant/qdranttest", "services/inference/gorilla/gbnf", "mcpservers/internal/mcptesting",
	}
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
		test := strings.HasSuffix(path, "_test.go")
		pkg := filepath.ToSlash(filepath.Dir(rel))
		product := !test && !strings.HasPrefix(pkg, "bench") && !strings.HasPrefix(pkg, "conformance") && !strings.HasPrefix(pkg, "cmd/toolmesh-conformance")
		for _, to := range testOnly {
			if pkg == to || strings.HasPrefix(pkg, to+"/") {
				product = false
			}
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
		for _, im := range f.Imports {
			imp, _ := strconv.Unquote(im.Path.Value)
			target, ok := strings.CutPrefix(imp, mod)
			if !ok {
				continue
			}
			if serviceOf(pkg) != "" && serviceOf(target) != "" && serviceOf(pkg) != serviceOf(target) {
				if test {
					// A service's tests use the shared doubles (internal/llamatest...), not
					// another service's packages.
					t.Errorf("%s imports %s: a service's tests never import another service's package", rel, imp)
				} else {
					t.Errorf("%s imports %s: services talk over gRPC, never by import", rel, imp)
				}
			}
			if !product {
				continue
			}
			if strings.HasPrefix(target, "bench/") {
				t.Errorf("%s imports %s: product code never depends on bench/", rel, imp)
			}
			for _, to := range testOnly {
				if target == to {
					t.Errorf("%s imports %s, which exists for tests only", rel, imp)
				}
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

// serviceOf is the service a package belongs to (services/NAME/...), or "".
func serviceOf(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, "services/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}
