// Command calls checks the Gorilla OpenFunctions v2 layer (services/inference/gorilla) against
// the BFCL function-calling cases: for every case it builds the prompt, renders each
// ground-truth call in Gorilla syntax, parses it back and compares (parse), validates the
// parsed arguments against the JSON Schema converted from BFCL's schema (validate), checks that
// the case's grammar accepts the rendered calls (grammar) and refuses a call to a function that
// was not offered (reject), with a GBNF recognizer that follows llama.cpp (package gbnf). The
// grammars are the ones the inference service sends: sized to a token budget
// (-grammar-n-predict, MaxBytes = n_predict - 1; 0 = not sized), and the check also verifies
// that no sentence of a grammar is longer than its budget. With -llama URL it also decodes once
// per case on a real llama-server under the case's grammar sized to -n-predict, and checks that
// the output parses and validates and was not cut off (live).
//
//	go run ./bench/calls -cases ../shared/data/bfcl-calls/calls-dev.jsonl [-llama http://127.0.0.1:8080] [-json FILE]
//
// It ends with one line: parse=N/T validate=N/T grammar=N/T reject=N/T live=N/M.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/bench/internal/bfcl"
	"github.com/toolmesh/toolmesh/bench/internal/figures"
	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
	"github.com/toolmesh/toolmesh/services/inference/gorilla/gbnf"
	"github.com/toolmesh/toolmesh/services/inference/llama"
)

type bfclCase struct {
	QID         string            `json:"qid"`
	Category    string            `json:"category"`
	Query       string            `json:"query"`
	Functions   []json.RawMessage `json:"functions"`
	GroundTruth []struct {
		Name      string                       `json:"name"`
		Arguments map[string][]json.RawMessage `json:"arguments"`
	} `json:"ground_truth"`
}

type bfclFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

func main() {
	casesPath := flag.String("cases", "../shared/data/bfcl-calls/calls-dev.jsonl", "BFCL cases (JSON lines)")
	llamaURL := flag.String("llama", "", "llama-server base URL for the live check (empty: live=0/0)")
	show := flag.Int("show", 5, "failures to print per check")
	nPredict := flag.Int("n-predict", 256, "live: tokens to generate per case (the live grammars are sized to it)")
	// 2048: under the worst case of one byte per token the grammars then leave room for every
	// BFCL ground truth (the longest is 697 bytes, and it is one of several calls); at the
	// service's default of 512 some real calls cannot fit whatever the limits.
	grammarNPredict := flag.Int("grammar-n-predict", llama.DefaultNPredict, "parse/grammar/reject: the token budget the grammars are sized to, as the service sizes them to max_tokens (default: the service's n_predict ceiling; 0: not sized)")
	timeout := flag.Duration("timeout", 2*time.Minute, "live: timeout per request")
	callsOnly := flag.Bool("calls-only", false, "build grammars without the plain-answer branch (live output must be calls)")
	limit := flag.Int("limit", 0, "check only the first N cases (0: all; for a smoke run)")
	jsonPath := flag.String("json", "", "also write the counts of the last line as JSON to this file, for bench/report")
	flag.Parse()
	opts := gorilla.DefaultOptions
	opts.CallsOnly = *callsOnly
	fig, err := run(*casesPath, *llamaURL, *show, *nPredict, *grammarNPredict, *limit, *timeout, opts)
	if err == nil && *jsonPath != "" {
		err = figures.Write(*jsonPath, fig)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "calls:", err)
		os.Exit(1)
	}
}

type tally struct {
	name   string
	ok, n  int
	shown  int
	failed []string
}

func (t *tally) pass()        { t.ok++; t.n++ }
func (t *tally) line() string { return fmt.Sprintf("%s=%d/%d", t.name, t.ok, t.n) }
func (t *tally) fail(qid, why string, show int) {
	t.n++
	if len(t.failed) < show {
		t.failed = append(t.failed, qid+": "+why)
	}
}

// budget is the MaxBytes that fits n_predict tokens: a token is at least one byte under a
// grammar, and the end-of-text token takes the last one (0: not sized).
func budget(nPredict int) int { return max(nPredict-1, 0) }

func run(casesPath, llamaURL string, show, nPredict, grammarNPredict, limit int, timeout time.Duration, opts gorilla.Options) (figures.Calls, error) {
	cases, err := readCases(casesPath)
	if err != nil {
		return figures.Calls{}, err
	}
	if limit > 0 && limit < len(cases) {
		cases = cases[:limit]
	}
	// Names of every function in the file, for the reject check.
	var allNames []string
	seen := map[string]bool{}
	for _, c := range cases {
		for _, raw := range c.Functions {
			var f bfclFunction
			if json.Unmarshal(raw, &f) == nil && !seen[f.Name] {
				seen[f.Name] = true
				allNames = append(allNames, f.Name)
			}
		}
	}
	sort.Strings(allNames)

	parse, validate := &tally{name: "parse"}, &tally{name: "validate"}
	grammar, reject := &tally{name: "grammar"}, &tally{name: "reject"}
	live := &tally{name: "live"}
	var client *llamaClient
	if llamaURL != "" {
		client = &llamaClient{base: strings.TrimRight(llamaURL, "/"), http: &http.Client{Timeout: timeout}}
	}
	start := time.Now()
	var grammarBytes, grammarRules, promptBytes int
	var dataErrors, tooLong []string
	var liveCalls, liveAnswers, liveCut int
	classes := map[int]int{} // cases by number of classes of calls
	gopts := opts
	gopts.MaxBytes = budget(grammarNPredict)
	for ci, c := range cases {
		tools, schemas, err := convert(c)
		if err != nil {
			for _, t := range []*tally{parse, validate, grammar, reject} {
				t.fail(c.QID, "convert: "+err.Error(), show)
			}
			continue
		}
		cat, err := gorilla.BuildWith(tools, gopts)
		if err != nil {
			for _, t := range []*tally{parse, validate, grammar, reject} {
				t.fail(c.QID, "build: "+err.Error(), show)
			}
			continue
		}
		prompt := cat.Prompt(c.Query, nil)
		promptBytes += len(prompt)

		// Render the ground truth.
		var want []gorilla.Call
		var out strings.Builder
		renderErr := error(nil)
		for _, gt := range c.GroundTruth {
			call := gorilla.Call{ToolID: gt.Name, Arguments: map[string]any{}}
			for arg, values := range gt.Arguments {
				if v, ok := firstValue(values); ok {
					call.Arguments[arg] = v
				}
			}
			s, err := cat.Render(call)
			if err != nil && renderErr == nil {
				renderErr = err
			}
			out.WriteString(s)
			want = append(want, call)
		}
		output := out.String()
		// A ground truth that breaks its own function's schema cannot pass validate or grammar
		// whatever the gorilla package does, nor one longer than the budget; say so next to
		// those failures.
		dataNote := ""
		if why := validateCalls(want, schemas); why != "" {
			dataErrors = append(dataErrors, c.QID)
			dataNote = " [ground truth breaks its own schema]"
		}
		if b := gopts.MaxBytes; b > 0 && len(output) > b {
			tooLong = append(tooLong, c.QID)
			dataNote += fmt.Sprintf(" [%d bytes: longer than the %d-byte budget]", len(output), b)
		}
		classes[len(cat.Limits())]++

		// parse
		got, answer, err := cat.Parse(output)
		switch {
		case renderErr != nil:
			parse.fail(c.QID, "render: "+renderErr.Error(), show)
		case err != nil:
			parse.fail(c.QID, fmt.Sprintf("%v in %q", err, output), show)
		case answer != "":
			parse.fail(c.QID, fmt.Sprintf("read as an answer: %q", output), show)
		default:
			if why := compareCalls(got, want); why != "" {
				parse.fail(c.QID, why+" in "+output, show)
			} else {
				parse.pass()
			}
		}

		// validate
		if err != nil || renderErr != nil {
			validate.fail(c.QID, "nothing parsed to validate", show)
		} else if why := validateCalls(got, schemas); why != "" {
			validate.fail(c.QID, why+" in "+output+dataNote, show)
		} else {
			validate.pass()
		}

		// grammar, reject
		gtext := cat.Grammar()
		grammarBytes += len(gtext)
		g, gerr := gbnf.Parse(gtext)
		if gerr != nil {
			grammar.fail(c.QID, "grammar does not load: "+gerr.Error(), show)
			reject.fail(c.QID, "grammar does not load", show)
		} else {
			grammarRules += g.Rules
			ok, at, merr := g.Match(output)
			longest, finite := g.MaxLen("root")
			switch {
			case gopts.MaxBytes > 0 && (!finite || longest > gopts.MaxBytes):
				grammar.fail(c.QID, fmt.Sprintf("the grammar admits %d bytes (finite %v), more than the %d-byte budget", longest, finite, gopts.MaxBytes), show)
			case gopts.MaxBytes > 0 && longest != cat.MaxResponseBytes():
				grammar.fail(c.QID, fmt.Sprintf("the grammar admits %d bytes, the catalog says %d", longest, cat.MaxResponseBytes()), show)
			case merr != nil:
				grammar.fail(c.QID, merr.Error(), show)
			case !ok:
				grammar.fail(c.QID, fmt.Sprintf("refused at byte %d: %q|%q%s", at, output[:at], output[at:], dataNote), show)
			default:
				grammar.pass()
			}
			bad := offCatalog(output, cat, c, allNames, ci)
			ok, _, merr = g.Match(bad)
			_, _, perr := cat.Parse(bad)
			switch {
			case merr != nil:
				reject.fail(c.QID, merr.Error(), show)
			case ok:
				reject.fail(c.QID, "grammar accepted "+bad, show)
			case perr == nil:
				reject.fail(c.QID, "parser accepted "+bad, show)
			default:
				reject.pass()
			}
		}

		// live: the grammar sized to the live budget, as the service sends it.
		if client != nil {
			lopts := opts
			lopts.MaxBytes = budget(nPredict)
			lcat, err := gorilla.BuildWith(tools, lopts)
			if err != nil {
				live.fail(c.QID, "build: "+err.Error(), show)
				continue
			}
			content, stop, err := client.complete(context.Background(), lcat.Prompt(c.Query, nil), lcat.Grammar(), nPredict)
			if err != nil {
				live.fail(c.QID, err.Error(), show)
				continue
			}
			if stop == "limit" {
				liveCut++
			}
			calls, _, err := lcat.Parse(content)
			if err == nil && len(calls) > 0 {
				liveCalls++
			} else if err == nil {
				liveAnswers++
			}
			switch {
			case err != nil:
				live.fail(c.QID, fmt.Sprintf("%v in %q", err, content), show)
			case validateCalls(calls, schemas) != "":
				live.fail(c.QID, validateCalls(calls, schemas)+" in "+content, show)
			default:
				live.pass()
			}
		}
	}
	elapsed := time.Since(start)
	for _, t := range []*tally{parse, validate, grammar, reject, live} {
		if len(t.failed) > 0 {
			fmt.Printf("%s failures (%d, first %d):\n", t.name, t.n-t.ok, len(t.failed))
			for _, f := range t.failed {
				fmt.Println("  " + f)
			}
		}
	}
	if n := len(cases); n > 0 {
		fmt.Printf("cases=%d prompt=%dB/case grammar=%dB/case (%d llama.cpp rules/case) in %v\n",
			n, promptBytes/n, grammarBytes/n, grammarRules/n, elapsed.Round(time.Millisecond))
		if gopts.MaxBytes > 0 {
			var ts []string
			for k := range 17 {
				if classes[k] > 0 {
					ts = append(ts, fmt.Sprintf("%d: %d", k, classes[k]))
				}
			}
			fmt.Printf("grammars sized to n_predict=%d (%d bytes); cases by classes of calls: %s\n", grammarNPredict, gopts.MaxBytes, strings.Join(ts, ", "))
		}
	}
	if len(dataErrors) > 0 {
		fmt.Printf("ground truths that break their own BFCL schema (%d): %s\n", len(dataErrors), strings.Join(dataErrors, " "))
	}
	if len(tooLong) > 0 {
		fmt.Printf("ground truths longer than the budget (%d): %s\n", len(tooLong), strings.Join(tooLong, " "))
	}
	if client != nil {
		fmt.Printf("live (n_predict=%d): %d with calls, %d plain answers, %d stopped at n_predict\n", nPredict, liveCalls, liveAnswers, liveCut)
	}
	if client == nil {
		fmt.Println("live: no -llama URL given, skipped")
	}
	fmt.Println(strings.Join([]string{parse.line(), validate.line(), grammar.line(), reject.line(), live.line()}, " "))
	count := func(t *tally) figures.Count { return figures.Count{OK: t.ok, N: t.n} }
	return figures.Calls{Cases: len(cases), Parse: count(parse), Validate: count(validate), Grammar: count(grammar),
		Reject: count(reject), Live: count(live)}, nil
}

func readCases(path string) ([]bfclCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cases []bfclCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var c bfclCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		cases = append(cases, c)
	}
	return cases, sc.Err()
}

// firstValue is the first acceptable non-empty value of a ground-truth argument ("" means the
// argument may be left out), with nested dicts resolved the same way; false when "" is the
// only one.
func firstValue(values []json.RawMessage) (any, bool) {
	for _, raw := range values {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if d.Decode(&v) != nil {
			continue
		}
		if s, ok := v.(string); ok && s == "" {
			continue
		}
		return resolve(v), true
	}
	return nil, false
}

// resolve picks values inside a ground-truth value: in BFCL's possible answers a dict (also one
// inside a list) holds, for each key, the list of acceptable values, like a top-level argument.
func resolve(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			alts, ok := e.([]any)
			if !ok {
				out[k] = resolve(e)
				continue
			}
			for _, a := range alts {
				if s, ok := a.(string); ok && s == "" {
					continue
				}
				out[k] = resolve(a)
				break
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = resolve(e)
		}
		return out
	}
	return v
}

// convert turns a case's BFCL functions into tools (id = the BFCL name) and compiled JSON
// Schemas for validation.
func convert(c bfclCase) ([]*toolmeshv1.Tool, map[string]*jsonschema.Schema, error) {
	var tools []*toolmeshv1.Tool
	schemas := map[string]*jsonschema.Schema{}
	comp := jsonschema.NewCompiler()
	for i, raw := range c.Functions {
		var f bfclFunction
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, nil, fmt.Errorf("function %d: %w", i, err)
		}
		js, _ := bfcl.JSONSchema(f.Parameters).(map[string]any)
		if js == nil {
			js = map[string]any{"type": "object"}
		}
		st, err := structpb.NewStruct(js)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		tools = append(tools, &toolmeshv1.Tool{Id: f.Name, Name: f.Name, Description: f.Description, InputSchema: st})
		// The validator sees the same schema, closed at the top as BFCL's checker is
		// (an argument the function does not declare is an error).
		vs := map[string]any{}
		for k, v := range js {
			vs[k] = v
		}
		vs["additionalProperties"] = false
		url := fmt.Sprintf("mem://%s/%d.json", c.QID, i)
		if err := comp.AddResource(url, vs); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		sch, err := comp.Compile(url)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		schemas[f.Name] = sch
	}
	return tools, schemas, nil
}

// offCatalog is the case's first rendered call addressed to a function the case does not
// offer (another case's function, or a made-up name).
func offCatalog(output string, cat *gorilla.Catalog, c bfclCase, all []string, ci int) string {
	offered := map[string]bool{}
	for _, id := range cat.ToolIDs() {
		offered[id] = true
	}
	other := "not_offered.function"
	for i := range all {
		if n := all[(ci*7+i)%len(all)]; !offered[n] {
			other = n
			break
		}
	}
	first := output
	if i := strings.Index(output[len("<<function>>"):], "<<function>>"); i >= 0 {
		first = output[:len("<<function>>")+i]
	}
	open := strings.IndexByte(first, '(')
	if open < 0 {
		return "<<function>>" + other + "()"
	}
	return "<<function>>" + other + first[open:]
}

// compareCalls says how got differs from want ("" when equal).
func compareCalls(got, want []gorilla.Call) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d calls, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].ToolID != want[i].ToolID {
			return fmt.Sprintf("call %d: got tool %q, want %q", i, got[i].ToolID, want[i].ToolID)
		}
		if len(got[i].Arguments) != len(want[i].Arguments) {
			return fmt.Sprintf("call %d: got %d arguments, want %d", i, len(got[i].Arguments), len(want[i].Arguments))
		}
		for k, w := range want[i].Arguments {
			g, ok := got[i].Arguments[k]
			if !ok {
				return fmt.Sprintf("call %d: argument %q missing", i, k)
			}
			if !equalJSON(g, w) {
				return fmt.Sprintf("call %d: argument %q: got %#v, want %#v", i, k, g, w)
			}
		}
	}
	return ""
}

// equalJSON compares JSON-typed values, numbers by value.
func equalJSON(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	switch a := a.(type) {
	case string, bool, nil:
		return a == b
	case []any:
		bl, ok := b.([]any)
		if !ok || len(a) != len(bl) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], bl[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, v := range a {
			w, ok := bm[k]
			if !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

func number(v any) (float64, bool) {
	switch v := v.(type) {
	case int64:
		return float64(v), true
	case float64:
		return v, true
	case json.Number:
		f, err := v.Float64()
		return f, err == nil && !math.IsInf(f, 0)
	}
	return 0, false
}

// validateCalls checks every call's arguments against its tool's schema ("" when all pass).
func validateCalls(calls []gorilla.Call, schemas map[string]*jsonschema.Schema) string {
	for i, c := range calls {
		s, ok := schemas[c.ToolID]
		if !ok {
			return fmt.Sprintf("call %d: no schema for %q", i, c.ToolID)
		}
		if err := s.Validate(c.Arguments); err != nil {
			return fmt.Sprintf("call %d (%s): %s", i, c.ToolID, strings.ReplaceAll(err.Error(), "\n", "; "))
		}
	}
	return ""
}

// llamaClient is the least /completion client the live check needs (the service's own client
// lives in services/inference/llama; the bench does not depend on it).
type llamaClient struct {
	base string
	http *http.Client
}

func (c *llamaClient) complete(ctx context.Context, prompt, grammar string, nPredict int) (content, stopType string, err error) {
	body, _ := json.Marshal(map[string]any{
		"prompt": prompt, "grammar": grammar, "n_predict": nPredict, "temperature": 0,
		"cache_prompt": true, "stop": []string{"<|EOT|>", "\n### Instruction"},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/completion", bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("llama-server: %s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	var out struct {
		Content  string `json:"content"`
		StopType string `json:"stop_type"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", "", fmt.Errorf("llama-server: %w", err)
	}
	return out.Content, out.StopType, nil
}
