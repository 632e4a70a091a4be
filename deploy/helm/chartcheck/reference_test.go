package chartcheck

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the values reference in docs/operations/kubernetes.md")

const (
	valuesPath = chartDir + "/values.yaml"
	docPath    = "../../../docs/operations/kubernetes.md"
	beginMark  = "<!-- BEGIN values reference: generated from deploy/helm/toolmesh/values.yaml by deploy/helm/chartcheck (make docs). Do not edit. -->"
	endMark    = "<!-- END values reference -->"
)

// TestValuesReference fails while the values reference in docs/operations/kubernetes.md is not
// what values.yaml's comments say, or while a value has no comment; -update rewrites it.
func TestValuesReference(t *testing.T) {
	src, err := os.ReadFile(valuesPath)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := valuesReference(src)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, ok := strings.Cut(string(doc), beginMark)
	_, tail, ok2 := strings.Cut(rest, endMark)
	if !ok || !ok2 {
		t.Fatalf("%s: the markers around the values reference are missing:\n%s\n%s", docPath, beginMark, endMark)
	}
	want := head + beginMark + "\n\n" + ref + "\n" + endMark + tail
	if want == string(doc) {
		return
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the values reference in %s", docPath)
		return
	}
	t.Errorf("%s: the values reference is stale; run `make docs` (or go test -run TestValuesReference -update in deploy/helm/chartcheck)", docPath)
}

// valuesReference writes one table per top-level section of values.yaml (top-level values
// that are not sections go together in a first table). A mapping whose keys carry comments is
// a section and is walked; any other value is one row: its dotted key, type, default and the
// comment above it. Every row must have a comment.
func valuesReference(src []byte) (string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		return "", fmt.Errorf("values.yaml: %w", err)
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("values.yaml: not a mapping")
	}
	top := root.Content[0]
	var out bytes.Buffer
	var general []row
	var sections bytes.Buffer
	for i := 0; i < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if !isSection(v) {
			r, err := leaf(k.Value, k, v)
			if err != nil {
				return "", err
			}
			general = append(general, r)
			continue
		}
		about := comment(k)
		if about == "" {
			return "", fmt.Errorf("values.yaml: %s has no comment", k.Value)
		}
		var rows []row
		if err := walk(k.Value, v, &rows); err != nil {
			return "", err
		}
		fmt.Fprintf(&sections, "### `%s`\n\n%s\n\n", k.Value, about)
		writeTable(&sections, rows)
	}
	out.WriteString("### General\n\n")
	writeTable(&out, general)
	out.Write(sections.Bytes())
	return strings.TrimRight(out.String(), "\n") + "\n", nil
}

type row struct{ key, typ, def, about string }

func walk(prefix string, m *yaml.Node, rows *[]row) error {
	for i := 0; i < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + "." + k.Value
		if isSection(v) {
			if comment(k) == "" {
				return fmt.Errorf("values.yaml: %s has no comment", key)
			}
			*rows = append(*rows, row{key: key, typ: "", def: "", about: comment(k)})
			if err := walk(key, v, rows); err != nil {
				return err
			}
			continue
		}
		r, err := leaf(key, k, v)
		if err != nil {
			return err
		}
		*rows = append(*rows, r)
	}
	return nil
}

func leaf(key string, k, v *yaml.Node) (row, error) {
	about := comment(k)
	if about == "" {
		return row{}, fmt.Errorf("values.yaml: %s has no comment", key)
	}
	var val any
	if err := v.Decode(&val); err != nil {
		return row{}, fmt.Errorf("values.yaml: %s: %w", key, err)
	}
	def, err := json.Marshal(val)
	if err != nil {
		return row{}, fmt.Errorf("values.yaml: %s: %w", key, err)
	}
	return row{key: key, typ: kind(v), def: string(def), about: about}, nil
}

// isSection: a mapping whose keys are documented one by one.
func isSection(v *yaml.Node) bool {
	if v.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i < len(v.Content); i += 2 {
		if comment(v.Content[i]) != "" {
			return true
		}
	}
	return false
}

func kind(v *yaml.Node) string {
	switch v.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "map"
	}
	switch v.Tag {
	case "!!int":
		return "int"
	case "!!bool":
		return "bool"
	case "!!float":
		return "number"
	case "!!null":
		return "null"
	}
	return "string"
}

// comment is the comment block right above a key, as one line.
func comment(k *yaml.Node) string {
	var lines []string
	for _, l := range strings.Split(k.HeadComment, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		if l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " ")
}

func writeTable(b *bytes.Buffer, rows []row) {
	b.WriteString("| Value | Type | Default | Description |\n|---|---|---|---|\n")
	for _, r := range rows {
		def := "`" + r.def + "`"
		if r.typ == "" {
			def = ""
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, cell(def), cell(r.about))
	}
	b.WriteString("\n")
}

// cell keeps a table cell on one line and its pipes from ending the cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}
