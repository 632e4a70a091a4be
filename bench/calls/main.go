// Command calls checks the Gorilla OpenFunctions v2 layer (services/inference/gorilla) against
// the BFCL function-calling cases: for every case it builds the prompt, renders each
// ground-truth call in Gorilla syntax, parses it back and compares (parse), validates the
// parsed arguments against the JSON Schema converted from BFCL's schema (validate), checks that
// the case's grammar accepts the rendered calls (grammar) and refuses a call to a function that
// was not offered (reject), with a GBNF recognizer that follows llama.cpp (package gbnf). The
// grammars are the ones the inference service sends: sized to a token budget
// (-grammar-n-predict, MaxBytes = n_predict - 1; 0 = not sized), and the check also verifies
// that no sentence of a grammar is longer than its budget.
//
// With -llama URL, or -llama-server BIN (it then starts that llama-server on llamatest's tiny
// random-weight model), it also decodes cases on a real llama-server (live). By default each
// case goes through the inference service (services/inference, run in this process against
// that llama-server) as the first step of a user's question does: its tools ranked by the
// retriever's index, then Generate with no max_tokens, so the service's own prompt budget sets
// n_predict and, where the prompt does not fit the context, drops the lowest-ranked tools and
// says which. The output then says how many cases fit with every tool, how many had tools
// dropped (how many tools, and whether a ground-truth function was among them) and how many
// were refused even with every tool dropped. -llama-server runs the tiny model with the
// context Gorilla OpenFunctions v2 was trained with (4096); its vocabulary is single
// characters and bytes, so a prompt takes more tokens there than with Gorilla's tokenizer and
// more cases need tools dropped than would with Gorilla. With -raw, each case's prompt is built
// from its whole tool list and sent to /completion with its grammar sized to -n-predict, as
// before the service had a budget (-llama-server then runs a 16384-token context so every
// prompt fits whole). Every output is sorted into one kind: whole calls (they parse, validate
// against the schemas and name exactly the ground truth's functions), calls naming other
// functions, calls that break a schema, output that does not parse, a plain answer, a prompt
// refused for the context, a failed request. A plain answer is not a pass; with -raw
// -calls-only the grammars force calls.
//
//	go run ./bench/calls -cases testdata/bfcl/calls/calls-dev.jsonl [-json FILE]
//	go run ./bench/calls -live-only -llama-server "$TOOLMESH_LLAMA_SERVER" [-live-cases N]
//	go run ./bench/calls -live-only -raw -calls-only -llama-server "$TOOLMESH_LLAMA_SERVER" [-live-cases N]
//
// The checks without a model end with the line parse=N/T validate=N/T grammar=N/T reject=N/T;
// the output ends with "live: calls=N/M whole (parse+validate+names), plain=K" or "live: not run".
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/bench/internal/bfcl"
	"github.com/toolmesh/toolmesh/bench/internal/figures"
	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/llamatest"
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
	casesPath := flag.String("cases", "testdata/bfcl/calls/calls-dev.jsonl", "BFCL cases (JSON lines)")
	llamaURL := flag.String("llama", "", "llama-server base URL for the live check (empty: no live check unless -llama-server)")
	llamaServer := flag.String("llama-server", "", "start this llama-server executable (e.g. $TOOLMESH_LLAMA_SERVER) on the tiny random-weight model of package llamatest for the live check")
	liveCases := flag.Int("live-cases", 0, "live: decode this many cases spread evenly over the file (0: every case)")
	liveOnly := flag.Bool("live-only", false, "run only the live check (not parse, validate, grammar, reject)")
	show := flag.Int("show", 5, "failures to print per check")
	nPredict := flag.Int("n-predict", 0, "live: through the service its n_predict ceiling (--inference.llm.n-predict; 0: the service's default); with -raw the n_predict of every request, the grammars sized to it (0: 256)")
	raw := flag.Bool("raw", false, "live: send each case's whole prompt to /completion, without the service's prompt budget")
	// 2048: under the worst case of one byte per token the grammars then leave room for every
	// BFCL ground truth (the longest is 697 bytes, and it is one of several calls); at the
	// service's default of 512 some real calls cannot fit whatever the limits.
	grammarNPredict := flag.Int("grammar-n-predict", llama.DefaultNPredict, "parse/grammar/reject: the token budget the grammars are sized to, as the service sizes them to max_tokens (default: the service's n_predict ceiling; 0: not sized)")
	timeout := flag.Duration("timeout", 2*time.Minute, "live: timeout per request")
	callsOnly := flag.Bool("calls-only", false, "build grammars without the plain-answer branch (with -raw, live output must be calls; the service always allows a plain answer)")
	limit := flag.Int("limit", 0, "check only the first N cases (0: all; for a smoke run)")
	jsonPath := flag.String("json", "", "also write the counts of the last line as JSON to this file, for bench/report")
	flag.Parse()
	opts := gorilla.DefaultOptions
	opts.CallsOnly = *callsOnly
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if *raw && *nPredict == 0 {
		*nPredict = 256
	}
	err := func() error {
		lo := liveOptions{URL: *llamaURL, Timeout: *timeout, NPredict: *nPredict, Cases: *liveCases, Show: *show, Raw: *raw, Opts: opts}
		switch {
		case *llamaURL != "" && *llamaServer != "":
			return errors.New("-llama and -llama-server: give one")
		case *llamaServer != "":
			srv, what, err := startTiny(*llamaServer, *raw, !opts.CallsOnly)
			if err != nil {
				return err
			}
			defer srv.Stop()
			lo.URL, lo.What = srv.URL, what
		}
		var live *liveRun
		if lo.URL != "" {
			var err error
			if live, err = newLiveRun(lo); err != nil {
				return err
			}
			defer live.close()
		}
		if *liveOnly && live == nil {
			return errors.New("-live-only needs -llama or -llama-server")
		}
		cases, err := readCases(*casesPath)
		if err != nil {
			return err
		}
		if *limit > 0 && *limit < len(cases) {
			cases = cases[:*limit]
		}
		var fig figures.Calls
		if !*liveOnly {
			fig = static(cases, *show, *grammarNPredict, opts)
		}
		if live == nil {
			fmt.Println("live: not run (no -llama URL or -llama-server)")
		} else if fig.Live, err = live.run(ctx, cases); err != nil {
			return err
		}
		if *jsonPath != "" {
			return figures.Write(*jsonPath, fig)
		}
		return nil
	}()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "calls:", err)
		os.Exit(1)
	}
}

// Contexts of the tiny model's server. Through the service: Gorilla OpenFunctions v2's, the
// one toolmesh runs it with. Raw: the longest BFCL prompt is about 9,000 tokens in the tiny
// model's vocabulary of single characters and bytes, and the live budget comes on top.
const (
	tinyCtx    = 4096
	tinyCtxRaw = 16384
)

// startTiny starts the llama-server bin on llamatest's tiny random-weight model and says what
// it started. With bias, its logits are biased towards "<" (llamatest.CallBias): left alone it
// hardly ever starts a call where a grammar also allows a plain answer.
func startTiny(bin string, raw, bias bool) (*llamatest.Server, string, error) {
	dir, err := os.MkdirTemp("", "toolmesh-bench-calls-")
	if err != nil {
		return nil, "", err
	}
	ctxSize := tinyCtx
	if raw {
		ctxSize = tinyCtxRaw
	}
	opts := llamatest.ServerOptions{CtxSize: ctxSize, Model: llamatest.TinyModel{ContextLength: ctxSize}, ReadyTimeout: time.Minute}
	what := fmt.Sprintf("llamatest's tiny random-weight model (-c %d; a byte-level vocabulary: prompts take more tokens than with Gorilla's tokenizer", ctxSize)
	if bias {
		opts.Args = llamatest.CallBias()
		what += `; logits biased towards "<"`
	}
	what += ")"
	srv, err := llamatest.Run(bin, dir, opts)
	// The server has the model open, or did not start: the folder can go either way.
	os.RemoveAll(dir)
	if err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", bin, err)
	}
	return srv, what, nil
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

// static runs the checks that need no model (parse, validate, grammar, reject) and prints them.
func static(cases []bfclCase, show, grammarNPredict int, opts gorilla.Options) figures.Calls {
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
	start := time.Now()
	var grammarBytes, grammarRules, promptBytes, longestPrompt int
	var dataErrors, tooLong []string
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
		longestPrompt = max(longestPrompt, len(prompt))

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

	}
	elapsed := time.Since(start)
	for _, t := range []*tally{parse, validate, grammar, reject} {
		if len(t.failed) > 0 {
			fmt.Printf("%s failures (%d, first %d):\n", t.name, t.n-t.ok, len(t.failed))
			for _, f := range t.failed {
				fmt.Println("  " + f)
			}
		}
	}
	if n := len(cases); n > 0 {
		fmt.Printf("cases=%d prompt=%dB/case (longest %dB) grammar=%dB/case (%d llama.cpp rules/case) in %v\n",
			n, promptBytes/n, longestPrompt, grammarBytes/n, grammarRules/n, elapsed.Round(time.Millisecond))
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
	fmt.Println(strings.Join([]string{parse.line(), validate.line(), grammar.line(), reject.line()}, " "))
	count := func(t *tally) figures.Count { return figures.Count{OK: t.ok, N: t.n} }
	return figures.Calls{Cases: len(cases), Parse: count(parse), Validate: count(validate), Grammar: count(grammar),
		Reject: count(reject)}
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
