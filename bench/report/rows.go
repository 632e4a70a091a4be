package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
)

// verdict is a summary row's last column.
type verdict string

const (
	met     verdict = "met"
	notMet  verdict = "**not met**"
	info    verdict = "—" // no target: reported for context
	failed  verdict = "**failed**"
	skipped verdict = "skipped"
)

func judge(ok bool) verdict {
	if ok {
		return met
	}
	return notMet
}

// row is one line of the summary table. Ratio is toolmesh ÷ baseline (NaN when there is no
// baseline or it is zero).
type row struct {
	Issue    string
	Measure  string
	Toolmesh string
	Baseline string
	Ratio    float64
	Target   string
	Verdict  verdict
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// Targets of the issues, in one place so the summary and the test agree.
const (
	// issue 2
	execMaxOverheadUS  = 80.0
	execMinThroughput  = 0.85
	execMinNewSessionX = 2.5
	// issue 3
	readmeBM25R1    = 0.646
	readmeBM25R5    = 0.882
	readmeBM25MRR10 = 0.813
	targetR5        = 0.95
	targetMRR10     = 0.90
	target10kP99US  = 1000.0
	target100kP99US = 10000.0
	target10kBuildS = 2.0
	// issue 6: tracing on costs at most 15 %
	tracingMaxOverhead = 0.15
	// issue 8: "flat" memory, read as at most 10 % more resident memory after the load
	loadMaxRSSGrowth = 0.10
	// issue 17: a request sent while the executor is away fails "fast", read as within 1 s: a
	// call that waited for the executor instead would take the whole gap (half a second or
	// more) or the api's own timeouts (10 s per RPC, 2 min per tool call)
	restartMaxFailMS = 1000.0
	// issue 26: another token's calls beside a legacy SSE flood take at most their own call
	// time (p50 alone) plus this
	sseMaxExtraMS = 100.0
	// issue 27: the audit trail adds at most this to a call's p50, and takes at most 5 % off
	// calls/s
	auditMaxAddedP50US = 10.0
	auditMinThroughput = 0.95
	// issue 9
	consoleBudgetKB = 200.0
	consoleGoalMS   = 300.0
)

func us(v float64) string { return thousands(v, 0) + " µs" }

// signedUS is a difference in µs with its sign, "+38 µs" or "-6 µs".
func signedUS(v float64) string {
	r := math.Round(v) + 0 // + 0 turns -0 into 0
	if r >= 0 {
		return "+" + us(r)
	}
	return us(r)
}

// thousands formats v with digits decimals and commas between thousands.
func thousands(v float64, digits int) string {
	s := fmt.Sprintf("%.*f", digits, v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if frac != "" {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}

// executorRows compares the executor's gRPC API with a direct held mcp-go call and with a new
// session per call (issue 2), per transport.
func executorRows(f figures.Executor) []row {
	const issue = "2 executor"
	var rows []row
	at := fmt.Sprintf("@%d", f.Concurrency)
	for _, tr := range []string{"sse", "streamable-http"} {
		d, okD := f.Find(tr, "direct-held")
		e, okE := f.Find(tr, "executor-grpc")
		if !okD || !okE {
			continue
		}
		rows = append(rows,
			row{issue, tr + ": call p50, 1 caller (executor gRPC vs direct held mcp-go call)",
				us(e.P50), us(d.P50), ratio(e.P50, d.P50),
				fmt.Sprintf("≤ baseline + %.0f µs (here %s)", execMaxOverheadUS, signedUS(e.P50-d.P50)),
				judge(e.P50-d.P50 <= execMaxOverheadUS)},
			row{issue, tr + ": calls/s, " + at + " callers (executor vs direct)",
				thousands(e.CallsPerSec, 0), thousands(d.CallsPerSec, 0), ratio(e.CallsPerSec, d.CallsPerSec),
				fmt.Sprintf("ratio ≥ %.2f", execMinThroughput), judge(ratio(e.CallsPerSec, d.CallsPerSec) >= execMinThroughput)},
			row{issue, tr + ": CPU per call, " + at + " callers (executor vs direct)",
				us(e.CPUPerCall), us(d.CPUPerCall), ratio(e.CPUPerCall, d.CPUPerCall), "—", info},
		)
		if n, ok := f.Find(tr, "new-session"); ok {
			rows = append(rows, row{issue, tr + ": call p50, 1 caller (executor vs a new session per call)",
				us(e.P50), us(n.P50), ratio(e.P50, n.P50),
				fmt.Sprintf("ratio ≤ %.2f (new session ≥ %.1f× slower)", 1/execMinNewSessionX, execMinNewSessionX),
				judge(e.P50 > 0 && n.P50/e.P50 >= execMinNewSessionX)})
		}
		rows = append(rows, row{issue, tr + ": failed calls (executor, direct)",
			fmt.Sprintf("%d of %s", e.Errors, thousands(float64(e.Calls+e.Errors), 0)),
			fmt.Sprintf("%d of %s", d.Errors, thousands(float64(d.Calls+d.Errors), 0)), math.NaN(), "0", judge(e.Errors == 0)})
	}
	return rows
}

// retrievalRows compares the embedded default with plain BM25: this run's own bm25 method and
// the data README's published figure (issue 3).
func retrievalRows(f figures.Retrieval) []row {
	issue := "3 retrieval quality"
	def, ok := f.Find("default")
	if !ok {
		return []row{{issue, "default method", "not in the run", "", math.NaN(), "", failed}}
	}
	split := fmt.Sprintf("(%s, %d queries, %d tools)", f.Queries, f.N, f.Tools)
	var rows []row
	add := func(measure string, got, base float64, baseName string, target float64) {
		rows = append(rows, row{issue, measure + " " + split, fmt.Sprintf("%.3f", got), fmt.Sprintf("%.3f %s", base, baseName),
			ratio(got, base), fmt.Sprintf("≥ %.2f", target), judge(got >= target)})
	}
	bm, haveBM := f.Find("bm25")
	if haveBM {
		add("recall@5, default vs bm25 of this run", def.R5, bm.R5, "(bm25, this run)", targetR5)
	}
	add("recall@5, default vs the data README's BM25", def.R5, readmeBM25R5, "(README)", targetR5)
	if haveBM {
		add("MRR@10, default vs bm25 of this run", def.MRR10, bm.MRR10, "(bm25, this run)", targetMRR10)
	}
	add("MRR@10, default vs the data README's BM25", def.MRR10, readmeBM25MRR10, "(README)", targetMRR10)
	rows = append(rows, row{issue, "recall@1, default vs the data README's BM25 " + split, fmt.Sprintf("%.3f", def.R1),
		fmt.Sprintf("%.3f (README)", readmeBM25R1), ratio(def.R1, readmeBM25R1), "—", info})
	return rows
}

// speedRows hold the memory store's search and build times against the issue's targets (issue
// 3); there is no other program to compare with, so the target is the baseline.
func speedRows(f figures.Speed) []row {
	issue := "3 retrieval speed"
	var rows []row
	for _, c := range []struct {
		tools  int
		target float64
	}{{10000, target10kP99US}, {100000, target100kP99US}} {
		s, ok := f.Find(c.tools)
		name := fmt.Sprintf("search p99 at %s tools (memory store)", thousands(float64(c.tools), 0))
		if !ok {
			rows = append(rows, row{issue, name, "not measured in this run", "", math.NaN(), "≤ " + us(c.target), skipped})
			continue
		}
		rows = append(rows, row{issue, name, us(s.SearchP99), "target " + us(c.target), ratio(s.SearchP99, c.target),
			"≤ " + us(c.target), judge(s.SearchP99 <= c.target)})
	}
	if s, ok := f.Find(10000); ok {
		rows = append(rows, row{issue, "index build, 10,000 tools", fmt.Sprintf("%.2f s", s.BuildSeconds),
			fmt.Sprintf("target %.0f s", target10kBuildS), ratio(s.BuildSeconds, target10kBuildS),
			fmt.Sprintf("≤ %.0f s", target10kBuildS), judge(s.BuildSeconds <= target10kBuildS)})
	} else {
		rows = append(rows, row{issue, "index build, 10,000 tools", "not measured in this run", "", math.NaN(),
			fmt.Sprintf("≤ %.0f s", target10kBuildS), skipped})
	}
	return rows
}

// stepBench is `go test -bench BenchmarkStep` of services/inference/gorilla: one step with
// its catalogs built (cold) and with them from the service's cache (cached).
type stepBench struct {
	Cold, Cached benchResult
}

// benchResult is one benchmark line.
type benchResult struct {
	NsPerOp, BytesPerOp, AllocsPerOp float64
}

func (b benchResult) String() string {
	return fmt.Sprintf("%s µs, %s KB, %s allocs", thousands(b.NsPerOp/1e3, 0), thousands(b.BytesPerOp/1024, 0), thousands(b.AllocsPerOp, 0))
}

// callsRows are the BFCL checks of the Gorilla layer; the target is every case (issue 4).
func callsRows(f figures.Calls, step *stepBench) []row {
	issue := "4 inference calls"
	var rows []row
	for _, c := range []struct {
		name string
		n    figures.Count
	}{{"parse", f.Parse}, {"validate", f.Validate}, {"grammar", f.Grammar}, {"reject", f.Reject}} {
		rows = append(rows, row{issue, "BFCL cases passing " + c.name, fmt.Sprintf("%d/%d", c.n.OK, c.n.N), "—", math.NaN(),
			fmt.Sprintf("%d/%d (all)", c.n.N, c.n.N), judge(c.n.N > 0 && c.n.OK == c.n.N)})
	}
	if step != nil {
		rows = append(rows,
			row{issue, "one step, 8 tools, cold: both catalogs built (sized grammar) + prompt + parse (BenchmarkStep/cold)",
				step.Cold.String(), "—", math.NaN(), "—", info},
			row{issue, "one step, 8 tools, cached: catalogs from the service's cache + prompt + parse (BenchmarkStep/cached)",
				step.Cached.String(), "—", math.NaN(), "—", info})
	}
	return rows
}

// liveRows are the BFCL cases decoded by a real llama-server (issues 4, 14 and 18), each
// output counted as one kind: through the inference service (serviceLiveRows) or, for a -raw
// run, with the whole tool list's prompt. With calls-only grammars every output must be calls
// that parse and validate, none a plain answer; which functions a random-weight model names is
// chance.
func liveRows(l figures.Live) []row {
	issue := "4 inference calls (live)"
	if l.Cases == 0 {
		return []row{{issue, "BFCL cases decoded by a real llama-server", "none decoded", "", math.NaN(), "", failed}}
	}
	if l.Path == "service" {
		return serviceLiveRows(l)
	}
	of := func(n int) string { return fmt.Sprintf("%d/%d", n, l.Cases) }
	all := fmt.Sprintf("%d/%d (all)", l.Cases, l.Cases)
	grammars := "grammars with a plain-answer branch"
	if l.CallsOnly {
		grammars = "calls-only grammars"
	}
	valid := l.Whole + l.OtherNames
	rows := []row{
		{issue, fmt.Sprintf("live, %s, n_predict %d: outputs whose calls parse and validate", grammars, l.NPredict),
			of(valid), "—", math.NaN(), all, judge(valid == l.Cases)},
		{issue, "live: whole calls, i.e. parse + validate + name exactly the ground truth's functions",
			of(l.Whole), "—", math.NaN(), "— (a random-weight model names functions by chance)", info},
	}
	if l.CallsOnly {
		rows = append(rows, row{issue, "live: plain answers (calls-only grammars force calls)", of(l.Plain), "—", math.NaN(), "0", judge(l.Plain == 0)})
	} else {
		rows = append(rows, row{issue, "live: plain answers (not passes)", of(l.Plain), "—", math.NaN(), "—", info})
	}
	return append(rows,
		row{issue, "live: outputs cut off at n_predict (the grammar is sized to end before)", of(l.Cut), "—", math.NaN(), "0", judge(l.Cut == 0)},
		row{issue, "live: failed requests or cases not sent", of(l.Errors), "—", math.NaN(), "0", judge(l.Errors == 0)})
}

// serviceLiveRows are the cases sent through the inference service as a question's first step
// (issue 18): its prompt budget keeps every prompt within the context by dropping the
// lowest-ranked tools, and says which. Every output with calls must parse and validate, none be
// refused; plain answers (the service's grammars allow one) are reported, not counted (issue 30).
func serviceLiveRows(l figures.Live) []row {
	issue := "4 inference calls (live)"
	of := func(n int) string { return fmt.Sprintf("%d/%d", n, l.Cases) }
	// Judged: the calls. A plain answer is what a random-weight model chooses by chance through
	// the grammar's answer branch; it is reported beside, never counted as answered.
	valid := l.Whole + l.OtherNames
	callOutputs := l.Cases - l.Plain - l.Refused - l.Errors
	return []row{
		{issue, fmt.Sprintf("live, through the inference service (context %d tokens, n_predict ceiling %d): cases answered with calls that parse and validate (plain answers apart, below)",
			l.CtxSize, l.NPredict), of(valid), "—", math.NaN(),
			fmt.Sprintf("every call output: %d/%d (the %d cases not answered plainly, refused or failed)", callOutputs, l.Cases, callOutputs),
			judge(valid == callOutputs && valid > 0)},
		{issue, "live: whole calls, i.e. parse + validate + name exactly the ground truth's functions",
			of(l.Whole), "—", math.NaN(), "— (a random-weight model names functions by chance)", info},
		{issue, "live: plain answers (the service's grammars allow them; not passes)", of(l.Plain), "—", math.NaN(), "—", info},
		{issue, fmt.Sprintf("live: cases whose prompt with every tool is longer than the context (llama-server refuses such a prompt; the longest takes %s tokens)",
			thousands(float64(l.LongestWhole), 0)), of(l.WholeOverCtx), "—", math.NaN(), "—", info},
		{issue, "live: prompt budget: cases whose prompt fit with every tool", of(l.FitWhole), "—", math.NaN(), "—", info},
		{issue, fmt.Sprintf("live: prompt budget: cases with tools dropped to fit (%d tools in all), answered", l.ToolsDropped),
			of(l.Dropped), "—", math.NaN(), "—", info},
		{issue, "live: prompt budget: of those, cases with a ground-truth function among the dropped",
			fmt.Sprintf("%d/%d", l.DroppedGroundTruth, l.Dropped), "—", math.NaN(), "— (depends on the ranking and the tokenizer)", info},
		{issue, "live: refused, the prompt too long even with every tool dropped", of(l.Refused), "—", math.NaN(), "0", judge(l.Refused == 0)},
		{issue, "live: outputs cut off at n_predict (the grammar is sized to end before)", of(l.Cut), "—", math.NaN(), "0", judge(l.Cut == 0)},
		{issue, "live: failed requests or cases not sent", of(l.Errors), "—", math.NaN(), "0", judge(l.Errors == 0)},
	}
}

// loopRows hold the loop's own overhead per iteration at 1 client against the issue's target,
// which is the baseline the issue gives (issue 5).
func loopRows(f figures.Loop) []row {
	issue := "5 agent loop"
	var rows []row
	for _, r := range f.Rows {
		if r.Clients != 1 {
			continue
		}
		mode := map[string]string{"inproc": "one process", "micro": "microservices"}[r.Mode]
		if mode == "" {
			mode = r.Mode
		}
		v := judge(r.IterP50 <= r.Target && r.Errors == 0 && r.Queries > 0)
		rows = append(rows, row{issue, fmt.Sprintf("overhead per iteration p50, %s, %s, 1 client", mode, r.Via),
			us(r.IterP50), "target " + us(r.Target), ratio(r.IterP50, r.Target), "≤ " + us(r.Target), v})
	}
	for _, r := range f.Rows {
		if r.Clients == 1 {
			continue
		}
		rows = append(rows, row{issue, fmt.Sprintf("queries/s, %s, %s, %d clients", r.Mode, r.Via, r.Clients),
			thousands(r.QPS, 0), "—", math.NaN(), "—", info})
	}
	rows = append(rows, hopRows(f)...)
	return append(rows, loopFailedRow(issue, f))
}

// loopAllocBudgetKB is what one query may allocate in bench/loop's process with every target
// in it (inproc, 1 client), by API: commit e45e502's figures, measured side by side with the
// code that had grown 50 % past them (issue 28: the follow-up search offered the whole
// calculator). A change that allocates more fails its row in `make bench`; lower the budget
// when the figure drops for good.
var loopAllocBudgetKB = map[string]float64{"rest": 481, "grpc": 434}

// inprocMaxCPU is issue 28's target: `up` (every target in one process, calling each other
// directly) spends at most 70 % of the CPU per query that microservices spend on the same loop.
const inprocMaxCPU = 0.70

// hopRows are issue 28's loop rows: allocations per query in one process against the committed
// budget, and one process's CPU per query against microservices', per API at 1 client.
func hopRows(f figures.Loop) []row {
	issue := "28 hops"
	var rows []row
	find := func(mode, via string) (figures.LoopRow, bool) {
		for _, r := range f.Rows {
			if r.Mode == mode && r.Via == via && r.Clients == 1 && r.Queries > 0 {
				return r, true
			}
		}
		return figures.LoopRow{}, false
	}
	for _, via := range []string{"rest", "grpc"} {
		in, ok := find("inproc", via)
		if !ok {
			continue
		}
		if budget, ok := loopAllocBudgetKB[via]; ok {
			rows = append(rows, row{issue, fmt.Sprintf("allocated per query, one process, %s, 1 client (budget: e45e502's)", via),
				thousands(in.AllocKB, 0) + " KB", "budget " + thousands(budget, 0) + " KB", ratio(in.AllocKB, budget),
				"≤ " + thousands(budget, 0) + " KB", judge(in.AllocKB <= budget)})
		}
		if micro, ok := find("micro", via); ok {
			rows = append(rows, row{issue, fmt.Sprintf("CPU per query, one process vs microservices, %s, 1 client", via),
				us(in.CPUPerQuery), us(micro.CPUPerQuery), ratio(in.CPUPerQuery, micro.CPUPerQuery),
				fmt.Sprintf("ratio ≤ %.2f", inprocMaxCPU), judge(in.CPUPerQuery <= inprocMaxCPU*micro.CPUPerQuery)})
		}
	}
	return rows
}

// loopFailedRow counts a loop run's failed queries over all its rows; none may fail.
func loopFailedRow(issue string, f figures.Loop) row {
	errs, queries := 0, 0
	for _, r := range f.Rows {
		errs += r.Errors
		queries += r.Queries + r.Errors
	}
	return row{issue, "failed queries, all rows", fmt.Sprintf("%d of %s", errs, thousands(float64(queries), 0)),
		"—", math.NaN(), "0", judge(errs == 0 && queries > 0)}
}

// Issue 25's target: a chat completion's overhead per request at most 5 % over /v1/query's.
const chatMaxOverhead = 1.05

// loopIterations is the iterations of every query bench/loop counts: it accepts only answers
// of the scripted run (a call, then the answer), so a query's overhead is 2× its iteration's.
const loopIterations = 2

// chatRows compare POST /v1/chat/completions with POST /v1/query through the same loop in one
// process (issue 25): overhead per request at 1 client against the target, then CPU and
// allocations per query and queries/s at 32 clients for context.
func chatRows(f figures.Loop) []row {
	issue := "25 OpenAI face"
	var rows []row
	rest, okR := f.Find("inproc", "rest", 1)
	chat, okC := f.Find("inproc", "chat", 1)
	if okR && okC {
		q, b := loopIterations*chat.IterP50, loopIterations*rest.IterP50
		ok := ratio(q, b) <= chatMaxOverhead && rest.Errors+chat.Errors == 0 && rest.Queries > 0 && chat.Queries > 0
		rows = append(rows,
			row{issue, fmt.Sprintf("overhead per request p50 (query − model time), one process, 1 client: chat completion vs /v1/query (chat − /v1/query: %s)", signedUS(q-b)),
				us(q), us(b), ratio(q, b), fmt.Sprintf("ratio ≤ %.2f", chatMaxOverhead), judge(ok)},
			row{issue, "CPU per query (the whole process), 1 client: chat vs /v1/query", us(chat.CPUPerQuery), us(rest.CPUPerQuery),
				ratio(chat.CPUPerQuery, rest.CPUPerQuery), "—", info},
			row{issue, "allocated per query (the whole process), 1 client: chat vs /v1/query", fmt.Sprintf("%s KB", thousands(chat.AllocKB, 0)),
				fmt.Sprintf("%s KB", thousands(rest.AllocKB, 0)), ratio(chat.AllocKB, rest.AllocKB), "—", info})
	} else {
		rows = append(rows, row{issue, "overhead per request, 1 client: chat vs /v1/query", "not measured", "", math.NaN(), "", failed})
	}
	if rest, okR := f.Find("inproc", "rest", 32); okR {
		if chat, okC := f.Find("inproc", "chat", 32); okC {
			rows = append(rows, row{issue, "queries/s, one process, 32 clients: chat vs /v1/query", thousands(chat.QPS, 0), thousands(rest.QPS, 0),
				ratio(chat.QPS, rest.QPS), "—", info})
		}
	}
	return append(rows, loopFailedRow(issue, f))
}

// tracingRun is one loop run with tracing on or off.
type tracingRun struct {
	On  bool
	Row figures.LoopRow
}

// tracingRows compare tracing on (always_on, exported over OTLP) with off in the same run
// (issue 6): the mean of the runs of each kind.
func tracingRows(runs []tracingRun, sink string) []row {
	issue := "6 tracing"
	var on, off []figures.LoopRow
	for _, r := range runs {
		if r.On {
			on = append(on, r.Row)
		} else {
			off = append(off, r.Row)
		}
	}
	if len(on) == 0 || len(off) == 0 {
		return []row{{issue, "tracing on vs off", "not measured", "", math.NaN(), "", failed}}
	}
	mean := func(rs []figures.LoopRow, f func(figures.LoopRow) float64) float64 {
		var s float64
		for _, r := range rs {
			s += f(r)
		}
		return s / float64(len(rs))
	}
	n := fmt.Sprintf("mean of %d run(s) each, alternated; on = always_on to %s", len(on), sink)
	p50On, p50Off := mean(on, func(r figures.LoopRow) float64 { return r.P50 }), mean(off, func(r figures.LoopRow) float64 { return r.P50 })
	cpuOn, cpuOff := mean(on, func(r figures.LoopRow) float64 { return r.CPUPerQuery }), mean(off, func(r figures.LoopRow) float64 { return r.CPUPerQuery })
	qpsOn, qpsOff := mean(on, func(r figures.LoopRow) float64 { return r.QPS }), mean(off, func(r figures.LoopRow) float64 { return r.QPS })
	maxR := 1 + tracingMaxOverhead
	errs := 0
	for _, r := range runs {
		errs += r.Row.Errors
	}
	return []row{
		{issue, "query p50, tracing on vs off (" + n + ")", fmt.Sprintf("%.2f ms", p50On), fmt.Sprintf("%.2f ms", p50Off),
			ratio(p50On, p50Off), fmt.Sprintf("ratio ≤ %.2f", maxR), judge(ratio(p50On, p50Off) <= maxR)},
		{issue, "CPU per query, tracing on vs off", us(cpuOn), us(cpuOff), ratio(cpuOn, cpuOff),
			fmt.Sprintf("ratio ≤ %.2f", maxR), judge(ratio(cpuOn, cpuOff) <= maxR)},
		{issue, "queries/s, tracing on vs off", thousands(qpsOn, 1), thousands(qpsOff, 1), ratio(qpsOn, qpsOff),
			fmt.Sprintf("ratio ≥ %.2f (≤ 15%% more time per query)", 1/maxR), judge(ratio(qpsOn, qpsOff) >= 1/maxR)},
		{issue, "failed queries, tracing runs", fmt.Sprintf("%d", errs), "—", math.NaN(), "0", judge(errs == 0)},
	}
}

// loadRows hold the open-loop load's errors and the process's memory before and after (issue
// 8), then the rolling-restart phase's rows when it ran (issue 17) and the legacy SSE phase's
// (issue 26).
func loadRows(f figures.Load) []row {
	issue := "8 load"
	phases := append(restartRows(f.Restart), sseRows(f.SSE)...)
	all, ok := f.All()
	if !ok {
		if len(phases) > 0 {
			return phases // the phases ran alone (-duration 0)
		}
		return []row{{issue, "load", "no requests", "", math.NaN(), "", failed}}
	}
	what := fmt.Sprintf("%.0f req/s for %.0f s", f.Rate, f.DurationSeconds)
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	return append([]row{
		{issue, "failed requests, " + what, fmt.Sprintf("%d of %s", all.Errors, thousands(float64(all.Sent), 0)), "—", math.NaN(), "0",
			judge(all.Errors == 0 && all.Sent > 0)},
		{issue, fmt.Sprintf("resident memory after vs before the load (%.0f s settle)", f.SettleSeconds),
			mib(float64(f.RSSAfter)), mib(float64(f.RSSBefore)), ratio(float64(f.RSSAfter), float64(f.RSSBefore)),
			fmt.Sprintf("flat: ratio ≤ %.2f", 1+loadMaxRSSGrowth), judge(ratio(float64(f.RSSAfter), float64(f.RSSBefore)) <= 1+loadMaxRSSGrowth)},
		{issue, "heap in use after vs before", mib(float64(f.HeapAfter)), mib(float64(f.HeapBefore)),
			ratio(float64(f.HeapAfter), float64(f.HeapBefore)), "—", info},
		{issue, "goroutines after vs before", fmt.Sprintf("%d", f.GoroutinesAfter), fmt.Sprintf("%d", f.GoroutinesBefore),
			ratio(float64(f.GoroutinesAfter), float64(f.GoroutinesBefore)), "—", info},
		{issue, "latency p50 / p99 / p99.9, all kinds", fmt.Sprintf("%.2f / %.2f / %.2f ms", all.P50, all.P99, all.P999), "—",
			math.NaN(), "—", info},
	}, phases...)
}

// sseRows hold the load's legacy SSE phase (issue 26): one token keeps many slow calls posted to
// a legacy SSE session while another token's calls of the same tool are timed, alone and then
// beside it. The other token's p99 beside the flood must stay within its own call time (p50
// alone) plus 100 ms, none of its calls failing.
func sseRows(f *figures.LoadSSE) []row {
	if f == nil {
		return nil
	}
	issue := "26 legacy SSE"
	if f.Beside.Sent == 0 || f.Alone.OK == 0 {
		return []row{{issue, "another token's calls beside a legacy SSE flood", "none answered", "", math.NaN(), "", failed}}
	}
	extra := f.Beside.P99 - f.Alone.P50
	errs := f.Alone.Errors + f.Beside.Errors
	return []row{
		{issue, fmt.Sprintf("another token's call p99 (p50 %.1f ms) while one token keeps %d calls of a %.0f ms tool posted to a legacy SSE session, vs its own call time (p50 alone)",
			f.Beside.P50, f.Calls, f.CallMs),
			fmt.Sprintf("%.1f ms", f.Beside.P99), fmt.Sprintf("%.1f ms", f.Alone.P50), ratio(f.Beside.P99, f.Alone.P50),
			fmt.Sprintf("≤ own call time + %.0f ms (here %+.1f ms)", sseMaxExtraMS, extra), judge(extra <= sseMaxExtraMS && errs == 0)},
		{issue, "the other token's failed calls, alone and beside the flood",
			fmt.Sprintf("%d of %s", errs, thousands(float64(f.Alone.Sent+f.Beside.Sent), 0)), "—", math.NaN(), "0", judge(errs == 0)},
		{issue, "the flood's calls: accepted (results read), refused with 429, failed otherwise",
			fmt.Sprintf("%s, %s, %d of %s", thousands(float64(f.Accepted), 0), thousands(float64(f.Refused), 0), f.Failed, thousands(float64(f.Posted), 0)),
			"—", math.NaN(), "—", info},
	}
}

// restartRows hold the load's rolling-restart phase (issue 17): the executor, its own process,
// stopped with SIGTERM and started again under the load. Nothing sent before a stop may fail
// (the drain finishes it); what is sent while the executor is away fails fast with 503.
func restartRows(f *figures.LoadRestart) []row {
	if f == nil {
		return nil
	}
	issue := "17 rolling restart"
	if len(f.Cycles) == 0 {
		return []row{{issue, "executor restarts under load", "none completed", "", math.NaN(), "", failed}}
	}
	what := fmt.Sprintf("%d executor restarts under %.0f req/s for %.0f s", len(f.Cycles), f.Rate, f.DurationSeconds)
	var stops, exits, starts []string
	for _, c := range f.Cycles {
		stops = append(stops, fmt.Sprintf("%.0f", c.StopToServedMs))
		exits = append(exits, fmt.Sprintf("%.0f", c.DrainExitMs))
		starts = append(starts, fmt.Sprintf("%.0f", c.StartToServedMs))
	}
	fast := f.GapFailMaxMs <= restartMaxFailMS
	return []row{
		{issue, fmt.Sprintf("requests sent before a stop began that failed (%s; %d of them in flight when a stop began; besides, %d answered 503 because the executor refused the connection: their call reached it only after the stop)",
			what, f.InFlight, f.Before503),
			fmt.Sprintf("%d of %s", f.BeforeFailed, thousands(float64(f.Before), 0)), "—", math.NaN(), "0",
			judge(f.BeforeFailed == 0 && f.Before > 0 && len(f.Cycles) == f.Restarts)},
		{issue, "requests sent while the executor was away that failed; of those, with 503",
			fmt.Sprintf("%d of %s; %d", f.GapFailed, thousands(float64(f.Gap), 0), f.Gap503), "—", math.NaN(), "every failure 503",
			judge(f.Gap503 == f.GapFailed)},
		{issue, "those failures answered in p50 / max", fmt.Sprintf("%.1f / %.1f ms", f.GapFailP50Ms, f.GapFailMaxMs), "—", math.NaN(),
			fmt.Sprintf("fast: max ≤ %s ms", thousands(restartMaxFailMS, 0)), judge(fast)},
		{issue, "requests sent after the last restart served that failed", fmt.Sprintf("%d of %s", f.AfterFailed, thousands(float64(f.After), 0)),
			"—", math.NaN(), "0", judge(f.AfterFailed == 0 && f.After > 0)},
		{issue, "per restart: SIGTERM until a tool call is served again (SIGTERM to exit; start to served)",
			fmt.Sprintf("%s ms (%s; %s)", strings.Join(stops, ", "), strings.Join(exits, ", "), strings.Join(starts, ", ")), "—", math.NaN(), "—", info},
	}
}

// consoleFigures is what the console's browser test logs about first loads.
type consoleFigures struct {
	Requests                    int
	TransferKB, BodiesKB        float64
	MinMS, MedianMS, MaxMS      float64
	HaveTransfer, HaveServersMS bool
}

// consoleRows hold the web console's first load against the issue's budget and goal (issue 9).
func consoleRows(c consoleFigures) []row {
	issue := "9 console"
	var rows []row
	if c.HaveTransfer {
		rows = append(rows, row{issue, fmt.Sprintf("first load, bytes transferred (%d requests)", c.Requests),
			fmt.Sprintf("%.1f KB", c.TransferKB), fmt.Sprintf("target %.0f KB", consoleBudgetKB), ratio(c.TransferKB, consoleBudgetKB),
			fmt.Sprintf("< %.0f KB", consoleBudgetKB), judge(c.TransferKB < consoleBudgetKB)})
	}
	if c.HaveServersMS {
		rows = append(rows, row{issue, fmt.Sprintf("servers page on screen, median of 5 first loads (min %.0f, max %.0f ms)", c.MinMS, c.MaxMS),
			fmt.Sprintf("%.0f ms", c.MedianMS), fmt.Sprintf("target %.0f ms", consoleGoalMS), ratio(c.MedianMS, consoleGoalMS),
			fmt.Sprintf("< %.0f ms", consoleGoalMS), judge(c.MedianMS < consoleGoalMS)})
	}
	return rows
}

func replicasRows(f figures.Replicas) []row {
	issue := "20 replicas"
	total := f.Executor1 + f.Executor2
	share := 0.0
	if total > 0 {
		share = float64(min(f.Executor1, f.Executor2)) / float64(total)
	}
	return []row{
		{issue, "tool calls per executor, both running", fmt.Sprintf("%d / %d", f.Executor1, f.Executor2), "—", math.NaN(),
			"each ≥ 20 %", judge(total > 0 && share >= 0.2)},
		{issue, "failed requests of the run (a drain and a restart of executor 1 in it)", fmt.Sprintf("%d of %d", f.Failed, f.Requests), "—", math.NaN(),
			"none before the drain; after it within 1 s", judge(f.Failed == f.FailedAfterStop && (f.FailedAfterStop == 0 || f.WindowMs <= 1000))},
		{issue, "executor 1: SIGTERM to exit; restart to its first call", fmt.Sprintf("%.0f ms; %.0f ms", f.DrainExitMs, f.RejoinMs), "—", math.NaN(),
			"—", info},
	}
}

// Issue 19's targets at its callers: what the MCP face may add to p50 and take off calls/s;
// issue 28's on the CPU a call costs.
const (
	faceMaxAddedP50US = 150.0
	faceMinThroughput = 0.7
	faceMaxCPURatio   = 1.5
)

// mcpfaceRows judges /mcp against direct calls on each mesh bench/mcpface ran: `up` as it runs
// by default (services called in the process) and services over gRPC (in a figures file from
// before the second, only the first, as "face").
func mcpfaceRows(f figures.MCPFace) []row {
	issue := "19 MCP face"
	var rows []row
	for _, path := range []struct{ name, title string }{{"face", "/mcp (up)"}, {"face-grpc", "/mcp (services over gRPC)"}} {
		if _, ok := f.Find(path.name, 1); !ok && path.name != "face" {
			continue
		}
		for _, n := range []int{1, f.Callers} {
			d, okD := f.Find("direct", n)
			m, okM := f.Find(path.name, n)
			if !okD || !okM {
				rows = append(rows, row{issue, fmt.Sprintf("calls through %s at %d callers", path.title, n), "not measured", "", math.NaN(), "", failed})
				continue
			}
			added := m.P50 - d.P50
			p50Target, rateTarget, cpuTarget := "—", "—", "—"
			p50Verdict, rateVerdict, cpuVerdict := info, info, info
			if n == f.Callers {
				p50Target, rateTarget = "≤ direct + "+us(faceMaxAddedP50US), fmt.Sprintf("≥ %.2f×", faceMinThroughput)
				p50Verdict, rateVerdict = judge(added <= faceMaxAddedP50US), judge(ratio(m.CallsPerSec, d.CallsPerSec) >= faceMinThroughput)
				cpuTarget, cpuVerdict = fmt.Sprintf("≤ %.1f×", faceMaxCPURatio), judge(ratio(m.CPUPerCall, d.CPUPerCall) <= faceMaxCPURatio)
			}
			rows = append(rows,
				row{issue, fmt.Sprintf("tool call p50 through %s vs direct, %d caller(s) (adds %s)", path.title, n, signedUS(added)), us(m.P50), us(d.P50),
					ratio(m.P50, d.P50), p50Target, p50Verdict},
				row{issue, fmt.Sprintf("calls/s through %s vs direct, %d caller(s)", path.title, n), thousands(m.CallsPerSec, 0), thousands(d.CallsPerSec, 0),
					ratio(m.CallsPerSec, d.CallsPerSec), rateTarget, rateVerdict},
				row{issue, fmt.Sprintf("CPU per call (the whole process) through %s vs direct, %d caller(s)", path.title, n), us(m.CPUPerCall), us(d.CPUPerCall),
					ratio(m.CPUPerCall, d.CPUPerCall), cpuTarget, cpuVerdict})
		}
	}
	if l := f.List; l != nil {
		rows = append(rows, row{issue, fmt.Sprintf("tools/list of %s tools p50: every page through /mcp (%d pages) vs one list on the server", thousands(float64(l.Tools), 0), l.Pages),
			fmt.Sprintf("%.1f ms", l.FaceP50Ms), fmt.Sprintf("%.1f ms", l.DirectP50Ms), ratio(l.FaceP50Ms, l.DirectP50Ms), "reported", info})
	}
	return rows
}

// faceMaxOwnCPUNS is issue 28's bound on the MCP face's own work for one tools/call.
const faceMaxOwnCPUNS = 20000.0

// faceCallRows reads services/api/mcpface's BenchmarkCall: the face's own code per tools/call,
// judged against issue 28's bound, and one request through its short path against mcp-go's
// server, at the newest protocol.
func faceCallRows(b goBench) []row {
	const issue = "28 hops"
	own := b.median("BenchmarkCall/own-code", "cpu-ns/op")
	rows := []row{{issue, "the MCP face's own CPU per tools/call: its hooks and handler, the tools backend answering at once (BenchmarkCall/own-code)",
		"not measured", "", math.NaN(), "≤ " + us(faceMaxOwnCPUNS/1000), failed}}
	if !math.IsNaN(own) {
		rows[0].Toolmesh, rows[0].Baseline, rows[0].Ratio = fmt.Sprintf("%.1f µs", own/1000), "target "+us(faceMaxOwnCPUNS/1000), own/faceMaxOwnCPUNS
		rows[0].Verdict = judge(own <= faceMaxOwnCPUNS)
	}
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		short, viaMCPGo := b.median("BenchmarkCall/short/"+version, "cpu-ns/op"), b.median("BenchmarkCall/mcp-go/"+version, "cpu-ns/op")
		if math.IsNaN(short) || math.IsNaN(viaMCPGo) {
			continue
		}
		rows = append(rows, row{issue, "CPU per tools/call request (HTTP handler to answer, protocol " + version + "): the face's short path vs mcp-go's server (BenchmarkCall)",
			fmt.Sprintf("%.1f µs", short/1000), fmt.Sprintf("%.1f µs", viaMCPGo/1000), ratio(short, viaMCPGo), "reported", info})
	}
	return rows
}

// auditRows compares tool calls with the audit trail on and off (issue 27): the paired p50 at
// one caller and calls/s at the concurrent row are judged; the trail the run wrote must verify.
func auditRows(f figures.Audit) []row {
	const issue = "27 audit"
	var rows []row
	for _, n := range []int{1, f.Callers} {
		off, okOff := f.Find(false, n)
		on, okOn := f.Find(true, n)
		if !okOff || !okOn {
			rows = append(rows, row{issue, fmt.Sprintf("calls at %d callers", n), "not measured", "", math.NaN(), "", failed})
			continue
		}
		added := on.P50 - off.P50
		p50Target, rateTarget := "—", "—"
		p50Verdict, rateVerdict := info, info
		if n == f.Callers {
			rateTarget, rateVerdict = fmt.Sprintf("≥ %.2f×", auditMinThroughput), judge(ratio(on.CallsPerSec, off.CallsPerSec) >= auditMinThroughput)
		}
		rows = append(rows,
			row{issue, fmt.Sprintf("REST tool call p50, audit trail on vs off, %d caller(s) (adds %s)", n, signedUS(added)), us(on.P50), us(off.P50),
				ratio(on.P50, off.P50), p50Target, p50Verdict},
			row{issue, fmt.Sprintf("calls/s, audit trail on vs off, %d caller(s)", n), thousands(on.CallsPerSec, 0), thousands(off.CallsPerSec, 0),
				ratio(on.CallsPerSec, off.CallsPerSec), rateTarget, rateVerdict},
			row{issue, fmt.Sprintf("CPU per call (the whole process), audit trail on vs off, %d caller(s)", n), us(on.CPUPerCall), us(off.CPUPerCall),
				ratio(on.CPUPerCall, off.CPUPerCall), "—", info})
	}
	// Rounds seconds apart see different moments of a shared machine; the paired calls (one
	// caller alternating a call on each mesh) see the same ones, so the target is judged there.
	paired := row{issue, "REST tool call p50, audit trail on vs off, one caller alternating a call on each", "not measured", "", math.NaN(),
		"≤ off + " + us(auditMaxAddedP50US), failed}
	if f.Pairs > 0 {
		added := f.PairedOnP50 - f.PairedOffP50
		paired = row{issue, fmt.Sprintf("REST tool call p50, audit trail on vs off, one caller alternating a call on each (%s pairs; adds %s)", thousands(float64(f.Pairs), 0), signedUS(added)),
			us(f.PairedOnP50), us(f.PairedOffP50), ratio(f.PairedOnP50, f.PairedOffP50), "≤ off + " + us(auditMaxAddedP50US), judge(added <= auditMaxAddedP50US)}
	}
	rows = append([]row{paired}, rows...)
	rows = append(rows, row{issue, fmt.Sprintf("Recorder.Record, the caller's cost p50 (the writer: %s records/s)", thousands(f.WriterPerSec, 0)),
		thousands(f.RecordNs, 0) + " ns", "", math.NaN(), "reported", info})
	trail := row{issue, "the audited mesh's trail: every call recorded, audit verify passes",
		fmt.Sprintf("%s records for %s calls", thousands(float64(f.TrailRecords), 0), thousands(float64(f.Calls0), 0)), "", math.NaN(), "verifies", met}
	if !f.Verified || f.TrailRecords != f.Calls0 {
		trail.Verdict = failed
	}
	return append(rows, trail)
}
