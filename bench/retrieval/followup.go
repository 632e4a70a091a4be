package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/toolmesh/toolmesh/services/retriever/index"
)

// The follow-up benchmark measures what the agent loop searches for from its second step on.
// BFCL has no multi-step traces, so it simulates one on the queries that need two or more
// different functions (parallel_multiple): step 1 has called the first ground-truth call
// (its function and its first acceptable argument values, from bfcl-calls); step 2 searches
// with each candidate query text, and recall@k counts the relevant functions not called yet.
// What a tool returned cannot be measured: BFCL has no tool outputs (the loop no longer
// searches for them: tool output is data, issue 16).

// followupQuery is how one variant builds step 2's search text.
type followupQuery struct {
	name string
	doc  string
	text func(question, toolID string, args map[string]any) string
}

var followupQueries = []followupQuery{
	{"question", "the question alone (step 1's search again)", func(q, _ string, _ map[string]any) string { return q }},
	{"question+ids", "the question and the called tool ids", func(q, id string, _ map[string]any) string { return q + " " + id }},
	{"question+args", "the question and the called tools' arguments as JSON", func(q, _ string, args map[string]any) string {
		b, _ := json.Marshal(args)
		return q + " " + string(b)
	}},
	{"question+ids+args", "the question, the called tool ids and their arguments as JSON (the api's retrievalQuery until issue 28)", func(q, id string, args map[string]any) string {
		b, _ := json.Marshal(args)
		return q + " " + id + " " + string(b)
	}},
	{"question+values", "the question and the called tools' argument values, without ids or keys (the api's retrievalQuery)", func(q, _ string, args map[string]any) string {
		return q + " " + strings.Join(argValues(nil, args), " ")
	}},
}

// argValues appends the strings, numbers and booleans in v (a decoded JSON value), in key
// order for objects, as the api's retrievalQuery does with a call's arguments.
func argValues(out []string, v any) []string {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			out = argValues(out, v[k])
		}
	case []any:
		for _, e := range v {
			out = argValues(out, e)
		}
	case string:
		out = append(out, v)
	case float64:
		out = append(out, strconv.FormatFloat(v, 'g', -1, 64))
	case bool:
		out = append(out, strconv.FormatBool(v))
	}
	return out
}

type callCase struct {
	QID         string `json:"qid"`
	GroundTruth []struct {
		Name      string           `json:"name"`
		Arguments map[string][]any `json:"arguments"`
	} `json:"ground_truth"`
}

func loadCalls(path string) (map[string]callCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]callCase{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var c callCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out[c.QID] = c
	}
	return out, sc.Err()
}

// firstValues takes each argument's first acceptable value that is not "" (BFCL's "may be
// left out"); an argument with no other value is left out.
func firstValues(args map[string][]any) map[string]any {
	out := map[string]any{}
	for k, vs := range args {
		for _, v := range vs {
			if s, ok := v.(string); ok && s == "" {
				continue
			}
			out[k] = v
			break
		}
	}
	return out
}

func runFollowup(ctx context.Context, w io.Writer, ix *index.Index, qs []query, calls map[string]callCase, k int) error {
	fmt.Fprintf(w, "\n### follow-up searches (step 2 after the first ground-truth call), method %s\n\n", ix.Name())
	fmt.Fprintf(w, "| step 2 searches for | n | R@1 | R@3 | R@4 | R@5 | R@10 | MRR@10 |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	cut := []int{1, 3, 4, 5, 10}
	for _, v := range followupQueries {
		n := 0
		recall := map[int]float64{}
		mrr := 0.0
		for _, q := range qs {
			c, ok := calls[q.QID]
			if len(q.Relevant) < 2 || !ok || len(c.GroundTruth) == 0 {
				continue
			}
			first := c.GroundTruth[0]
			called := ""
			for i, name := range q.Names {
				if name == first.Name && i < len(q.Relevant) {
					called = q.Relevant[i]
				}
			}
			if called == "" {
				continue
			}
			var rest []string
			for _, r := range q.Relevant {
				if r != called {
					rest = append(rest, r)
				}
			}
			if len(rest) == 0 {
				continue
			}
			text := v.text(q.Query, server+"."+first.Name, firstValues(first.Arguments))
			hits, err := ix.Search(ctx, text, max(k, 10), nil)
			if err != nil && err != index.ErrEmptyQuery {
				return fmt.Errorf("%s: %w", q.QID, err)
			}
			ranked := make([]string, len(hits))
			for i, h := range hits {
				ranked[i] = strings.TrimPrefix(h.GetTool().GetId(), server+".")
			}
			n++
			for _, c := range cut {
				hit := 0
				for _, r := range rest {
					if slices.Contains(ranked[:min(c, len(ranked))], r) {
						hit++
					}
				}
				recall[c] += float64(hit) / float64(len(rest))
			}
			for i, id := range ranked[:min(10, len(ranked))] {
				if slices.Contains(rest, id) {
					mrr += 1 / float64(i+1)
					break
				}
			}
		}
		if n == 0 {
			return fmt.Errorf("no query with two or more relevant functions and ground-truth calls")
		}
		f := float64(n)
		fmt.Fprintf(w, "| %s: %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", v.name, v.doc, n,
			recall[1]/f, recall[3]/f, recall[4]/f, recall[5]/f, recall[10]/f, mrr/f)
	}
	fmt.Fprintln(w, "\nR@4 is what the loop offers by default (k = 4).")
	return nil
}
