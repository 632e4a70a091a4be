package executor

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// diffContext is how many unchanged lines a diff shows around each change.
const diffContext = 3

// maxDiffCells bounds the line diff's table (lines before × lines after); past it the diff shows
// the whole of both definitions instead.
const maxDiffCells = 4_000_000

// definitionDiff shows what changed from the pinned definition before (nil: never pinned) to
// after, as a unified diff of their lines (definitionLines), for the person approving it.
func definitionDiff(id, wasHash string, before, after *toolmeshv1.Tool) string {
	var b strings.Builder
	if before == nil {
		fmt.Fprintf(&b, "--- pinned %s (none)\n", id)
	} else {
		fmt.Fprintf(&b, "--- pinned %s %s\n", id, wasHash)
	}
	fmt.Fprintf(&b, "+++ listed %s %s\n", id, after.GetHash())
	old, cur := definitionLines(before), definitionLines(after)
	for _, op := range lineDiff(old, cur) {
		b.WriteString(op)
		b.WriteByte('\n')
	}
	return b.String()
}

// definitionLines are a definition's fields one per line (a description's further lines and
// the schemas' indented JSON below their field), then its findings.
func definitionLines(t *toolmeshv1.Tool) []string {
	if t == nil {
		return nil
	}
	if t.GetName() == "" {
		// A pin written by hand holds the hash alone.
		return []string{"(the pin holds no definition, only its hash " + t.GetHash() + ")"}
	}
	out := []string{"name: " + t.GetName()}
	if t.GetTitle() != "" {
		out = append(out, "title: "+t.GetTitle())
	}
	for i, line := range strings.Split(t.GetDescription(), "\n") {
		if i == 0 {
			out = append(out, "description: "+line)
		} else {
			out = append(out, "  "+line)
		}
	}
	for _, s := range []struct {
		name   string
		schema interface{ AsMap() map[string]any }
		set    bool
	}{{"input_schema", t.GetInputSchema(), t.GetInputSchema() != nil}, {"output_schema", t.GetOutputSchema(), t.GetOutputSchema() != nil}} {
		if !s.set {
			continue
		}
		b, err := json.MarshalIndent(s.schema.AsMap(), "  ", "  ")
		if err != nil {
			continue
		}
		out = append(out, s.name+":")
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "  ") {
				line = "  " + line
			}
			out = append(out, line)
		}
	}
	if a := t.GetAnnotations(); a != nil {
		var hints []string
		for _, h := range []struct {
			name string
			v    *bool
		}{{"read_only_hint", a.ReadOnlyHint}, {"destructive_hint", a.DestructiveHint}, {"idempotent_hint", a.IdempotentHint}, {"open_world_hint", a.OpenWorldHint}} {
			if h.v != nil {
				hints = append(hints, fmt.Sprintf("%s=%t", h.name, *h.v))
			}
		}
		if len(hints) > 0 {
			out = append(out, "annotations: "+strings.Join(hints, " "))
		}
	}
	for _, f := range t.GetFindings() {
		out = append(out, fmt.Sprintf("finding: %s in %s (%s): %s", findingName(f.GetKind()), f.GetField(), f.GetRule(), f.GetExcerpt()))
	}
	return out
}

func findingName(k toolmeshv1.FindingKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "FINDING_KIND_"))
}

func pinEventName(t toolmeshv1.PinEventType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "PIN_EVENT_TYPE_"))
}

// lineDiff is a and b as diff lines ("-", "+" or " " then the line), unchanged runs longer than
// the context around them shortened to "@@ N unchanged lines @@".
func lineDiff(a, b []string) []string {
	type op struct {
		kind byte
		line string
	}
	var ops []op
	if len(a)*len(b) > maxDiffCells {
		for _, l := range a {
			ops = append(ops, op{'-', l})
		}
		for _, l := range b {
			ops = append(ops, op{'+', l})
		}
	} else {
		// Longest common subsequence, from the ends.
		n, m := len(a), len(b)
		lcs := make([][]int32, n+1)
		for i := range lcs {
			lcs[i] = make([]int32, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if a[i] == b[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && a[i] == b[j]:
				ops = append(ops, op{' ', a[i]})
				i++
				j++
			case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
				// What went comes before what came, as diff(1) writes it.
				ops = append(ops, op{'-', a[i]})
				i++
			default:
				ops = append(ops, op{'+', b[j]})
				j++
			}
		}
	}
	var out []string
	for k := 0; k < len(ops); {
		if ops[k].kind != ' ' {
			out = append(out, string(ops[k].kind)+ops[k].line)
			k++
			continue
		}
		end := k
		for end < len(ops) && ops[end].kind == ' ' {
			end++
		}
		keepHead, keepTail := diffContext, diffContext
		if k == 0 {
			keepHead = 0
		}
		if end == len(ops) {
			keepTail = 0
		}
		if end-k <= keepHead+keepTail {
			for ; k < end; k++ {
				out = append(out, " "+ops[k].line)
			}
			continue
		}
		for x := k; x < k+keepHead; x++ {
			out = append(out, " "+ops[x].line)
		}
		out = append(out, fmt.Sprintf("@@ %d unchanged lines @@", end-k-keepHead-keepTail))
		for x := end - keepTail; x < end; x++ {
			out = append(out, " "+ops[x].line)
		}
		k = end
	}
	return out
}

func sortPending(ps []*toolmeshv1.PendingTool) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].GetTool().GetId() < ps[j].GetTool().GetId() })
}
