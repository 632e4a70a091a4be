package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
)

// Paths of the live check (figures.Live.Path).
const (
	pathService = "service" // through the inference service's Generate and its prompt budget
	pathRaw     = "raw"     // the whole tool list's prompt straight to llama-server's /completion
)

// outcome is what one case's request came back with.
type outcome struct {
	calls    []gorilla.Call
	raw      string // the model's text
	parseErr error  // the output did not parse
	cut      bool   // the output stopped at n_predict
	// refused: the prompt does not fit the context (the service's budget said so even with
	// every tool dropped, or llama-server answered exceed_context_size_error).
	refused bool
	err     error // not sent, or the request failed otherwise
	// budgeted: the service answered, so dropped says how the prompt met the context.
	budgeted bool
	dropped  []string
	// wholeTokens: through the service, the tokens of the prompt with every tool (BOS
	// included; 0: not counted).
	wholeTokens int
}

// decoder sends one case to the model.
type decoder interface {
	decode(ctx context.Context, c bfclCase, tools []*toolmeshv1.Tool) outcome
}

// liveOptions configure the live check.
type liveOptions struct {
	URL, What string // llama-server's base URL; what it runs, when the bench started it
	Timeout   time.Duration
	// NPredict: with Raw the n_predict of every request (the grammars are sized to it);
	// through the service its --inference.llm.n-predict, the ceiling it budgets from.
	NPredict    int
	Cases, Show int
	Raw         bool
	Opts        gorilla.Options // Raw: how the grammars are built
}

// liveRun decodes cases on a llama-server, through the inference service or raw, and sorts
// the outputs (figures.Live).
type liveRun struct {
	client *llamaClient // for /props
	dec    decoder
	close  func()
	cases  int // decode this many, spread over the file (0: all)
	show   int
	fig    figures.Live
	shown  map[string][]string // up to show examples per kind
	out    io.Writer           // where it prints (os.Stdout)
}

func newLiveRun(o liveOptions) (*liveRun, error) {
	client := &llamaClient{base: strings.TrimRight(o.URL, "/"), http: &http.Client{Timeout: o.Timeout}}
	l := &liveRun{client: client, close: func() {}, cases: o.Cases, show: o.Show, shown: map[string][]string{}, out: os.Stdout,
		fig: figures.Live{Server: o.What, NPredict: o.NPredict, CallsOnly: o.Opts.CallsOnly, Path: pathRaw}}
	if o.Raw {
		opts := o.Opts
		opts.MaxBytes = budget(o.NPredict)
		l.dec = &rawDecoder{client: client, nPredict: o.NPredict, opts: opts}
		return l, nil
	}
	if o.Opts.CallsOnly {
		return nil, fmt.Errorf("-calls-only: the inference service's grammars always allow a plain answer; give -raw with it")
	}
	sd, err := newServiceDecoder(client, o.URL, o.NPredict, o.Timeout)
	if err != nil {
		return nil, err
	}
	l.dec, l.close, l.fig.Path, l.fig.NPredict = sd, sd.close, pathService, sd.nPredict
	return l, nil
}

// run decodes the chosen cases one after another and prints what came out, ending with the
// headline "live: calls=N/M whole (parse+validate+names), plain=K" (and, through the service,
// a line on how the prompts met the context before it).
func (l *liveRun) run(ctx context.Context, cases []bfclCase) (figures.Live, error) {
	if err := l.describe(ctx); err != nil {
		return figures.Live{}, err
	}
	start := time.Now()
	for i, c := range cases {
		if !l.picks(i, len(cases)) {
			continue
		}
		tools, schemas, err := convert(c)
		l.fig.Cases++
		if err != nil {
			l.fig.Errors++
			l.note("errors", c.QID, "convert: "+err.Error())
			continue
		}
		o := l.dec.decode(ctx, c, tools)
		if ctx.Err() != nil {
			return figures.Live{}, ctx.Err()
		}
		l.sort(c, o, schemas)
	}
	l.report(time.Since(start))
	f := l.fig
	fmt.Fprintf(l.out, "live: calls=%d/%d whole (parse+validate+names), plain=%d\n", f.Whole, f.Cases, f.Plain)
	return f, nil
}

// describe asks the server what it runs, for the record.
func (l *liveRun) describe(ctx context.Context) error {
	p, err := l.client.props(ctx)
	if err != nil {
		return fmt.Errorf("live: %w", err)
	}
	what := l.fig.Server
	if what == "" {
		what = "model " + p.model
	}
	l.fig.Server = "llama-server " + p.build + ", " + what
	l.fig.CtxSize = p.nCtx
	return nil
}

// picks says whether case i of n is decoded: cases spread evenly over the file, or all.
func (l *liveRun) picks(i, n int) bool {
	if l.cases <= 0 || l.cases >= n {
		return true
	}
	return (i+1)*l.cases/n > i*l.cases/n
}

func (l *liveRun) note(kind, qid, why string) {
	if len(l.shown[kind]) < l.show {
		l.shown[kind] = append(l.shown[kind], qid+": "+why)
	}
}

// sort counts a case's outcome as exactly one kind and, through the service, how its prompt
// met the context.
func (l *liveRun) sort(c bfclCase, o outcome, schemas map[string]*jsonschema.Schema) {
	if o.wholeTokens > l.fig.CtxSize {
		l.fig.WholeOverCtx++
	}
	l.fig.LongestWhole = max(l.fig.LongestWhole, o.wholeTokens)
	if o.cut {
		l.fig.Cut++
		l.note("cut", c.QID, fmt.Sprintf("%q", o.raw))
	}
	switch {
	case o.refused:
		l.fig.Refused++
		l.note("refused", c.QID, o.err.Error())
	case o.err != nil:
		l.fig.Errors++
		l.note("errors", c.QID, o.err.Error())
	case o.parseErr != nil:
		l.fig.Unparsed++
		l.note("unparsed", c.QID, fmt.Sprintf("%v in %q", o.parseErr, o.raw))
	case len(o.calls) == 0:
		l.fig.Plain++
		l.note("plain", c.QID, fmt.Sprintf("%q", o.raw))
	case validateCalls(o.calls, schemas) != "":
		l.fig.Invalid++
		l.note("invalid", c.QID, validateCalls(o.calls, schemas)+" in "+o.raw)
	case !sameNames(o.calls, c):
		l.fig.OtherNames++
		l.note("other names", c.QID, o.raw)
	default:
		l.fig.Whole++
	}
	if !o.budgeted {
		return
	}
	if len(o.dropped) == 0 {
		l.fig.FitWhole++
		return
	}
	l.fig.Dropped++
	l.fig.ToolsDropped += len(o.dropped)
	why := fmt.Sprintf("%d of %d tools dropped: %s", len(o.dropped), len(c.Functions), strings.Join(o.dropped, ", "))
	if gt := groundTruthAmong(c, o.dropped); gt != "" {
		l.fig.DroppedGroundTruth++
		why += " (the ground truth's " + gt + " among them)"
	}
	l.note("dropped", c.QID, why)
}

// groundTruthAmong is the first ground-truth function among ids ("" when none is).
func groundTruthAmong(c bfclCase, ids []string) string {
	for _, gt := range c.GroundTruth {
		for _, id := range ids {
			if id == gt.Name {
				return gt.Name
			}
		}
	}
	return ""
}

// sameNames says whether the calls name exactly the ground truth's functions, each at least
// once (how often each is called is not compared: BFCL's parallel cases call one function
// several times, in any order).
func sameNames(calls []gorilla.Call, c bfclCase) bool {
	want, got := map[string]bool{}, map[string]bool{}
	for _, gt := range c.GroundTruth {
		want[gt.Name] = true
	}
	for _, call := range calls {
		got[call.ToolID] = true
	}
	return maps.Equal(want, got)
}

// report prints what was decoded, each kind's count and examples.
func (l *liveRun) report(elapsed time.Duration) {
	f := l.fig
	how := "grammars with a plain-answer branch"
	if f.CallsOnly {
		how = "grammars calls only (-calls-only)"
	}
	if f.Path == pathService {
		fmt.Fprintf(l.out, "live: %d cases through the inference service's Generate (its prompt budget and grammars, tools ranked by the retriever's index) on %s in %v; context %d tokens, n_predict ceiling %d\n",
			f.Cases, f.Server, elapsed.Round(time.Millisecond), f.CtxSize, f.NPredict)
	} else {
		fmt.Fprintf(l.out, "live: %d cases' whole prompts sent to /completion of %s in %v; context %d tokens, %s, sized to n_predict=%d\n",
			f.Cases, f.Server, elapsed.Round(time.Millisecond), f.CtxSize, how, f.NPredict)
	}
	fmt.Fprintf(l.out, "live: whole calls %d, calls naming other functions %d, calls breaking a schema %d, not parsed %d, plain answers %d, refused (the prompt does not fit the context) %d, errors (not sent, or the request failed) %d; stopped at n_predict %d\n",
		f.Whole, f.OtherNames, f.Invalid, f.Unparsed, f.Plain, f.Refused, f.Errors, f.Cut)
	kinds := []string{"other names", "invalid", "unparsed", "plain", "refused", "errors", "cut"}
	if f.Path == pathService {
		fmt.Fprintf(l.out, "live: the whole tool list's prompt is longer than the context in %d cases (llama-server refuses those: 400 exceed_context_size_error); the longest takes %d tokens\n",
			f.WholeOverCtx, f.LongestWhole)
		fmt.Fprintf(l.out, "live: prompt budget: %d cases fit with every tool, %d had tools dropped to fit (%d tools; a ground-truth function among them in %d cases), %d refused even with every tool dropped, %d unknown (the request failed)\n",
			f.FitWhole, f.Dropped, f.ToolsDropped, f.DroppedGroundTruth, f.Refused, f.Cases-f.FitWhole-f.Dropped-f.Refused)
		kinds = append(kinds, "dropped")
	}
	for _, kind := range kinds {
		for _, e := range l.shown[kind] {
			fmt.Fprintf(l.out, "  live %s: %s\n", kind, e)
		}
	}
}

// rawDecoder builds each case's prompt from its whole tool list and grammar as the gorilla
// package does and sends them to /completion, with no prompt budget.
type rawDecoder struct {
	client   *llamaClient
	nPredict int
	opts     gorilla.Options
}

func (d *rawDecoder) decode(ctx context.Context, c bfclCase, tools []*toolmeshv1.Tool) outcome {
	cat, err := gorilla.BuildWith(tools, d.opts)
	if err != nil {
		return outcome{err: fmt.Errorf("build: %w", err)}
	}
	content, stop, err := d.client.complete(ctx, cat.Prompt(c.Query, nil), cat.Grammar(), d.nPredict)
	if err != nil {
		return outcome{err: err, refused: strings.Contains(err.Error(), "exceed_context_size_error")}
	}
	calls, _, perr := cat.Parse(content)
	return outcome{calls: calls, raw: content, parseErr: perr, cut: stop == "limit"}
}

// llamaClient is the least /completion client the raw check needs (the service's own client
// lives in services/inference/llama; the raw path does not go through it).
type llamaClient struct {
	base string
	http *http.Client
}

// props is what the live check records of a server.
type props struct {
	build, model string
	nCtx         int // per slot
}

// props reads the server's build, model and context from GET /props.
func (c *llamaClient) props(ctx context.Context) (props, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var p struct {
		BuildInfo string `json:"build_info"`
		ModelPath string `json:"model_path"`
		Settings  struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if err := c.do(ctx, http.MethodGet, "/props", nil, &p); err != nil {
		return props{}, err
	}
	return props{build: p.BuildInfo, model: filepath.Base(p.ModelPath), nCtx: p.Settings.NCtx}, nil
}

// countTokens is how many tokens /completion takes text for as a prompt: /tokenize's count,
// as the service counts (special tokens parsed), plus the BOS llama-server puts in front.
func (c *llamaClient) countTokens(ctx context.Context, text string) (int, error) {
	var out struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	err := c.do(ctx, http.MethodPost, "/tokenize", map[string]any{"content": text, "add_special": false, "parse_special": true}, &out)
	return len(out.Tokens) + 1, err
}

func (c *llamaClient) complete(ctx context.Context, prompt, grammar string, nPredict int) (content, stopType string, err error) {
	var out struct {
		Content  string `json:"content"`
		StopType string `json:"stop_type"`
	}
	err = c.do(ctx, http.MethodPost, "/completion", map[string]any{
		"prompt": prompt, "grammar": grammar, "n_predict": nPredict, "temperature": 0,
		"cache_prompt": true, "stop": []string{"<|EOT|>", "\n### Instruction"},
	}, &out)
	return out.Content, out.StopType, err
}

// do sends body (nil: none) as JSON to path and decodes a 200 answer into out; any other
// status is an error with llama-server's own message.
func (c *llamaClient) do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("llama-server %s: %s: %s", path, resp.Status, bytes.TrimSpace(raw))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("llama-server %s: %w", path, err)
	}
	return nil
}
