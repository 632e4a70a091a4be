// Command retrieval measures tool-retrieval quality on the BFCL retrieval benchmark (recall@k and
// MRR@10, per category and overall, for several methods) and, with -speed, the memory store's
// search latency, index build time and memory per tool on synthetic pools.
//
//	go run ./bench/retrieval [-pool POOL.jsonl] [-queries QUERIES.jsonl] [-k 10] [-methods a,b]
//	go run ./bench/retrieval -speed [-sizes 1000,10000,100000]
//	go run ./bench/retrieval -methods "bm25 default hybrid dense" -embed-url http://127.0.0.1:8089
//	go run ./bench/retrieval -followup [-calls CALLS.jsonl] [-methods default]
//
// -followup measures what the agent loop searches for from its second step on (followup.go).
//
// -embed-url names an OpenAI-compatible embeddings server (bench/embedserver) for the methods
// that search dense vectors too (hybrid, dense); their vectors are cached under the temporary
// directory (-embed-cache).
//
// -json FILE also writes the headline figures for bench/report.
//
// Metrics (strict ids): for each query, recall@k = |relevant ∩ top k| / |relevant| and
// MRR@10 = 1/rank of the first relevant tool within the top 10 (0 if none); both are averaged
// over queries. Tools are ranked by the index's Search with k = max(-k, 10).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/bench/internal/bfcl"
	"github.com/toolmesh/toolmesh/bench/internal/figures"
	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/index"
	"github.com/toolmesh/toolmesh/services/retriever/lexical"
	"github.com/toolmesh/toolmesh/services/retriever/store/memory"
)

const server = "bfcl"

func main() {
	dataDir := filepath.Join("testdata", "bfcl", "retrieval")
	poolPath := flag.String("pool", filepath.Join(dataDir, "pool.jsonl"), "tool pool (JSONL: id, name, description, parameters)")
	queriesPath := flag.String("queries", filepath.Join(dataDir, "queries-dev.jsonl"), "queries (JSONL: qid, category, query, relevant)")
	heldout := flag.String("heldout", "", "held-out queries; default: a queries-heldout/test/live*.jsonl beside -queries, if any")
	k := flag.Int("k", 10, "largest cut-off reported")
	methodsFlag := flag.String("methods", strings.Join(defaultMethods, " "), "space-separated methods to run (see -list; NAME:key=val+key=val overrides knobs)")
	list := flag.Bool("list", false, "list the methods and exit")
	speed := flag.Bool("speed", false, "run the speed benchmark instead of the quality one")
	sizes := flag.String("sizes", "1000,10000,100000", "pool sizes for -speed")
	searches := flag.Int("searches", 2000, "searches per size for -speed")
	dump := flag.String("dump", "", "write every search's top ids and score bits to this file (to check that a change leaves results identical)")
	speedMethod := flag.String("speed-method", "default", "method whose search options -speed uses (its encoder knobs are ignored: the default encoder is used)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	misses := flag.String("misses", "", "print the queries this method misses at rank 5")
	embedURL := flag.String("embed-url", "", "OpenAI-compatible embeddings server for the hybrid and dense methods (e.g. bench/embedserver's http://127.0.0.1:8089)")
	embedModel := flag.String("embed-model", "use-lite-512", "model name sent to -embed-url; it also keys the vector cache")
	embedCache := flag.String("embed-cache", "", "vector cache file (default: toolmesh-embedcache-MODEL.bin in the temporary directory; none: no cache)")
	followup := flag.Bool("followup", false, "measure step 2's search texts (the question, with the called tool ids, with their arguments) on the queries that need several functions, instead of the quality benchmark")
	callsPath := flag.String("calls", filepath.Join("testdata", "bfcl", "calls", "calls-dev.jsonl"), "ground-truth calls for -followup (JSONL: qid, ground_truth)")
	jsonPath := flag.String("json", "", "also write the headline figures as JSON to this file, for bench/report: each method's overall figures on -queries (quality), or each size's row (-speed)")
	flag.Parse()

	if *list {
		for _, m := range methods {
			fmt.Printf("%-22s %s\n", m.name, m.doc)
		}
		return
	}
	pool, err := loadPool(*poolPath)
	if err != nil {
		fatal(err)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if *dump != "" {
		f, err := os.Create(*dump)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		dumpW = f
	}
	if *speed {
		m, ok := lookup(*speedMethod)
		if !ok {
			fatal(fmt.Errorf("unknown method %q (see -list)", *speedMethod))
		}
		sp, err := runSpeed(os.Stdout, pool, *queriesPath, *sizes, *searches, m.name, m.opt)
		if err != nil {
			fatal(err)
		}
		if *jsonPath != "" {
			if err := figures.Write(*jsonPath, sp); err != nil {
				fatal(err)
			}
		}
		return
	}
	if *followup {
		qs, err := loadQueries(*queriesPath)
		if err != nil {
			fatal(err)
		}
		calls, err := loadCalls(*callsPath)
		if err != nil {
			fatal(err)
		}
		for _, name := range strings.Fields(*methodsFlag) {
			m, ok := lookup(name)
			if !ok {
				fatal(fmt.Errorf("unknown method %q (see -list)", name))
			}
			if err := openDense([]method{m}, *embedURL, *embedModel, *embedCache); err != nil {
				fatal(err)
			}
			ix, err := build(context.Background(), pool, m)
			if err != nil {
				fatal(err)
			}
			if err := runFollowup(context.Background(), os.Stdout, ix, qs, calls, *k); err != nil {
				fatal(err)
			}
		}
		return
	}
	sets := []string{*queriesPath}
	if *heldout == "" {
		*heldout = findHeldout(filepath.Dir(*queriesPath))
	}
	if *heldout != "" {
		sets = append(sets, *heldout)
	} else {
		fmt.Printf("no held-out split found beside %s (looked for queries-{heldout,test,live}*.jsonl)\n", *queriesPath)
	}
	var chosen []method
	for _, name := range strings.Fields(*methodsFlag) {
		m, ok := lookup(strings.TrimSpace(name))
		if !ok {
			fatal(fmt.Errorf("unknown method %q (see -list)", name))
		}
		chosen = append(chosen, m)
	}
	if err := openDense(chosen, *embedURL, *embedModel, *embedCache); err != nil {
		fatal(err)
	}
	if denseEmbedder != nil {
		defer denseEmbedder.Close()
	}
	ctx := context.Background()
	var last string
	var fig figures.Retrieval
	for si, qp := range sets {
		qs, err := loadQueries(qp)
		if err != nil {
			fatal(err)
		}
		fmt.Printf("\n## %s: %d queries, %d tools, strict ids\n", filepath.Base(qp), len(qs), len(pool))
		if si == 0 {
			fig = figures.Retrieval{Queries: filepath.Base(qp), N: len(qs), Tools: len(pool)}
		}
		for _, m := range chosen {
			ix, err := build(ctx, pool, m)
			if err != nil {
				fatal(err)
			}
			res, err := evaluate(ctx, ix, qs, max(*k, 10))
			if err != nil {
				fatal(err)
			}
			printResult(os.Stdout, m, res, *k)
			reportDense(os.Stdout, m)
			fmt.Printf("exact overall: R@5=%.4f MRR@10=%.4f\n\n", res.overall.recall[5], res.overall.mrr)
			if m.name == *misses {
				printMisses(os.Stdout, res)
			}
			if si == 0 {
				o := res.overall
				fig.Methods = append(fig.Methods, figures.RetrievalMethod{Name: m.name,
					R1: o.recall[1], R3: o.recall[3], R5: o.recall[5], R10: o.recall[10], MRR10: o.mrr})
			}
			if m.name == "default" && si == 0 {
				last = fmt.Sprintf("overall recall@5=%.3f mrr@10=%.3f", res.overall.recall[5], res.overall.mrr)
			}
		}
	}
	if last != "" {
		fmt.Println()
		fmt.Println(last)
	}
	if *jsonPath != "" {
		if err := figures.Write(*jsonPath, fig); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "retrieval:", err)
	os.Exit(1)
}

func findHeldout(dir string) string {
	for _, pat := range []string{"queries-heldout*.jsonl", "queries-test*.jsonl", "queries-live*.jsonl"} {
		if m, _ := filepath.Glob(filepath.Join(dir, pat)); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// method is one way of building the index.
type method struct {
	name string
	doc  string
	cfg  func(p *poolStats) lexical.Config
	opt  index.Options
	// dense: the index also holds the -embed-url model's vectors (denseOf).
	dense bool
}

type poolStats struct{ avgDocLen float64 }

var defaultMethods = []string{"bm25", "bm25-stem-stop", "bm25f-stem", "bm25f-stem-chars", "default"}

func noSplit() index.Options { return index.Options{} }

func with(f func(*lexical.Config)) func(*poolStats) lexical.Config {
	return func(*poolStats) lexical.Config {
		c := lexical.DefaultConfig()
		f(&c)
		return c
	}
}

var methods = []method{
	{name: "bm25", doc: "baseline: plain BM25 (k1 1.2, b 0.75) over name words + description + parameter names + descriptions; no stemming, no stop words",
		cfg: func(p *poolStats) lexical.Config { return lexical.BaselineConfig(p.avgDocLen) }, opt: noSplit()},
	{name: "bm25-stem-stop", doc: "bm25 + Porter2 stemming + query stop words and numbers removed",
		cfg: func(p *poolStats) lexical.Config {
			c := lexical.BaselineConfig(p.avgDocLen)
			c.Stem, c.QueryStopWords, c.QueryNumbers = true, true, false
			return c
		}, opt: noSplit()},
	{name: "bm25f-stem", doc: "bm25-stem-stop with BM25F field weights and per-field length normalization (default fields)",
		cfg: with(func(c *lexical.Config) { c.CharN, c.PairWeight = 0, 0 }), opt: noSplit()},
	{name: "bm25f-stem-chars", doc: "bm25f-stem + character 4-gram TF-IDF cosine, score-sum fused (weight 0.35)",
		cfg: with(func(c *lexical.Config) { c.PairWeight = 0 }), opt: noSplit()},
	{name: "default", doc: "the embedded default: bm25f-stem-chars + ordered adjacent word pairs (weight 0.2) + request split into sentences, parts merged",
		cfg: with(func(*lexical.Config) {}), opt: index.DefaultOptions()},
}

// lookup finds a method by name; "NAME:key=val,key=val" overrides knobs of a method (for
// sweeps): charw, charn, charparams, k1, b, w.name, w.desc, w.pname, w.pdesc, w.enum, w.server,
// partw, split, depth.
func lookup(spec string) (method, bool) {
	name, over, _ := strings.Cut(spec, ":")
	for _, m := range methods {
		if m.name != name {
			continue
		}
		if over == "" {
			return m, true
		}
		base := m.cfg
		var sets [][2]string
		for _, kv := range strings.Split(over, "+") {
			k, v, _ := strings.Cut(kv, "=")
			sets = append(sets, [2]string{k, v})
		}
		m.name = spec
		m.doc = "override of " + name
		m.cfg = func(p *poolStats) lexical.Config {
			c := base(p)
			for _, kv := range sets {
				f, _ := strconv.ParseFloat(kv[1], 64)
				switch kv[0] {
				case "charw":
					c.CharWeight = f
				case "charn":
					c.CharN = int(f)
				case "charparams":
					c.CharParams = f != 0
				case "k1":
					c.K1 = f
				case "b":
					c.B = f
				case "w.name":
					c.Weights[lexical.FieldName] = f
				case "w.desc":
					c.Weights[lexical.FieldDescription] = f
				case "w.pname":
					c.Weights[lexical.FieldParamName] = f
				case "w.pdesc":
					c.Weights[lexical.FieldParamDesc] = f
				case "w.enum":
					c.Weights[lexical.FieldEnum] = f
				case "w.server":
					c.Weights[lexical.FieldServer] = f
				case "pairw":
					c.PairWeight = f
				case "perfield":
					c.PerFieldNorm = f != 0
				}
			}
			return c
		}
		for _, kv := range sets {
			f, _ := strconv.ParseFloat(kv[1], 64)
			switch kv[0] {
			case "partw":
				m.opt.PartWeight = f
			case "split":
				m.opt.Split = index.Split(f)
			case "pwo":
				m.opt.PartsWordsOnly = f != 0
			case "maxparts":
				m.opt.MaxParts = int(f)
			case "pnc":
				m.opt.PartsNoChars = f != 0
			case "merge":
				m.opt.Merge = index.Merge(f)
			case "depth":
				m.opt.Depth = int(f)
			case "depthk":
				m.opt.DepthPerK = int(f)
			case "prf":
				m.opt.PRF, m.opt.PRFDocs = f, 3
			}
		}
		return m, true
	}
	return method{}, false
}

func build(ctx context.Context, pool []*toolmeshv1.Tool, m method) (*index.Index, error) {
	ps := stats(pool)
	ix := index.NewWithOptions(memory.New(), lexical.New(m.cfg(ps)), denseOf(m), m.opt)
	return ix, ix.Upsert(ctx, pool)
}

// stats computes the pool's mean document length in baseline terms (for the plain BM25 baseline).
func stats(pool []*toolmeshv1.Tool) *poolStats {
	total := 0
	for _, t := range pool {
		total += len(lexical.Words(t.GetName()))
		total += len(lexical.Words(t.GetDescription()))
		if props := t.GetInputSchema().GetFields()["properties"].GetStructValue(); props != nil {
			for n, v := range props.GetFields() {
				total += len(lexical.Words(n))
				total += len(lexical.Words(v.GetStructValue().GetFields()["description"].GetStringValue()))
			}
		}
	}
	return &poolStats{avgDocLen: float64(total) / float64(max(len(pool), 1))}
}

// ---- data ----

type poolLine struct {
	ID          string         `json:"id"`
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

type query struct {
	QID      string   `json:"qid"`
	Category string   `json:"category"`
	Query    string   `json:"query"`
	Relevant []string `json:"relevant"`
	Names    []string `json:"relevant_names"`
}

func loadPool(path string) ([]*toolmeshv1.Tool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*toolmeshv1.Tool
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var p poolLine
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		schema, err := structpb.NewStruct(bfcl.JSONSchema(p.Parameters).(map[string]any))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, p.ID, err)
		}
		out = append(out, &toolmeshv1.Tool{
			Id: server + "." + p.ID, Server: server, Name: p.Name, Description: p.Description, InputSchema: schema,
		})
	}
	return out, sc.Err()
}

func loadQueries(path string) ([]query, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []query
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var q query
		if err := json.Unmarshal([]byte(line), &q); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, q)
	}
	return out, nil
}

// ---- evaluation ----

var cutoffs = []int{1, 3, 5, 10}

type agg struct {
	n      int
	recall map[int]float64
	mrr    float64
}

func (a *agg) add(rel []string, ranked []string) {
	if a.recall == nil {
		a.recall = map[int]float64{}
	}
	a.n++
	for _, c := range cutoffs {
		hit := 0
		for _, r := range rel {
			if slices.Contains(ranked[:min(c, len(ranked))], r) {
				hit++
			}
		}
		a.recall[c] += float64(hit) / float64(len(rel))
	}
	for i, id := range ranked[:min(10, len(ranked))] {
		if slices.Contains(rel, id) {
			a.mrr += 1 / float64(i+1)
			break
		}
	}
}

func (a *agg) done() {
	for c := range a.recall {
		a.recall[c] /= float64(a.n)
	}
	a.mrr /= float64(a.n)
}

type miss struct {
	q      query
	ranked []string
}

type result struct {
	cats    []string
	per     map[string]*agg
	overall agg
	names   agg // name-level: a tool counts when its name is a relevant name
	misses  []miss
	took    time.Duration
}

// dumpW receives every search's results when -dump is set.
var dumpW io.Writer

func dumpHits(key string, hits []*toolmeshv1.ScoredTool) {
	if dumpW == nil {
		return
	}
	fmt.Fprint(dumpW, key)
	for _, h := range hits {
		fmt.Fprintf(dumpW, " %s:%x", h.GetTool().GetId(), math.Float64bits(h.GetScore()))
	}
	fmt.Fprintln(dumpW)
}

func evaluate(ctx context.Context, ix *index.Index, qs []query, k int) (*result, error) {
	res := &result{per: map[string]*agg{}}
	start := time.Now()
	for _, q := range qs {
		hits, err := ix.Search(ctx, q.Query, k, nil)
		if err != nil && err != index.ErrEmptyQuery {
			return nil, fmt.Errorf("%s: %w", q.QID, err)
		}
		dumpHits(ix.Name()+" "+q.QID, hits)
		ranked := make([]string, len(hits))
		rankedNames := make([]string, len(hits))
		for i, h := range hits {
			ranked[i] = strings.TrimPrefix(h.GetTool().GetId(), server+".")
			rankedNames[i] = h.GetTool().GetName()
		}
		if len(q.Names) > 0 {
			res.names.add(slices.Compact(slices.Sorted(slices.Values(q.Names))), firstOccurrences(rankedNames))
		}
		if res.per[q.Category] == nil {
			res.per[q.Category] = &agg{}
			res.cats = append(res.cats, q.Category)
		}
		res.per[q.Category].add(q.Relevant, ranked)
		res.overall.add(q.Relevant, ranked)
		top5 := ranked[:min(5, len(ranked))]
		for _, r := range q.Relevant {
			if !slices.Contains(top5, r) {
				res.misses = append(res.misses, miss{q: q, ranked: top5})
				break
			}
		}
	}
	res.took = time.Since(start)
	for _, a := range res.per {
		a.done()
	}
	res.overall.done()
	if res.names.n > 0 {
		res.names.done()
	}
	return res, nil
}

// firstOccurrences keeps each name's first position only, so that name-level recall counts a
// name once.
func firstOccurrences(names []string) []string {
	seen := map[string]bool{}
	out := make([]string, len(names))
	for i, n := range names {
		if !seen[n] {
			seen[n] = true
			out[i] = n
		}
	}
	return out
}

func printResult(w io.Writer, m method, r *result, k int) {
	fmt.Fprintf(w, "\n### %s — %s\n\n", m.name, m.doc)
	fmt.Fprintf(w, "| category | n | R@1 | R@3 | R@5 | R@10 | MRR@10 |\n|---|---:|---:|---:|---:|---:|---:|\n")
	row := func(name string, a *agg) {
		fmt.Fprintf(w, "| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", name, a.n, a.recall[1], a.recall[3], a.recall[5], a.recall[10], a.mrr)
	}
	for _, c := range r.cats {
		row(c, r.per[c])
	}
	row("**overall**", &r.overall)
	if r.names.n > 0 {
		row("overall, name-level", &r.names)
	}
	fmt.Fprintf(w, "\n(%d queries in %s, %.0f µs/query)\n", r.overall.n, r.took.Round(time.Millisecond), float64(r.took.Microseconds())/float64(r.overall.n))
}

func printMisses(w io.Writer, r *result) {
	fmt.Fprintf(w, "\nmisses at rank 5 (%d):\n", len(r.misses))
	for _, m := range r.misses {
		fmt.Fprintf(w, "- %s %q\n    want %v\n    got  %v\n", m.q.QID, m.q.Query, m.q.Relevant, m.ranked)
	}
}
