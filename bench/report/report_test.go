package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Canned figures: the executor's from NOTES.md ("Latest", 2026-12-02 15:11 UTC), the others
// made up around their targets.
var (
	cannedExecutor = figures.Executor{Runs: 3, Calls: 2000, Concurrency: 64, Scenarios: []figures.ExecutorScenario{
		{Name: "grpc-health", P50: 23, CallsPerSec: 56058},
		{Transport: "sse", Name: "direct-held", P50: 132, CallsPerSec: 11326, CPUPerCall: 172, Calls: 175410},
		{Transport: "sse", Name: "executor-grpc", P50: 234, CallsPerSec: 8698, CPUPerCall: 222, Calls: 136533},
		{Transport: "sse", Name: "new-session", P50: 359, CallsPerSec: 3274, CPUPerCall: 594, Calls: 55102},
		{Transport: "streamable-http", Name: "direct-held", P50: 118, CallsPerSec: 10265, CPUPerCall: 189, Calls: 160791},
		{Transport: "streamable-http", Name: "executor-grpc", P50: 156, CallsPerSec: 7973, CPUPerCall: 242, Calls: 125062, Errors: 2},
		{Transport: "streamable-http", Name: "new-session", P50: 420, CallsPerSec: 4232, CPUPerCall: 459, Calls: 70561},
	}}
	cannedRetrieval = figures.Retrieval{Queries: "queries-dev.jsonl", N: 1000, Tools: 1951, Methods: []figures.RetrievalMethod{
		{Name: "bm25", R1: .655, R5: .887, MRR10: .821},
		{Name: "default", R1: .674, R5: .919, MRR10: .903},
	}}
	cannedSpeed = figures.Speed{Method: "default", Sizes: []figures.SpeedSize{
		{Tools: 1000, BuildSeconds: 0.05, SearchP99: 616},
		{Tools: 10000, BuildSeconds: 0.70, SearchP99: 1021},
		{Tools: 100000, BuildSeconds: 7.74, SearchP99: 4268},
	}}
	cannedCalls = figures.Calls{Cases: 1000, Parse: figures.Count{OK: 1000, N: 1000}, Validate: figures.Count{OK: 994, N: 1000},
		Grammar: figures.Count{OK: 993, N: 1000}, Reject: figures.Count{OK: 1000, N: 1000}}
	// The live run of 2026-12-03 (all 1000 dev cases, calls-only grammars, the tiny model).
	cannedLive    = figures.Live{CallsOnly: true, NPredict: 256, Cases: 1000, Whole: 675, OtherNames: 324, Invalid: 1}
	cannedService = figures.Live{Path: "service", CtxSize: 4096, NPredict: 1024, Cases: 1000, Whole: 500, OtherNames: 300, Plain: 199, Invalid: 1,
		WholeOverCtx: 80, LongestWhole: 9120, FitWhole: 900, Dropped: 100, ToolsDropped: 150, DroppedGroundTruth: 40}
	cannedRestart = &figures.LoadRestart{Rate: 200, DurationSeconds: 20, Restarts: 2, Before: 3000, InFlight: 12, Gap: 200, GapFailed: 150, Gap503: 150,
		GapFailP50Ms: 2.4, GapFailMaxMs: 17.1, After: 1500, AfterFailed: 1,
		Cycles: []figures.LoadRestartCycle{{DrainExitMs: 233, StartToServedMs: 330.4, StopToServedMs: 568.2}, {DrainExitMs: 200, StartToServedMs: 292, StopToServedMs: 496}}}
	cannedStep = stepBench{Cold: benchResult{NsPerOp: 1712345, BytesPerOp: 1309928, AllocsPerOp: 15053},
		Cached: benchResult{NsPerOp: 6474, BytesPerOp: 13168, AllocsPerOp: 22}}
	cannedLoop = figures.Loop{DurationSeconds: 8, Rows: []figures.LoopRow{
		{Mode: "inproc", Via: "rest", Clients: 1, Queries: 3936, IterP50: 835, Target: 1000, AllocKB: 384.2},
		{Mode: "inproc", Via: "rest", Clients: 32, Queries: 8160, QPS: 814.6, IterP50: 16181, Target: 1000},
		{Mode: "micro", Via: "grpc", Clients: 1, Queries: 1952, IterP50: 1519, Target: 1500, CPUPerQuery: 5750},
		{Mode: "inproc", Via: "grpc", Clients: 1, Queries: 4000, IterP50: 600, Target: 1000, CPUPerQuery: 2300, AllocKB: 331},
	}}
	// A chat completion 3 % over /v1/query at 1 client: within issue 25's 5 %.
	cannedChat = figures.Loop{DurationSeconds: 8, Rows: []figures.LoopRow{
		{Mode: "inproc", Via: "rest", Clients: 1, Queries: 2000, IterP50: 1300, CPUPerQuery: 3900, AllocKB: 734.4},
		{Mode: "inproc", Via: "rest", Clients: 32, Queries: 4000, QPS: 500.4},
		{Mode: "inproc", Via: "chat", Clients: 1, Queries: 2100, IterP50: 1339, CPUPerQuery: 3700, AllocKB: 687},
		{Mode: "inproc", Via: "chat", Clients: 32, Queries: 4200, QPS: 525.2},
	}}
	cannedTracing = []tracingRun{
		{On: false, Row: figures.LoopRow{P50: 2.17, QPS: 423.2, CPUPerQuery: 2598}},
		{On: true, Row: figures.LoopRow{P50: 2.52, QPS: 352.0, CPUPerQuery: 3187}},
		{On: false, Row: figures.LoopRow{P50: 2.20, QPS: 411.4, CPUPerQuery: 2664}},
		{On: true, Row: figures.LoopRow{P50: 2.44, QPS: 363.4, CPUPerQuery: 3107}},
	}
	// The legacy SSE phase: the other token's calls of a 250 ms tool, alone and beside 48 calls
	// kept posted to one SSE session, within 100 ms of their own time.
	cannedSSE = &figures.LoadSSE{Calls: 48, CallMs: 250, Rate: 8, DurationSeconds: 10,
		Alone:  figures.LoadRow{Kind: "alone", Sent: 80, OK: 80, P50: 252.1, P99: 256.3},
		Beside: figures.LoadRow{Kind: "beside the flood", Sent: 80, OK: 80, P50: 252.7, P99: 301.6},
		Posted: 5000, Accepted: 280, Refused: 4720}
	cannedLoad = figures.Load{Rate: 200, DurationSeconds: 60, SettleSeconds: 95,
		Kinds:     []figures.LoadRow{{Kind: "search", Sent: 3000, OK: 3000}, {Kind: "all", Sent: 12000, OK: 12000, P50: 2.15, P99: 1626.68, P999: 2303.19}},
		RSSBefore: 479 * (1 << 20) / 10, RSSAfter: 467 * (1 << 20) / 10, HeapBefore: 135 * (1 << 20) / 10, HeapAfter: 105 * (1 << 20) / 10,
		GoroutinesBefore: 242, GoroutinesAfter: 98}
)

// find returns the row whose measure contains substr.
// TestLoadPhasesAlone: a run of a phase alone (-duration 0) has no load mix, and reads as that
// phase's rows, not as a failed load.
func TestLoadPhasesAlone(t *testing.T) {
	for name, f := range map[string]figures.Load{"restart": {Restart: cannedRestart}, "sse": {SSE: cannedSSE}} {
		rows := loadRows(f)
		if len(rows) == 0 {
			t.Errorf("%s: no rows", name)
		}
		for _, r := range rows {
			if r.Verdict == failed {
				t.Errorf("%s: row %+v failed", name, r)
			}
		}
	}
	if rows := loadRows(figures.Load{}); len(rows) != 1 || rows[0].Verdict != failed {
		t.Errorf("no phase at all: %+v, want one failed row", rows)
	}
}

// sseWith is a copy of cannedSSE changed by edit.
func sseWith(edit func(*figures.LoadSSE)) *figures.LoadSSE {
	f := *cannedSSE
	edit(&f)
	return &f
}

func find(t *testing.T, rows []row, substr string) row {
	t.Helper()
	for _, r := range rows {
		if strings.Contains(r.Measure, substr) {
			return r
		}
	}
	t.Fatalf("no row with %q in %d rows", substr, len(rows))
	return row{}
}

func TestSummaryRows(t *testing.T) {
	tests := []struct {
		name     string
		rows     []row
		measure  string
		toolmesh string
		baseline string
		ratio    string
		target   string
		verdict  verdict
	}{
		{"executor p50 over direct, missed by 22 µs", executorRows(cannedExecutor), "sse: call p50, 1 caller (executor gRPC",
			"234 µs", "132 µs", "1.77×", "≤ baseline + 80 µs (here +102 µs)", notMet},
		{"executor p50 over direct, met", executorRows(cannedExecutor), "streamable-http: call p50, 1 caller (executor gRPC",
			"156 µs", "118 µs", "1.32×", "≤ baseline + 80 µs (here +38 µs)", met},
		{"executor calls/s ratio below 0.85", executorRows(cannedExecutor), "sse: calls/s, @64",
			"8,698", "11,326", "0.77×", "ratio ≥ 0.85", notMet},
		{"new session 1.53× slower: not 2.5×", executorRows(cannedExecutor), "sse: call p50, 1 caller (executor vs a new session",
			"234 µs", "359 µs", "0.65×", "ratio ≤ 0.40 (new session ≥ 2.5× slower)", notMet},
		{"new session 2.69× slower: met", executorRows(cannedExecutor), "streamable-http: call p50, 1 caller (executor vs a new session",
			"156 µs", "420 µs", "0.37×", "ratio ≤ 0.40 (new session ≥ 2.5× slower)", met},
		{"executor errors fail the target", executorRows(cannedExecutor), "streamable-http: failed calls",
			"2 of 125,064", "0 of 160,791", "—", "0", notMet},
		{"CPU per call is reported, not judged", executorRows(cannedExecutor), "sse: CPU per call",
			"222 µs", "172 µs", "1.29×", "—", info},
		{"recall@5 vs this run's bm25", retrievalRows(cannedRetrieval), "recall@5, default vs bm25 of this run",
			"0.919", "0.887 (bm25, this run)", "1.04×", "≥ 0.95", notMet},
		{"recall@5 vs the README", retrievalRows(cannedRetrieval), "recall@5, default vs the data README",
			"0.919", "0.882 (README)", "1.04×", "≥ 0.95", notMet},
		{"MRR@10 at the target", retrievalRows(cannedRetrieval), "MRR@10, default vs the data README",
			"0.903", "0.813 (README)", "1.11×", "≥ 0.90", met},
		{"10k p99 just over 1 ms", speedRows(cannedSpeed), "search p99 at 10,000",
			"1,021 µs", "target 1,000 µs", "1.02×", "≤ 1,000 µs", notMet},
		{"100k p99 under 10 ms", speedRows(cannedSpeed), "search p99 at 100,000",
			"4,268 µs", "target 10,000 µs", "0.43×", "≤ 10,000 µs", met},
		{"build 10k", speedRows(cannedSpeed), "index build",
			"0.70 s", "target 2 s", "0.35×", "≤ 2 s", met},
		{"calls: parse all", callsRows(cannedCalls, nil), "passing parse", "1000/1000", "—", "—", "1000/1000 (all)", met},
		{"calls: validate not all", callsRows(cannedCalls, nil), "passing validate", "994/1000", "—", "—", "1000/1000 (all)", notMet},
		{"live: calls parse and validate, not all", liveRows(cannedLive), "outputs whose calls parse and validate",
			"999/1000", "—", "—", "1000/1000 (all)", notMet},
		{"live: whole calls are reported, not judged", liveRows(cannedLive), "whole calls",
			"675/1000", "—", "—", "— (a random-weight model names functions by chance)", info},
		{"live: no plain answer under calls-only grammars", liveRows(cannedLive), "plain answers (calls-only",
			"0/1000", "—", "—", "0", met},
		{"live: a plain answer under a plain-answer grammar is no pass", liveRows(figures.Live{Cases: 10, Whole: 2, Plain: 8}), "plain answers (not passes)",
			"8/10", "—", "—", "—", info},
		{"live: plain answers do not count as calls", liveRows(figures.Live{Cases: 10, Whole: 2, Plain: 8}), "parse and validate",
			"2/10", "—", "—", "10/10 (all)", notMet},
		{"live: cut off", liveRows(figures.Live{Cases: 10, Whole: 10, Cut: 1, CallsOnly: true}), "cut off at n_predict",
			"1/10", "—", "—", "0", notMet},
		{"step bench, cold", callsRows(cannedCalls, &cannedStep), "BenchmarkStep/cold",
			"1,712 µs, 1,279 KB, 15,053 allocs", "—", "—", "—", info},
		{"step bench, cached", callsRows(cannedCalls, &cannedStep), "BenchmarkStep/cached",
			"6 µs, 13 KB, 22 allocs", "—", "—", "—", info},
		{"loop inproc under 1 ms", loopRows(cannedLoop), "one process, rest, 1 client",
			"835 µs", "target 1,000 µs", "0.83×", "≤ 1,000 µs", met},
		{"loop micro over 1.5 ms by 19 µs", loopRows(cannedLoop), "microservices, grpc, 1 client",
			"1,519 µs", "target 1,500 µs", "1.01×", "≤ 1,500 µs", notMet},
		{"loop 32 clients: info", loopRows(cannedLoop), "queries/s, inproc, rest, 32 clients", "815", "—", "—", "—", info},
		{"loop errors", loopRows(cannedLoop), "failed queries", "0 of 18,048", "—", "—", "0", met},
		{"loop allocations within e45e502's", loopRows(cannedLoop), "allocated per query, one process, rest",
			"384 KB", "budget 481 KB", "0.80×", "≤ 481 KB", met},
		{"loop allocations over e45e502's", loopRows(loopWith(func(f *figures.Loop) { f.Rows[0].AllocKB = 723 })), "allocated per query, one process, rest",
			"723 KB", "budget 481 KB", "1.50×", "≤ 481 KB", notMet},
		{"one process 60 % less CPU than microservices", loopRows(cannedLoop), "CPU per query, one process vs microservices, grpc",
			"2,300 µs", "5,750 µs", "0.40×", "ratio ≤ 0.70", met},
		{"one process 20 % less CPU: not met", loopRows(loopWith(func(f *figures.Loop) { f.Rows[3].CPUPerQuery = 4600 })), "CPU per query, one process vs microservices, grpc",
			"4,600 µs", "5,750 µs", "0.80×", "ratio ≤ 0.70", notMet},
		{"chat overhead 3 % over /v1/query: met", chatRows(cannedChat), "overhead per request p50",
			"2,678 µs", "2,600 µs", "1.03×", "ratio ≤ 1.05", met},
		{"chat overhead 8 % over: not met", chatRows(chatWith(func(f *figures.Loop) { f.Rows[2].IterP50 = 1404 })), "overhead per request p50",
			"2,808 µs", "2,600 µs", "1.08×", "ratio ≤ 1.05", notMet},
		{"chat overhead within target but a chat query failed: not met", chatRows(chatWith(func(f *figures.Loop) { f.Rows[2].Errors = 1 })),
			"overhead per request p50", "2,678 µs", "2,600 µs", "1.03×", "ratio ≤ 1.05", notMet},
		{"chat CPU per query: info", chatRows(cannedChat), "CPU per query", "3,700 µs", "3,900 µs", "0.95×", "—", info},
		{"chat allocations per query: info", chatRows(cannedChat), "allocated per query", "687 KB", "734 KB", "0.94×", "—", info},
		{"chat q/s at 32 clients: info", chatRows(cannedChat), "queries/s, one process, 32 clients", "525", "500", "1.05×", "—", info},
		{"chat errors", chatRows(chatWith(func(f *figures.Loop) { f.Rows[3].Errors = 2 })), "failed queries", "2 of 12,302", "—", "—", "0", notMet},
		{"tracing p50: +14 %", tracingRows(cannedTracing, "a local Jaeger"), "query p50",
			"2.48 ms", "2.19 ms", "1.14×", "ratio ≤ 1.15", met},
		{"tracing CPU: +20 %", tracingRows(cannedTracing, "a local Jaeger"), "CPU per query",
			"3,147 µs", "2,631 µs", "1.20×", "ratio ≤ 1.15", notMet},
		{"tracing q/s: −14 %", tracingRows(cannedTracing, "a local Jaeger"), "queries/s",
			"357.7", "417.3", "0.86×", "ratio ≥ 0.87 (≤ 15% more time per query)", notMet},
		{"load errors", loadRows(cannedLoad), "failed requests, 200 req/s for 60 s", "0 of 12,000", "—", "—", "0", met},
		{"load RSS flat", loadRows(cannedLoad), "resident memory", "46.7 MiB", "47.9 MiB", "0.97×", "flat: ratio ≤ 1.10", met},
		{"live service: an invalid call is no answer, a plain answer not counted", liveRows(cannedService), "cases answered with calls that parse and validate",
			"800/1000", "—", "—", "every call output: 801/1000 (the 801 cases not answered plainly, refused or failed)", notMet},
		{"live service: plain answers apart, every call valid", liveRows(figures.Live{Path: "service", Cases: 10, Whole: 2, OtherNames: 5, Plain: 3}),
			"cases answered with calls that parse and validate", "7/10", "—", "—", "every call output: 7/10 (the 7 cases not answered plainly, refused or failed)", met},
		{"live service: dropped tools are reported", liveRows(cannedService), "cases with tools dropped to fit (150 tools in all)",
			"100/1000", "—", "—", "—", info},
		{"live service: ground truth among the dropped", liveRows(cannedService), "a ground-truth function among the dropped",
			"40/100", "—", "—", "— (depends on the ranking and the tokenizer)", info},
		{"live service: whole prompts over the context", liveRows(cannedService), "longer than the context (llama-server refuses such a prompt; the longest takes 9,120 tokens)",
			"80/1000", "—", "—", "—", info},
		{"live service: none refused", liveRows(cannedService), "refused", "0/1000", "—", "—", "0", met},
		{"restart: nothing sent before a stop failed", loadRows(figures.Load{Restart: cannedRestart}), "sent before a stop began that failed (2 executor restarts under 200 req/s for 20 s; 12 of them in flight when a stop began; besides, 0 answered 503 because the executor refused the connection",
			"0 of 3,000", "—", "—", "0", met},
		{"restart: gap failures all 503", loadRows(figures.Load{Restart: cannedRestart}), "while the executor was away",
			"150 of 200; 150", "—", "—", "every failure 503", met},
		{"restart: gap failures fast", loadRows(figures.Load{Restart: cannedRestart}), "those failures answered",
			"2.4 / 17.1 ms", "—", "—", "fast: max ≤ 1,000 ms", met},
		{"restart: a failure after the restart", loadRows(figures.Load{Restart: cannedRestart}), "after the last restart served",
			"1 of 1,500", "—", "—", "0", notMet},
		{"restart: times per restart", loadRows(figures.Load{Restart: cannedRestart}), "per restart",
			"568, 496 ms (233, 200; 330, 292)", "—", "—", "—", info},
		{"sse: the other token within its own call time + 100 ms", loadRows(figures.Load{SSE: cannedSSE}), "another token's call p99 (p50 252.7 ms) while one token keeps 48 calls of a 250 ms tool posted to a legacy SSE session",
			"301.6 ms", "252.1 ms", "1.20×", "≤ own call time + 100 ms (here +49.5 ms)", met},
		{"sse: the other token waiting behind the flood", loadRows(figures.Load{SSE: sseWith(func(f *figures.LoadSSE) { f.Beside.P99 = 11864.2 })}),
			"another token's call p99", "11864.2 ms", "252.1 ms", "47.06×", "≤ own call time + 100 ms (here +11612.1 ms)", notMet},
		{"sse: within the time but a call failed", loadRows(figures.Load{SSE: sseWith(func(f *figures.LoadSSE) { f.Beside.Errors = 1 })}),
			"another token's call p99", "301.6 ms", "252.1 ms", "1.20×", "≤ own call time + 100 ms (here +49.5 ms)", notMet},
		{"sse: the other token's errors", loadRows(figures.Load{SSE: sseWith(func(f *figures.LoadSSE) { f.Alone.Errors = 2 })}),
			"the other token's failed calls", "2 of 160", "—", "—", "0", notMet},
		{"sse: the flood's calls", loadRows(func() figures.Load { l := cannedLoad; l.SSE = cannedSSE; return l }()), "the flood's calls", "280, 4,720, 0 of 5,000", "—", "—", "—", info},
		{"console bytes", consoleRows(consoleFigures{Requests: 5, TransferKB: 51.5, HaveTransfer: true}), "bytes transferred",
			"51.5 KB", "target 200 KB", "0.26×", "< 200 KB", met},
		{"console slow", consoleRows(consoleFigures{MinMS: 250, MedianMS: 320, MaxMS: 480, HaveServersMS: true}), "on screen",
			"320 ms", "target 300 ms", "1.07×", "< 300 ms", notMet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := find(t, tt.rows, tt.measure)
			got := []string{r.Toolmesh, r.Baseline, ratioCell(r.Ratio), r.Target, string(r.Verdict)}
			want := []string{tt.toolmesh, tt.baseline, tt.ratio, tt.target, string(tt.verdict)}
			for i, col := range []string{"toolmesh", "baseline", "ratio", "target", "met"} {
				if got[i] != want[i] {
					t.Errorf("%s = %q, want %q (row %+v)", col, got[i], want[i], r)
				}
			}
		})
	}
}

// chatWith is cannedChat changed by edit (its rows copied first).
func loopWith(edit func(f *figures.Loop)) figures.Loop {
	f := cannedLoop
	f.Rows = append([]figures.LoopRow(nil), cannedLoop.Rows...)
	edit(&f)
	return f
}

func chatWith(edit func(f *figures.Loop)) figures.Loop {
	f := cannedChat
	f.Rows = append([]figures.LoopRow(nil), cannedChat.Rows...)
	edit(&f)
	return f
}

func TestMissingFigures(t *testing.T) {
	if r := find(t, speedRows(figures.Speed{Sizes: []figures.SpeedSize{{Tools: 1000}}}), "100,000"); r.Verdict != skipped ||
		r.Toolmesh != "not measured in this run" {
		t.Errorf("a size the run left out: %+v; want skipped, not measured", r)
	}
	if r := retrievalRows(figures.Retrieval{}); len(r) != 1 || r[0].Verdict != failed {
		t.Errorf("no default method: %+v; want one failed row", r)
	}
	if r := tracingRows(cannedTracing[:1], "x"); len(r) != 1 || r[0].Verdict != failed {
		t.Errorf("tracing without an 'on' run: %+v; want one failed row", r)
	}
	if r := find(t, chatRows(figures.Loop{Rows: cannedChat.Rows[:2]}), "overhead per request"); r.Verdict != failed {
		t.Errorf("a chat run without its chat rows: %+v; want a failed row", r)
	}
	if r := liveRows(figures.Live{}); len(r) != 1 || r[0].Verdict != failed {
		t.Errorf("a live run that decoded nothing: %+v; want one failed row", r)
	}
	if got := ratioCell(1503.0 / 1500); got != "1.002×" {
		t.Errorf("a ratio just over 1 is shown %q, want 1.002×", got)
	}
	if !math.IsNaN(ratio(1, 0)) || ratioCell(ratio(1, 0)) != "—" {
		t.Errorf("ratio over a zero baseline is %v, shown %q; want NaN, —", ratio(1, 0), ratioCell(ratio(1, 0)))
	}
}

func TestRender(t *testing.T) {
	doc := &document{
		Generated: time.Date(2026, 12, 3, 9, 41, 0, 0, time.UTC),
		Commit:    "abc123def456+dirty",
		Quick:     true,
		Machine: machine{CPU: "AMD EPYC", CPUs: 2, NumCPU: 2, GOMAXPROCS: "2", Memory: "23.5 GiB", Kernel: "linux 6.1",
			OS: "Debian GNU/Linux 12 (bookworm)", Go: "go version go1.26.8 linux/amd64", LoadBefore: "0.50/0.40/0.30", LoadAfter: "1.90/1.20/0.70"},
		Elapsed: 11*time.Minute + 30*time.Second,
		Build:   40 * time.Second,
		Sections: []section{
			{Name: "executor", Issue: "2 executor", Title: "Executor call overhead (issue 2)", Intro: []string{"Executor against direct."},
				Cmds: []command{{Line: "go run ./bench/executor -markdown -json $TMP/executor.json", Markdown: true,
					Output: "| transport | scenario |\n|---|---|\n| sse | direct-held |\n", Elapsed: 3 * time.Minute, LoadBefore: "0.5", LoadAfter: "1.9"}},
				Rows: executorRows(cannedExecutor)},
			{Name: "load", Issue: "8 load", Title: "Load (issue 8)",
				Cmds: []command{{Line: "go run ./bench/load -duration 60s", Err: "exit status 1", StderrTail: "load: mesh: port in use",
					Output: "kind  sent\nall   12000\n"}},
				Err: "go run ./bench/load: exit status 1"},
			{Name: "console", Issue: "9 console", Title: "Web console first load (issue 9)", Skip: "no headless Chromium here"},
		},
	}
	var b strings.Builder
	if err := render(&b, doc); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# Benchmark results\n",
		"Generated by `make bench` at 2026-12-03 09:41 UTC, commit abc123def456+dirty; **do not edit**: analysis in [NOTES.md](NOTES.md).",
		"**SMOKE RUN (`-quick`)**",
		"The figures below are NOT measurements",
		"| CPU | AMD EPYC |",
		"| cores | 2 listed in /proc/cpuinfo, 2 usable (runtime.NumCPU) |",
		"| GOMAXPROCS | 2 |",
		"| memory | 23.5 GiB |",
		"| kernel | linux 6.1 |",
		"| OS | Debian GNU/Linux 12 (bookworm) |",
		"| Go | go version go1.26.8 linux/amd64 |",
		"| load average (1/5/15 min) | before 0.50/0.40/0.30, after 1.90/1.20/0.70 |",
		"| run time | 11m30s in all, of which 40s building the programs |",
		"**ratio = toolmesh ÷ baseline**",
		"| issue | measure | toolmesh | baseline | ratio | target | met |\n|---|---|---:|---:|---:|---|---|\n",
		"| 2 executor | sse: calls/s, @64 callers (executor vs direct) | 8,698 | 11,326 | 0.77× | ratio ≥ 0.85 | **not met** |\n",
		"| 2 executor | streamable-http: call p50, 1 caller (executor gRPC vs direct held mcp-go call) | 156 µs | 118 µs | 1.32× | ≤ baseline + 80 µs (here +38 µs) | met |\n",
		"| 8 load | Load (issue 8) | failed: go run ./bench/load: exit status 1 | — | — | — | **failed** |\n",
		"| 9 console | Web console first load (issue 9) | not run | — | — | — | skipped: no headless Chromium here |\n",
		"## Executor call overhead (issue 2)\n\nExecutor against direct.\n\nCommand (took 3m0s; load average 0.5 → 1.9):\n\n```sh\ngo run ./bench/executor -markdown -json $TMP/executor.json\n```\n\n| transport | scenario |\n|---|---|\n| sse | direct-held |\n",
		"**failed: go run ./bench/load: exit status 1**",
		"failed: exit status 1\n\n```text\nload: mesh: port in use\n```",
		"```text\nkind  sent\nall   12000\n```",
		"**Skipped**: no headless Chromium here",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("RESULTS.md lacks %q; got:\n%s", want, out)
		}
	}
	if !doc.failed() {
		t.Error("a document with a failed section reads as not failed")
	}
	// Without -quick, no smoke banner.
	doc.Quick = false
	b.Reset()
	if err := render(&b, doc); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "SMOKE RUN") {
		t.Error("a full run is marked as a smoke run")
	}
}

// TestLiveWithoutServer: without a llama-server the live section says it was skipped and why,
// and fails instead when one is required.
func TestLiveWithoutServer(t *testing.T) {
	for _, tc := range []struct {
		required          string
		wantSkip, wantErr bool
	}{{"", true, false}, {"1", false, true}} {
		t.Setenv(testbackend.Llama.Required, tc.required)
		var s section
		runLive(t.Context(), &runner{tmp: t.TempDir()}, &s)
		if got := s.Skip != ""; got != tc.wantSkip || !strings.Contains(s.Skip+s.Err, "no llama-server here") {
			t.Errorf("%s=%q: skip %q; want skipped %v, saying why", testbackend.Llama.Required, tc.required, s.Skip, tc.wantSkip)
		}
		if got := s.Err != ""; got != tc.wantErr || tc.wantErr && !strings.Contains(s.Err, testbackend.Llama.Required+"=1") {
			t.Errorf("%s=%q: err %q; want failed %v, naming the variable", testbackend.Llama.Required, tc.required, s.Err, tc.wantErr)
		}
		if len(s.Cmds) != 0 {
			t.Errorf("%s=%q: ran %d commands without a llama-server", testbackend.Llama.Required, tc.required, len(s.Cmds))
		}
	}
}

func TestParseStep(t *testing.T) {
	head := "goos: linux\ngoarch: amd64\npkg: github.com/toolmesh/toolmesh/services/inference/gorilla\n"
	out := head + "BenchmarkStep/cold-2    \t     415\t   1712345 ns/op\t 1309928 B/op\t   15053 allocs/op\n" +
		"BenchmarkStep/cached-2  \t  182370\t      6474 ns/op\t   13168 B/op\t      22 allocs/op\nPASS\n"
	got, err := parseStep(out)
	if err != nil {
		t.Fatal(err)
	}
	if got != cannedStep {
		t.Errorf("parseStep = %+v, want %+v", got, cannedStep)
	}
	for _, tc := range []struct{ out, want string }{
		{"PASS\n", "BenchmarkStep/cold"},
		// The unsized step of old alone is not enough.
		{head + "BenchmarkStep-2   \t    4790\t    249123 ns/op\t  180224 B/op\t    2329 allocs/op\nPASS\n", "BenchmarkStep/cold"},
		{head + "BenchmarkStep/cold-2  \t 415\t 1712345 ns/op\nPASS\n", "BenchmarkStep/cached"},
	} {
		if _, err := parseStep(tc.out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseStep(%q): err = %v; want one naming %s", tc.out, err, tc.want)
		}
	}
}

func TestParseConsole(t *testing.T) {
	ran := "=== RUN   TestConsole\n" +
		"    console_test.go:253: first load: 5 requests, 51.5 KB transferred (50.0 KB of bodies); servers on screen 719 ms after navigation\n" +
		"    console_test.go:262: servers on screen after navigation, 5 first loads: min 203 ms, median 298 ms, max 719 ms\n--- PASS: TestConsole (5.65s)\n"
	c, skip, err := parseConsole(ran)
	if err != nil || skip != "" {
		t.Fatalf("parseConsole = %v, %q", err, skip)
	}
	if want := (consoleFigures{Requests: 5, TransferKB: 51.5, BodiesKB: 50, MinMS: 203, MedianMS: 298, MaxMS: 719, HaveTransfer: true, HaveServersMS: true}); c != want {
		t.Errorf("parseConsole = %+v, want %+v", c, want)
	}

	skipped := "=== RUN   TestConsole\n    console_test.go:38: TOOLMESH_CHROMIUM is not set: the browser tests need ./scripts/chromium\n--- SKIP: TestConsole (0.00s)\nPASS\n"
	if _, skip, err := parseConsole(skipped); err != nil || !strings.Contains(skip, "TOOLMESH_CHROMIUM is not set") {
		t.Errorf("skipped test: skip %q, err %v; want the test's reason", skip, err)
	}
	if _, _, err := parseConsole("--- PASS: TestConsole (1s)\n"); err == nil {
		t.Error("a run without figures parsed without an error")
	}
}

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "RESULTS.md")
	for _, content := range []string{"old\n", "new\n"} {
		if err := writeAtomic(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Errorf("file holds %q, want %q", b, content)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files left in the folder, want only RESULTS.md", len(entries))
	}
	if err := writeAtomic(filepath.Join(dir, "missing", "RESULTS.md"), []byte("x")); err == nil {
		t.Error("writing into a missing folder did not fail")
	}
}

// TestQuickReport runs the whole report with -quick (about a minute and a half: it builds and
// runs every program). Only with TOOLMESH_BENCH_SMOKE=1: CI's `go test -race ./...` must stay
// fast, and the programs' own tests cover them there.
func TestQuickReport(t *testing.T) {
	if os.Getenv("TOOLMESH_BENCH_SMOKE") != "1" {
		t.Skip("set TOOLMESH_BENCH_SMOKE=1 to run the -quick report end to end (about 90 s)")
	}
	if testing.Short() {
		t.Skip("skipped under -short: it builds and runs every bench program")
	}
	t.Chdir(filepath.Join("..", ".."))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "RESULTS.md")
	var progress strings.Builder
	n, err := run(ctx, options{out: out, quick: true, only: []string{"retrieval", "speed", "calls", "live", "loop", "load"}}, &progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d benchmarks failed:\n%s", n, b)
	}
	for _, want := range []string{"SMOKE RUN", "## Summary", "| 5 agent loop | overhead per iteration p50, one process, rest, 1 client |", "## Load and a rolling restart (issues 8, 17)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("RESULTS.md lacks %q:\n%s", want, b)
		}
	}
}

// TestSecurityRows reads issue 16's Go benchmarks as `go test -bench` prints them and judges
// the policy + checks target on the slowest request kind.
func TestSecurityRows(t *testing.T) {
	out := `goos: linux
BenchmarkDecideCall-2            	 1542538	       728.9 ns/op	         0.1267 allowed	       390.0 p50-ns	     25689 p99-ns	     218 B/op	       3 allocs/op
BenchmarkDecideCall-2            	 1542538	       728.9 ns/op	         0.1267 allowed	       410.0 p50-ns	     25689 p99-ns	     218 B/op	       3 allocs/op
BenchmarkDecideCall-2            	 1542538	       728.9 ns/op	         0.1267 allowed	       900.0 p50-ns	     25689 p99-ns	     218 B/op	       3 allocs/op
BenchmarkCheck/console-post-2         	 5584864	       205.7 ns/op	       190.0 p50-ns	       301.0 p99-ns	       0 B/op	       0 allocs/op
BenchmarkCheck/named-get-2            	11252816	       104.7 ns/op	        69.00 p50-ns	       111.0 p99-ns	       0 B/op	       0 allocs/op
BenchmarkCallMutualTLS/plaintext-2         	   17331	     60000 ns/op	    8818 B/op	     140 allocs/op
BenchmarkCallMutualTLS/mutual-tls-2        	   18757	     63000 ns/op	    8852 B/op	     142 allocs/op
PASS`
	b := parseGoBench(out)
	if got := b.median("BenchmarkDecideCall", "p50-ns"); got != 410 {
		t.Errorf("median p50 of DecideCall = %v, want 410", got)
	}
	pair := tlsPair{
		Off: figures.Loop{Rows: []figures.LoopRow{{Mode: "micro", Via: "rest", Clients: 1, IterP50: 2000, Queries: 10}}},
		On:  figures.Loop{Rows: []figures.LoopRow{{Mode: "micro", Via: "rest", Clients: 1, IterP50: 2200, Queries: 10}}},
	}
	rows := securityRows(b, []tlsPair{pair})
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: %v", len(rows), rows)
	}
	if rows[0].Toolmesh != "600 ns" || rows[0].Verdict != met {
		t.Errorf("policy + checks row = %+v, want 600 ns (410 + 190), met", rows[0])
	}
	if math.Abs(rows[1].Ratio-1.05) > 1e-9 {
		t.Errorf("mTLS call ratio = %v, want 1.05", rows[1].Ratio)
	}
	if rows[2].Toolmesh != "1.10×" || rows[3].Verdict != failed {
		t.Errorf("loop rows = %+v / %+v: want rest 1.10× and grpc not measured", rows[2], rows[3])
	}
}

// TestMCPFaceRows judges issues 19's and 28's targets at the concurrent row only, on each mesh
// measured; a figures file from before the gRPC mesh was measured gives the first alone.
func TestMCPFaceRows(t *testing.T) {
	f := figures.MCPFace{Callers: 64, Calls: []figures.MCPFaceCalls{
		{Path: "direct", Callers: 1, CallsPerSec: 5000, P50: 150, CPUPerCall: 200},
		{Path: "face", Callers: 1, CallsPerSec: 1500, P50: 500, CPUPerCall: 600},
		{Path: "direct", Callers: 64, CallsPerSec: 8000, P50: 6000, CPUPerCall: 200},
		{Path: "face", Callers: 64, CallsPerSec: 6000, P50: 6100, CPUPerCall: 260},
	}, List: &figures.MCPFaceList{Tools: 10000, Pages: 21, DirectP50Ms: 350, FaceP50Ms: 360}}
	rows := mcpfaceRows(f)
	if len(rows) != 7 {
		t.Fatalf("%d rows, want 7", len(rows))
	}
	for i, want := range []verdict{info, info, info, met, met, met, info} {
		if rows[i].Verdict != want {
			t.Errorf("row %d %q: %s, want %s", i, rows[i].Measure, rows[i].Verdict, want)
		}
	}
	f.Calls[3].CallsPerSec = 2000
	f.Calls[3].CPUPerCall = 400
	if rows := mcpfaceRows(f); rows[4].Verdict != notMet || rows[5].Verdict != notMet {
		t.Errorf("calls/s at 0.25× direct, CPU at 2×: %s, %s, want not met", rows[4].Verdict, rows[5].Verdict)
	}

	f.Calls = append(f.Calls,
		figures.MCPFaceCalls{Path: "face-grpc", Callers: 1, CallsPerSec: 1000, P50: 700, CPUPerCall: 800},
		figures.MCPFaceCalls{Path: "face-grpc", Callers: 64, CallsPerSec: 4000, P50: 9000, CPUPerCall: 500})
	rows = mcpfaceRows(f)
	if len(rows) != 13 {
		t.Fatalf("%d rows with both meshes, want 13", len(rows))
	}
	for i, want := range []verdict{info, info, info, notMet, notMet, notMet} {
		if r := rows[6+i]; r.Verdict != want || !strings.Contains(r.Measure, "services over gRPC") {
			t.Errorf("row %d %q: %s, want %s on the gRPC mesh", 6+i, r.Measure, r.Verdict, want)
		}
	}
}

// TestFaceCallRows reads BenchmarkCall as `go test -bench` prints it: the face's own CPU is
// judged against 20 µs (the median of the runs), the short path is compared with mcp-go's.
func TestFaceCallRows(t *testing.T) {
	out := `BenchmarkCall/own-code-2         	  300000	      4100 ns/op	      4000 cpu-ns/op	    2900 B/op	      40 allocs/op
BenchmarkCall/own-code-2         	  300000	      4100 ns/op	     25000 cpu-ns/op	    2900 B/op	      40 allocs/op
BenchmarkCall/own-code-2         	  300000	      4100 ns/op	      5000 cpu-ns/op	    2900 B/op	      40 allocs/op
BenchmarkCall/short/2026-07-28-2 	   50000	     20000 ns/op	     21000 cpu-ns/op	   12000 B/op	     150 allocs/op
BenchmarkCall/mcp-go/2026-07-28-2	   20000	     60000 ns/op	     63000 cpu-ns/op	   40000 B/op	     500 allocs/op
PASS`
	rows := faceCallRows(parseGoBench(out))
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2 (own code, one protocol): %v", len(rows), rows)
	}
	if rows[0].Toolmesh != "5.0 µs" || rows[0].Verdict != met {
		t.Errorf("own-code row = %+v, want the median 5.0 µs, met", rows[0])
	}
	if rows[1].Toolmesh != "21.0 µs" || rows[1].Baseline != "63.0 µs" || rows[1].Verdict != info {
		t.Errorf("short path row = %+v, want 21.0 µs vs 63.0 µs, reported", rows[1])
	}
	if rows := faceCallRows(parseGoBench("PASS")); len(rows) != 1 || rows[0].Verdict != failed {
		t.Errorf("without the benchmark: %+v, want one row, not measured", rows)
	}
}

// TestAuditRows judges issue 27's targets: the paired p50 at one caller, calls/s at the
// concurrent row; a trail that does not verify fails the section.
func TestAuditRows(t *testing.T) {
	f := figures.Audit{Callers: 16, Calls: []figures.AuditCalls{
		{Audit: false, Callers: 1, CallsPerSec: 2000, P50: 480, CPUPerCall: 300},
		{Audit: true, Callers: 1, CallsPerSec: 1990, P50: 530, CPUPerCall: 303},
		{Audit: false, Callers: 16, CallsPerSec: 5000, P50: 3000, CPUPerCall: 280},
		{Audit: true, Callers: 16, CallsPerSec: 4900, P50: 3050, CPUPerCall: 284},
	}, PairedOffP50: 480, PairedOnP50: 484, Pairs: 20000,
		RecordNs: 250, WriterPerSec: 300000, Verified: true, TrailRecords: 40000, Calls0: 40000}
	rows := auditRows(f)
	want := []verdict{met, info, info, info, info, met, info, info, met}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, w := range want {
		if rows[i].Verdict != w {
			t.Errorf("row %d %q: %s, want %s", i, rows[i].Measure, rows[i].Verdict, w)
		}
	}
	f.PairedOnP50, f.Calls[3].CallsPerSec = 500, 4000
	if rows := auditRows(f); rows[0].Verdict != notMet || rows[5].Verdict != notMet {
		t.Errorf("paired p50 +20 µs and calls/s 0.8×: %s, %s; want not met", rows[0].Verdict, rows[5].Verdict)
	}
	f.Pairs = 0
	if rows := auditRows(f); rows[0].Verdict != failed {
		t.Errorf("no paired calls: %s, want failed", rows[0].Verdict)
	}
	f.Verified = false
	if rows := auditRows(f); rows[len(rows)-1].Verdict != failed {
		t.Errorf("a trail that does not verify: %s, want failed", rows[len(rows)-1].Verdict)
	}
}
