package gobuild

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildAsTheTest: the program is built with -race exactly when the test is, as `go version
// -m` reads in the program's build settings.
func TestBuildAsTheTest(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "healthcheck")
	if err := Build(t.Context(), "", bin, "github.com/toolmesh/toolmesh/deploy/healthcheck"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	if got := strings.Contains(string(out), "-race=true"); got != Race() {
		t.Errorf("built with -race: %v; the test was: %v\n%s", got, Race(), out)
	}
}
