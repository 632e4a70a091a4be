package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// benchmarks are the report's sections, in issue order. Default durations keep the whole report
// near 13 minutes on the 2-core machines, plus about 16 for the live calls (1000 cases through
// the inference service, measured at load average 10); -quick shrinks each to seconds.
var benchmarks = []benchmark{
	{name: "executor", issue: "2 executor", title: "Executor call overhead (issue 2)",
		builds: []string{"./bench/executor"}, run: runExecutor},
	{name: "retrieval", issue: "3 retrieval quality", title: "Retrieval quality (issue 3)",
		builds: []string{"./bench/retrieval"}, run: runRetrieval},
	{name: "speed", issue: "3 retrieval speed", title: "Retrieval speed (issue 3)",
		builds: []string{"./bench/retrieval"}, run: runSpeed},
	{name: "calls", issue: "4 inference calls", title: "Gorilla calls on BFCL (issue 4)",
		builds: []string{"./bench/calls"}, tests: []string{"./services/inference/gorilla"}, run: runCalls},
	{name: "live", issue: "4 inference calls (live)", title: "Gorilla calls through the inference service on a real llama-server (issues 4, 14, 18)",
		builds: []string{"./bench/calls"}, run: runLive},
	{name: "loop", issue: "5 agent loop", title: "Agent loop overhead (issue 5)",
		builds: []string{"./bench/loop", "./cmd/toolmesh"}, run: runLoop},
	{name: "tracing", issue: "6 tracing", title: "Tracing on vs off (issue 6)",
		builds: []string{"./bench/loop"}, run: runTracing},
	{name: "load", issue: "8 load", title: "Load and a rolling restart (issues 8, 17)",
		builds: []string{"./bench/load", "./cmd/toolmesh"}, run: runLoad},
	{name: "console", issue: "9 console", title: "Web console first load (issue 9)",
		tests: []string{"./cmd/toolmesh/app"}, run: runConsole},
	{name: "security", issue: "16 security", title: "The cost of closed by default: policy, request checks, mutual TLS (issue 16)",
		builds: []string{"./bench/loop", "./cmd/toolmesh"}, tests: []string{"./internal/policy", "./internal/webguard", "./internal/server"}, run: runSecurity},
	{name: "mcpface", issue: "19 MCP face", title: "MCP face against a direct held session (issue 19)",
		builds: []string{"./bench/mcpface"}, tests: []string{"./services/api/mcpface"}, run: runMCPFace},
	{name: "replicas", issue: "20 replicas", title: "Replicas sharing the load (issues 17, 20)",
		builds: []string{"./bench/replicas"}, run: runReplicas},
	{name: "chat", issue: "25 OpenAI face", title: "Chat completions vs /v1/query (issue 25)",
		builds: []string{"./bench/loop"}, run: runChat},
	{name: "audit", issue: "27 audit", title: "Audit trail on vs off (issue 27)",
		builds: []string{"./bench/audit"}, run: runAudit},
}

// pick is the quick or the full variant.
func (r *runner) pick(full, quick []string) []string {
	if r.quick {
		return quick
	}
	return full
}

func (r *runner) timeout(full time.Duration) time.Duration {
	if r.quick {
		return 3 * time.Minute
	}
	return full
}

// runFigures runs a program that writes its figures as JSON to file, and fills the section
// with its command and the rows made of the figures, or with the error.
func runFigures[F any](ctx context.Context, r *runner, s *section, sp spec, file string, rows func(F) []row) {
	var f F
	c, err := r.runJSON(ctx, sp, file, &f)
	s.Cmds = append(s.Cmds, c)
	if err != nil {
		s.Err = err.Error()
		return
	}
	s.Rows = rows(f)
}

func runExecutor(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"A tool call (`calculator` `add(2,3)`) through the executor's gRPC API (`executor-grpc`, what " +
			"toolmesh ships) against its baseline, a direct mcp-go call on a held session (`direct-held`), " +
			"and against a new session per call (`new-session`, the tutorials' way): the same in-process " +
			"MCP server, the same process and run, scenarios interleaved in a rotating order, the median of " +
			"the runs; over SSE and streamable HTTP. Targets: executor p50 ≤ direct p50 + 80 µs, calls/s at " +
			"64 callers ≥ 0.85× direct, a new session ≥ 2.5× slower than the executor at p50. Where the gap " +
			"goes (the gRPC hop: compare `executor-inproc`): bench/NOTES.md, \"Where the gap goes\" and \"Hops\".",
	}
	runFigures(ctx, r, s, spec{
		shown: "go run ./bench/executor", bin: r.program("./bench/executor"), markdown: true, timeout: r.timeout(12 * time.Minute),
		args: r.pick([]string{"-markdown"},
			[]string{"-markdown", "-calls", "100", "-duration", "300ms", "-runs", "1", "-warmup", "20", "-concurrency", "8"}),
	}, "executor.json", executorRows)
}

func runRetrieval(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"Tool-retrieval quality on the BFCL retrieval benchmark (`testdata/bfcl/retrieval`, dev " +
			"split, strict ids): every method of the program, so the embedded `default` stands beside plain " +
			"BM25 run in the same process (`bm25`) and beside the data README's published BM25 figures " +
			fmt.Sprintf("(R@1 %.3f, R@5 %.3f, MRR@10 %.3f). Target for the default: recall@5 ≥ %.2f and MRR@10 ≥ %.2f.",
				readmeBM25R1, readmeBM25R5, readmeBM25MRR10, targetR5, targetMRR10),
	}
	runFigures(ctx, r, s, spec{
		shown: "go run ./bench/retrieval", bin: r.program("./bench/retrieval"), markdown: true, timeout: r.timeout(5 * time.Minute),
	}, "retrieval.json", retrievalRows)
}

func runSpeed(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"The memory store's full search path (encode the request and its sentences, one multi-query " +
			"store pass, merge) on synthetic pools built from the BFCL tools, index build time and memory " +
			"per tool. No other program does this job, so the targets are the baseline: search p99 ≤ 1 ms " +
			"at 10,000 tools and ≤ 10 ms at 100,000; 10,000 tools indexed in ≤ 2 s. `store-only` is one " +
			"pre-encoded query against the store, the floor of the full path.",
	}
	runFigures(ctx, r, s, spec{
		shown: "go run ./bench/retrieval", bin: r.program("./bench/retrieval"), markdown: true, timeout: r.timeout(8 * time.Minute),
		args: r.pick([]string{"-speed"}, []string{"-speed", "-sizes", "1000,10000", "-searches", "200"}),
	}, "speed.json", speedRows)
}

func runCalls(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"Every BFCL function-calling case (`testdata/bfcl/calls/calls-dev.jsonl`) through the " +
			"Gorilla layer: prompt, ground truth rendered and parsed back (parse), arguments validated " +
			"against the converted schema (validate), the case's grammar accepts the calls (grammar) and " +
			"refuses a function not offered (reject). Target: every case on each. (The next section decodes " +
			"the cases on a real llama-server.) Then the Gorilla work of one model step for 8 tools (no target), cold (the unsized " +
			"catalog for the prompt and the one sized to n_predict 1024 for the grammar both built, as on a tool " +
			"set's first step) and cached (both from the service's catalog cache, as on later steps).",
	}
	var f figures.Calls
	c, err := r.runJSON(ctx, spec{
		shown: "go run ./bench/calls", bin: r.program("./bench/calls"), timeout: r.timeout(8 * time.Minute),
		args: r.pick(nil, []string{"-limit", "100"}),
	}, "calls.json", &f)
	s.Cmds = append(s.Cmds, c)
	if err != nil {
		s.Err = err.Error()
		return
	}
	bench := r.pick([]string{"-test.benchtime", "1s"}, []string{"-test.benchtime", "20x"})
	shownBench := r.pick([]string{"-benchtime", "1s"}, []string{"-benchtime", "20x"})
	step := spec{
		shown: "go test", bin: r.testBinary("./services/inference/gorilla"), dir: "services/inference/gorilla", timeout: r.timeout(5 * time.Minute),
		args:     append([]string{"-test.run", "^$", "-test.bench", "^BenchmarkStep$", "-test.benchmem", "-test.count", "1"}, bench...),
		shownArg: append([]string{"-run", "^$", "-bench", "^BenchmarkStep$", "-benchmem", "-count", "1"}, append(shownBench, "./services/inference/gorilla")...),
	}
	sc := r.exec(ctx, step)
	s.Cmds = append(s.Cmds, sc)
	var sb *stepBench
	if sc.Err != "" {
		s.Err = "BenchmarkStep: " + sc.Err
	} else if b, err := parseStep(sc.Output); err != nil {
		s.Err = "BenchmarkStep: " + err.Error()
	} else {
		sb = &b
	}
	s.Rows = callsRows(f, sb)
}

// liveSkip is why the live section cannot run without a llama-server.
const liveSkip = "no llama-server here: `TOOLMESH_LLAMA_SERVER` is not set and `.cache/llama/llama-server` " +
	"does not exist. `make bench` installs it first with `scripts/backends` (scripts/llamaserver: Debian's " +
	"package, downloaded once into .cache); that failed or was not run."

func runLive(ctx context.Context, r *runner, s *section) {
	sample := "every dev case"
	if r.quick {
		sample = fmt.Sprintf("%d dev cases spread over the file", quickLiveCases)
	}
	s.Intro = []string{
		"The BFCL cases sent through the inference service (run in the bench's process, as `serve " +
			"--target=inference` runs by default) as the first step of a user's question: each case's " +
			"functions ranked for its question by the retriever's embedded index, then `Generate` with no " +
			"max_tokens, so the service's own prompt budget sets n_predict (at most 1024, at least half " +
			"of it before a tool goes) and, where the prompt does not fit the context, drops the " +
			"lowest-ranked tools and says which. Decoded by a real llama-server (`scripts/llamaserver`, " +
			"Debian's build) with a 4096-token context, Gorilla OpenFunctions v2's, on the tiny " +
			"random-weight model package `llamatest` writes (about 0.5 MB; its text is noise; its logits " +
			"biased towards `<` so it starts calls where a plain answer is also allowed): " + sample + ". " +
			"The tiny model's vocabulary is single characters and bytes, so a prompt takes several times " +
			"more tokens there than with Gorilla's tokenizer: more cases need tools dropped here than " +
			"would with Gorilla, and these counts are not Gorilla's. Each output counts as one kind: " +
			"whole calls (they parse, validate against the case's schemas and name exactly the ground " +
			"truth's functions), calls that parse and validate but name other functions, a plain answer, " +
			"calls that break a schema, output that does not parse, a refused prompt, a failed request. " +
			"Which functions a random-weight model names is chance, so that figure has no target. The " +
			"bench also counts each case's prompt with every tool (`/tokenize`): where it is longer than " +
			"the context, llama-server would refuse it with 400 `exceed_context_size_error`, as it did " +
			"before the budget. (`-raw` sends those whole prompts instead, the check this section ran " +
			"before, on a 16384-token context.)",
	}
	if r.llama == "" {
		if testbackend.Llama.IsRequired() {
			s.Err = liveSkip + " " + testbackend.Llama.Required + "=1: a missing llama-server fails the report."
			return
		}
		s.Skip = liveSkip
		return
	}
	args := []string{"-live-only", "-llama-server", r.llama}
	if r.quick {
		args = append(args, "-live-cases", strconv.Itoa(quickLiveCases))
	}
	var f figures.Calls
	c, err := r.runJSON(ctx, spec{
		shown: "go run ./bench/calls", bin: r.program("./bench/calls"), timeout: r.timeout(25 * time.Minute), args: args,
	}, "live.json", &f)
	s.Cmds = append(s.Cmds, c)
	if err != nil {
		s.Err = err.Error()
		return
	}
	s.Intro = append(s.Intro, "Decoded by "+f.Live.Server+".")
	s.Rows = liveRows(f.Live)
}

// quickLiveCases is how many cases -quick decodes live (a few seconds).
const quickLiveCases = 20

func runLoop(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"The agent loop's own overhead: \"What is 2 plus 3?\" against the llama-server double replying at " +
			"once (2 iterations and a compose request per query, every answer checked), sent by 1 and 32 " +
			"clients over REST and gRPC, with every target in one process (`inproc`) and as one process per " +
			"target (`micro`, the `toolmesh` binary built once with the rest). Overhead per iteration = " +
			"(query time − the model's time, measured at a proxy in front of the double) ÷ 2. The issue " +
			"gives no baseline program; its targets are the baseline: p50 ≤ 1 ms per iteration in one " +
			"process, ≤ 1.5 ms in microservices mode, at 1 client. Issue 28's rows: in one process the " +
			"targets call each other directly (no gRPC between them, as `toolmesh up`); what one query " +
			"allocates there is held to a committed budget, commit e45e502's figures " +
			"(bench/report/rows.go, loopAllocBudgetKB), and its CPU per query to at most 70 % of " +
			"microservices'. Where an iteration's time goes (profiles of both modes): bench/NOTES.md, " +
			"\"Agent loop\" and \"Hops\".",
	}
	common := []string{"-markdown", "-binary", r.program("./cmd/toolmesh")}
	runFigures(ctx, r, s, spec{
		shown: "go run ./bench/loop", bin: r.program("./bench/loop"), markdown: true, timeout: r.timeout(12 * time.Minute),
		args: append(r.pick([]string{"-via", "rest,grpc", "-duration", "8s"},
			[]string{"-via", "rest,grpc", "-clients", "1", "-duration", "1s", "-warmup", "200ms"}), common...),
	}, "loop.json", loopRows)
}

func runChat(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"The agent-loop benchmark with every target in one process, asked \"What is 2 plus 3?\" the two " +
			"ways an app can: `POST /v1/query` (`rest`) and `POST /v1/chat/completions` in OpenAI's wire " +
			"format (`chat`: one user message, the model `GET /v1/models` lists, read once at the start), " +
			"both answered by the same loop and the same llama-server double, one after the other in the " +
			"same run, at 1 and 32 clients. Every answer is checked: the composed text, and for `chat` " +
			"`finish_reason` stop with the `toolmesh` extension's one `calculator.add` call returning 5, " +
			"stop reason answered and 2 iterations. Overhead per request = query time − the model's time " +
			"(measured at a proxy in front of the double), p50 at 1 client; both APIs take 2 iterations. " +
			fmt.Sprintf("Target: chat's overhead per request ≤ %.2f× rest's (at most 5 %% more).", chatMaxOverhead),
	}
	runFigures(ctx, r, s, spec{
		shown: "go run ./bench/loop", bin: r.program("./bench/loop"), markdown: true, timeout: r.timeout(5 * time.Minute),
		args: append([]string{"-mode", "inproc", "-via", "rest,chat", "-clients", "1,32"},
			r.pick([]string{"-duration", "8s", "-markdown"}, []string{"-duration", "1s", "-warmup", "200ms", "-markdown"})...),
	}, "chat.json", chatRows)
}

func runTracing(ctx context.Context, r *runner, s *section) {
	col, err := r.collector()
	if err != nil {
		s.Err = "starting the span collector: " + err.Error()
		return
	}
	defer col.stop()
	pairs := 2
	args := []string{"-mode", "inproc", "-clients", "1", "-via", "rest", "-duration", "8s", "-markdown"}
	if r.quick {
		pairs = 1
		args = []string{"-mode", "inproc", "-clients", "1", "-via", "rest", "-duration", "1s", "-warmup", "200ms", "-markdown"}
	}
	s.Intro = []string{
		"The agent-loop benchmark (one process, 1 client, REST) with tracing off (no exporter: spans " +
			"unsampled, as toolmesh runs without an OTLP endpoint) and on (`OTEL_TRACES_SAMPLER=always_on`, " +
			"every span exported over OTLP/gRPC), alternated " + strings.Repeat("off, on, ", pairs-1) + "off, on in this run. " +
			"Target: at most 15 % overhead. Spans went to " + col.what + ".",
	}
	if !strings.HasPrefix(col.what, "Jaeger") {
		s.Intro = append(s.Intro, "Issue 6 measured against a local Jaeger, whose own ingestion shares the "+
			"2 cores; none is built here (`scripts/jaeger` builds one, about 5 minutes once, then the report "+
			"uses it), so this figure is toolmesh's own cost of recording and exporting spans, without "+
			"Jaeger's.")
	}
	on := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + col.endpoint, "OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_TRACES_SAMPLER=always_on"}
	var runs []tracingRun
	for i := range 2 * pairs {
		tracing := i%2 == 1
		sp := spec{shown: "go run ./bench/loop", bin: r.program("./bench/loop"), markdown: true, timeout: r.timeout(5 * time.Minute),
			args: append([]string(nil), args...)}
		if tracing {
			sp.env = on
		}
		var f figures.Loop
		c, err := r.runJSON(ctx, sp, fmt.Sprintf("tracing-%d.json", i), &f)
		s.Cmds = append(s.Cmds, c)
		if err != nil {
			s.Err = err.Error()
			return
		}
		if row, ok := f.Find("inproc", "rest", 1); ok {
			runs = append(runs, tracingRun{On: tracing, Row: row})
		}
	}
	if st := col.stats(); st != "" {
		s.Intro = append(s.Intro, "With tracing on, "+st+".")
	}
	s.Rows = tracingRows(runs, col.name())
}

// collector starts Jaeger when one is built, else the in-process sink.
func (r *runner) collector() (*collector, error) {
	if bin := jaegerBinary(r.root); bin != "" {
		c, err := startJaeger(bin, r.tmp)
		if err == nil {
			c.what = strings.ReplaceAll(c.what, r.root+string(filepath.Separator), "")
		}
		return c, err
	}
	return startSink()
}

// name is the collector in a few words, for the summary.
func (c *collector) name() string {
	if strings.HasPrefix(c.what, "Jaeger") {
		return "a local Jaeger"
	}
	return "an in-process OTLP sink"
}

func runLoad(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"Open-loop traffic at a fixed rate against every target in one process with the demo MCP " +
			"servers and the llama-server double: tool searches, direct calls, tool calls and questions in " +
			"equal parts, every answer checked. The baseline is the same process before the load: resident " +
			"memory, heap and goroutines after a warm-up, and again after the load once idle connections " +
			"have timed out (`-settle`). Targets: no errors; memory flat (read here as at most 10 % more " +
			"resident memory after than before).",
		"Then a rolling restart (issue 17), on a second mesh: the executor as its own `toolmesh serve " +
			"--target=executor` process (the binary built with the rest), everything else in the bench's " +
			"process pointed at it. The same mix runs at the same rate, with tool calls that take 250 ms " +
			"beside it (the bench's own `slow` MCP server, a fifth of the rate) so that calls are in flight " +
			"whenever a stop begins; the executor gets SIGTERM (it drains and exits) and is started again " +
			"at the same address, twice. Each request counts by when it was sent: before a stop began, " +
			"while the executor was away (from the stop until a tool call is served through the api " +
			"again), or after the last restart. Targets: no request sent before a stop fails; those sent " +
			"while it is away fail fast (read as within 1 s) with 503; none fails after the restart.",
		"Then legacy SSE (issue 26), on a third mesh with two API tokens (8 requests in flight each, " +
			"the default) and the bench's `slow` MCP server (250 ms a call; the executor runs 16 calls at " +
			"once per server): one token's calls of the slow tool through REST are timed at 8 a second, " +
			"alone and then while the other token keeps 48 calls of the same tool posted to one legacy SSE " +
			"session (`/sse/message`, answered 202 with the result on the stream; a refused call is posted " +
			"again after 100 ms). Target: the first token's p99 beside the flood within its own call time " +
			"(its p50 alone) plus 100 ms.",
	}
	runFigures(ctx, r, s, spec{
		shown: "go run ./bench/load", bin: r.program("./bench/load"), timeout: r.timeout(9 * time.Minute),
		args: append(r.pick([]string{"-duration", "60s", "-rate", "200", "-settle", "95s", "-restarts", "2", "-restart-duration", "20s",
			"-sse-calls", "48", "-sse-duration", "10s"},
			[]string{"-duration", "2s", "-rate", "20", "-warmup", "200ms", "-restarts", "2", "-restart-duration", "4s",
				"-sse-calls", "48", "-sse-duration", "2s"}),
			"-binary", r.program("./cmd/toolmesh")),
	}, "load.json", loadRows)
}

func runReplicas(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"Two executors, two retrievers, one inference and two apis, each its own `toolmesh serve` " +
			"process, the callers given every replica's address (`ipv4:A,B`, standing in for a headless " +
			"Service's DNS name). Closed-loop clients send tool calls, direct queries and searches through " +
			"both apis; then executor 1 gets SIGTERM mid-load (it drains and exits) and is started again. " +
			"Calls per executor are read from each executor's /metrics. Targets: both executors take a " +
			"share; no request fails that was sent before the drain began, and none after it beyond 1 s.",
	}
	runFigures(ctx, r, s, spec{
		shown: "go run ./bench/replicas", bin: r.program("./bench/replicas"), timeout: r.timeout(4 * time.Minute),
		args: r.pick([]string{"-phase", "10s", "-workers", "8"}, []string{"-phase", "2s", "-workers", "4"}),
	}, "replicas.json", replicasRows)
}

func runMCPFace(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"A tool call through the api's MCP face (`/mcp`: mcp-go client → api → executor → held session → " +
			"MCP server) against the same call made directly on the MCP server with a held mcp-go session, at 1 " +
			"and 64 callers sharing one session, alternating rounds, on two meshes: `up` as it runs by default " +
			"(the api calls the executor in the process) and one whose services call each other over gRPC on " +
			"loopback (their addresses given, as `serve` runs them apart). Then `tools/list` of a 10,000-tool " +
			"catalog through `/mcp` (`up`), every page (500 a page), against one unpaginated `tools/list` on the " +
			"server. Everything on loopback in one process (mcp-go servers over streamable HTTP, both meshes), so " +
			"the face's two extra MCP ends and the gRPC hop share the 2 cores with the callers and the server: " +
			"CPU per call is the steadier figure. Targets at 64 callers: p50 ≤ direct + 150 µs, calls/s ≥ 0.7× " +
			"direct (issue 19), CPU per call ≤ 1.5× direct (issue 28). Then the face's own work for one " +
			"`tools/call` (a Go benchmark, medians of 3 runs): its hooks and handler alone, and one request through " +
			"its short path against mcp-go's streamable HTTP server, both against a tools backend that answers at " +
			"once. Target: the face's own work ≤ 20 µs of CPU per call (issue 28). Where a call's time goes " +
			"(CPU profiles of the whole path, item by item): bench/NOTES.md, \"Hops\" (issue 28).",
	}
	runFigures(ctx, r, s, spec{
		shown: "go run ./bench/mcpface", bin: r.program("./bench/mcpface"), markdown: true, timeout: r.timeout(8 * time.Minute),
		args: r.pick(nil, []string{"-callers", "8", "-duration", "300ms", "-rounds", "1", "-tools", "1000", "-list-runs", "2"}),
	}, "mcpface.json", mcpfaceRows)
	if s.Err != "" {
		return
	}
	args, shown := []string{"-test.benchtime", "1s", "-test.count", "3"}, []string{"-benchtime", "1s", "-count", "3"}
	if r.quick {
		args, shown = []string{"-test.benchtime", "20x", "-test.count", "1"}, []string{"-benchtime", "20x", "-count", "1"}
	}
	const pkg = "./services/api/mcpface"
	c := r.exec(ctx, spec{
		shown: "go test", bin: r.testBinary(pkg), dir: strings.TrimPrefix(pkg, "./"), timeout: r.timeout(5 * time.Minute),
		args:     append([]string{"-test.run", "^$", "-test.bench", "^BenchmarkCall$", "-test.benchmem"}, args...),
		shownArg: append(append([]string{"-run", "^$", "-bench", "^BenchmarkCall$", "-benchmem"}, shown...), pkg),
	})
	s.Cmds = append(s.Cmds, c)
	if c.Err != "" {
		s.Err = "BenchmarkCall: " + c.Err
		return
	}
	s.Rows = append(s.Rows, faceCallRows(parseGoBench(c.Output))...)
}

func runAudit(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"A REST tool call (`POST /v1/tools/calculator/add:call`: gateway → gRPC → executor → the demo " +
			"calculator over SSE) on two meshes in one process, one without an audit trail and one writing it " +
			"to a file (`--audit.file`, arguments as digests, fsync every second), at 1 and 16 callers in " +
			"alternating rounds (which goes first alternates too), then one caller alternating a call on each " +
			"mesh, so that both see the same moments of the machine (the p50 the target is judged by); then " +
			"`Recorder.Record` alone, from its " +
			"caller's side, and its writer's pace when one caller records as fast as it can (records past " +
			"its queue are dropped and declared, by design); and the audited mesh's trail, verified and " +
			"counted against the calls made on it. Targets: p50 ≤ off + 10 µs (paired), calls/s ≥ 0.95× " +
			"off at 16 callers.",
	}
	runFigures(ctx, r, s, spec{
		shown: "go run ./bench/audit", bin: r.program("./bench/audit"), markdown: true, timeout: r.timeout(6 * time.Minute),
		args: r.pick([]string{"-markdown"}, []string{"-markdown", "-callers", "4", "-duration", "300ms", "-rounds", "1"}),
	}, "audit.json", auditRows)
}

func runConsole(ctx context.Context, r *runner, s *section) {
	s.Intro = []string{
		"The web console's browser test in headless Chromium against every target in one process: five " +
			"first loads of the servers page, each in a fresh browser context, measured by the browser's " +
			"Performance API (bytes transferred over the navigation and every resource; the time until the " +
			"servers table is drawn). The figures are read from the test's log lines (cmd/toolmesh/app is not " +
			"a bench program, so it has no -json). Targets: first load under 200 KB, servers on screen " +
			"under 300 ms.",
	}
	if r.chromium == "" {
		s.Skip = "no headless Chromium here: `TOOLMESH_CHROMIUM` is not set and `.cache/chromium/chromium` does " +
			"not exist. `make bench` installs it first with `scripts/backends` (scripts/chromium: Debian's package, " +
			"downloaded once into .cache); that failed or was not run."
		return
	}
	c := r.exec(ctx, spec{
		shown: "go test", bin: r.testBinary("./cmd/toolmesh/app"), dir: "cmd/toolmesh/app", timeout: r.timeout(5 * time.Minute),
		env:      []string{"TOOLMESH_CHROMIUM=" + r.chromium},
		args:     []string{"-test.run", "^TestConsole$/^servers", "-test.v", "-test.count", "1"},
		shownArg: []string{"-count=1", "-run", "^TestConsole$/^servers", "-v", "./cmd/toolmesh/app"},
	})
	s.Cmds = append(s.Cmds, c)
	figs, skip, err := parseConsole(c.Output)
	switch {
	case c.Err != "":
		s.Err = "the browser test failed: " + c.Err
	case err != nil:
		s.Err = err.Error()
	case skip != "":
		s.Skip = "the browser test skipped: " + skip
	}
	s.Rows = consoleRows(figs)
}
