package app_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
	"github.com/toolmesh/toolmesh/cmd/toolmesh/cli"
	"github.com/toolmesh/toolmesh/internal/secret"
)

var update = flag.Bool("update", false, "rewrite docs/operations/config.md from the flags")

// referencePath is the generated configuration reference, from this package's directory.
var referencePath = filepath.Join("..", "..", "..", "docs", "operations", "config.md")

// TestConfigReference renders every flag of `toolmesh serve` and `toolmesh up` (name, type,
// default, help) into docs/operations/config.md and fails when the file is stale; with
// -update (`make docs`) it rewrites the file instead.
func TestConfigReference(t *testing.T) {
	got := renderReference(t)
	if *update {
		if err := os.WriteFile(referencePath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v (run `make docs`)", err)
	}
	if string(want) != got {
		t.Errorf("%s is stale: the flags changed; run `make docs` and commit the result", referencePath)
	}
}

// row is one flag as the reference shows it.
type row struct {
	name, typ, def, usage string
}

// commandFlags registers a command's flags the way cmd/toolmesh/cli does (app.Config's flags, and
// for `up` the demo flags), and adds the flags only cmd/toolmesh/cli defines, read from the
// command's own -h output. It fails if the -h output and the rows disagree on the names.
func commandFlags(t *testing.T, command string) map[string]row {
	t.Helper()
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	var cfg app.Config
	cfg.RegisterFlags(fs)
	if command == "up" {
		cfg.RegisterDemoFlags(fs)
	}
	rows := map[string]row{}
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		rows[f.Name] = row{name: f.Name, typ: typ, def: f.DefValue, usage: usage}
	})
	help := helpFlags(t, command)
	for name, r := range help {
		if _, ok := rows[name]; !ok {
			rows[name] = r
		}
	}
	for name := range rows {
		if _, ok := help[name]; !ok {
			t.Errorf("toolmesh %s -h does not list -%s", command, name)
		}
	}
	return rows
}

var helpFlagLine = regexp.MustCompile(`^  -(\S+)(?: (\S+))?$`)

// helpFlags parses the flag list that `toolmesh COMMAND -h` prints (flag.PrintDefaults).
func helpFlags(t *testing.T, command string) map[string]row {
	t.Helper()
	var out bytes.Buffer
	if code := cli.Main(context.Background(), []string{command, "-h"}, strings.NewReader(""), io.Discard, &out); code != 0 {
		t.Fatalf("toolmesh %s -h exited %d:\n%s", command, code, out.String())
	}
	rows := map[string]row{}
	var cur *row
	flush := func() {
		if cur != nil {
			if m := regexp.MustCompile(` \(default (.*)\)$`).FindStringSubmatch(cur.usage); m != nil {
				cur.def = strings.Trim(m[1], `"`)
				cur.usage = strings.TrimSuffix(cur.usage, m[0])
			}
			rows[cur.name] = *cur
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if m := helpFlagLine.FindStringSubmatch(line); m != nil {
			flush()
			cur = &row{name: m[1], typ: m[2]}
			continue
		}
		if cur != nil && strings.HasPrefix(line, "    \t") {
			cur.usage = strings.TrimSpace(cur.usage + " " + strings.TrimSpace(line))
		}
	}
	flush()
	if len(rows) == 0 {
		t.Fatalf("toolmesh %s -h lists no flags:\n%s", command, out.String())
	}
	return rows
}

func renderReference(t *testing.T) string {
	t.Helper()
	serve, up := commandFlags(t, "serve"), commandFlags(t, "up")
	var both, serveOnly, upOnly []row
	for name, r := range serve {
		if _, ok := up[name]; ok {
			both = append(both, r)
		} else {
			serveOnly = append(serveOnly, r)
		}
	}
	for name, r := range up {
		if _, ok := serve[name]; !ok {
			upOnly = append(upOnly, r)
		}
	}

	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from the flags by cmd/toolmesh/app/reference_test.go: run ` + "`make docs`" + ` after changing a flag. Do not edit. -->

Every setting of ` + "`toolmesh serve`" + ` and ` + "`toolmesh up`" + ` is a flag. The same names are the keys of
the YAML file given with ` + "`--config`" + `: a dot nests, so ` + "`--api.http-addr=0.0.0.0:7700`" + ` is

` + "```yaml" + `
api:
  http-addr: 0.0.0.0:7700
` + "```" + `

Flags set the defaults below, the file overlays them, and flags given on the command line win over
the file. The file may also hold an inline ` + "`mcpServers`" + ` map (the format of ` + "`--mcp-config`" + `).
Settings apply at a start; only the MCP servers (that map and ` + "`--mcp-config`" + `) are read again
while running, when their file changes or on SIGHUP (see [reloading](README.md#reloading-the-mcp-servers)).
Secrets are never flags: they come from the environment (see [operations](README.md#secrets)).
`)
	section := func(title, intro string, rows []row) {
		slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.name, b.name) })
		fmt.Fprintf(&b, "\n## %s\n\n", title)
		if intro != "" {
			b.WriteString(intro + "\n\n")
		}
		b.WriteString("| Flag | Type | Default | Description |\n|---|---|---|---|\n")
		for _, r := range rows {
			def := ""
			if r.def != "" {
				def = "`" + r.def + "`"
			}
			typ := r.typ
			if typ == "" {
				typ = "bool"
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", r.name, typ, def, cell(r.usage))
		}
	}
	section("Both commands", "`toolmesh serve --target=...` and `toolmesh up` accept these.", both)
	section("Only `toolmesh serve`", "", serveOnly)
	section("Only `toolmesh up`", "`up` also runs the shipped demo MCP servers on loopback.", upOnly)

	b.WriteString("\n## Secrets (environment)\n\nRead from the environment at start, never from a flag or the config file; each is\n" +
		"declared beside the config field it fills (`Secrets()` of each service's config).\n\n" +
		"| Variable | What it is |\n|---|---|\n")
	var cfg app.Config
	vars := cfg.Secrets()
	slices.SortFunc(vars, func(a, b secret.Var) int { return strings.Compare(a.Env, b.Env) })
	for _, v := range vars {
		fmt.Fprintf(&b, "| `%s` | %s |\n", v.Env, cell(v.Usage))
	}
	return b.String()
}

// cell makes text safe in a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
