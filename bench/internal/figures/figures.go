// Package figures is the machine-readable form of the bench programs' headline numbers. Each
// program writes its own with -json FILE next to its text tables, and bench/report reads them
// to build the summary table, so the report never has to scrape a table meant for people.
package figures

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Executor is bench/executor: the median over runs of every scenario measured.
type Executor struct {
	Runs        int                `json:"runs"`
	Calls       int                `json:"calls"` // sequential calls per scenario and run
	Concurrency int                `json:"concurrency"`
	Scenarios   []ExecutorScenario `json:"scenarios"`
}

// ExecutorScenario is one way of calling add(2,3); latencies in µs.
type ExecutorScenario struct {
	Transport   string  `json:"transport"` // "" for the gRPC health baseline
	Name        string  `json:"name"`      // direct-held, executor-grpc, new-session, ...
	Protocol    string  `json:"protocol"`
	P50         float64 `json:"p50_us"`
	P99         float64 `json:"p99_us"`
	CallsPerSec float64 `json:"calls_per_sec_concurrent"`
	LoadP50     float64 `json:"p50_us_concurrent"`
	LoadP99     float64 `json:"p99_us_concurrent"`
	CPUPerCall  float64 `json:"cpu_us_per_call_concurrent"`
	Calls       int     `json:"calls"`
	Errors      int     `json:"errors"`
}

// Find returns the scenario named name on transport tr.
func (e *Executor) Find(tr, name string) (ExecutorScenario, bool) {
	for _, s := range e.Scenarios {
		if s.Transport == tr && s.Name == name {
			return s, true
		}
	}
	return ExecutorScenario{}, false
}

// Retrieval is bench/retrieval's quality run on one query set.
type Retrieval struct {
	Queries string            `json:"queries"` // the query file's base name
	N       int               `json:"n"`       // queries
	Tools   int               `json:"tools"`
	Methods []RetrievalMethod `json:"methods"`
}

// RetrievalMethod is one method's overall figures (strict ids).
type RetrievalMethod struct {
	Name  string  `json:"name"`
	R1    float64 `json:"recall_at_1"`
	R3    float64 `json:"recall_at_3"`
	R5    float64 `json:"recall_at_5"`
	R10   float64 `json:"recall_at_10"`
	MRR10 float64 `json:"mrr_at_10"`
}

// Find returns the method named name.
func (r *Retrieval) Find(name string) (RetrievalMethod, bool) {
	for _, m := range r.Methods {
		if m.Name == name {
			return m, true
		}
	}
	return RetrievalMethod{}, false
}

// Speed is bench/retrieval -speed: one entry per pool size.
type Speed struct {
	Method string      `json:"method"`
	Sizes  []SpeedSize `json:"sizes"`
}

// SpeedSize is one pool size; latencies in µs.
type SpeedSize struct {
	Tools          int     `json:"tools"`
	BuildSeconds   float64 `json:"build_s"`
	SearchP50      float64 `json:"search_p50_us"`
	SearchP99      float64 `json:"search_p99_us"`
	SearchCPU      float64 `json:"search_cpu_us_per_op"`
	StoreP50       float64 `json:"store_only_p50_us"`
	StoreP99       float64 `json:"store_only_p99_us"`
	HeapPerTool    int64   `json:"heap_bytes_per_tool_index"`
	HeapPerToolAll int64   `json:"heap_bytes_per_tool_index_and_tools"`
}

// Find returns the entry for n tools.
func (s *Speed) Find(n int) (SpeedSize, bool) {
	for _, x := range s.Sizes {
		if x.Tools == n {
			return x, true
		}
	}
	return SpeedSize{}, false
}

// Calls is bench/calls: passes out of cases for each check.
type Calls struct {
	Cases    int   `json:"cases"`
	Parse    Count `json:"parse"`
	Validate Count `json:"validate"`
	Grammar  Count `json:"grammar"`
	Reject   Count `json:"reject"`
	Live     Live  `json:"live"` // zero without a llama-server
}

// Live is bench/calls' live check: each decoded case's output sorted into exactly one kind
// (Whole + OtherNames + Invalid + Unparsed + Plain + Refused + Errors = Cases).
type Live struct {
	Server string `json:"server,omitempty"` // what decoded: llama-server's build and model
	// Path is "service" (each case through the inference service's Generate and its prompt
	// budget, as a question's first step) or "raw" (the whole tool list's prompt sent to
	// /completion).
	Path    string `json:"path"`
	CtxSize int    `json:"ctx_size"` // the server's context per slot, in its tokens
	// NPredict: raw, the n_predict of every request; through the service, its ceiling.
	NPredict  int  `json:"n_predict"`
	CallsOnly bool `json:"calls_only"` // grammars without the plain-answer branch
	Cases     int  `json:"cases"`      // cases decoded
	// Whole: calls that parse, validate against their schemas and name exactly the ground
	// truth's functions (as a set).
	Whole int `json:"whole"`
	// OtherNames: calls that parse and validate but name other functions.
	OtherNames int `json:"other_names"`
	Invalid    int `json:"invalid"`  // calls that parse but break a schema
	Unparsed   int `json:"unparsed"` // output that does not parse
	Plain      int `json:"plain"`    // plain answers (no call)
	// Refused: the prompt does not fit the context (through the service, even with every tool
	// dropped; raw, llama-server's exceed_context_size_error).
	Refused int `json:"refused"`
	Errors  int `json:"errors"` // cases not sent, or requests that failed otherwise
	// Cut counts the outputs (of any kind above) that stopped at n_predict.
	Cut int `json:"cut"`
	// Through the service only: how each answered case's prompt met the context. FitWhole
	// cases kept every tool; Dropped cases had ToolsDropped tools dropped in all, a ground
	// truth's function among them in DroppedGroundTruth cases.
	// WholeOverCtx cases' prompt with every tool is longer than CtxSize (llama-server refuses
	// such a prompt); the longest takes LongestWhole tokens.
	WholeOverCtx       int `json:"whole_over_ctx"`
	LongestWhole       int `json:"longest_whole_tokens"`
	FitWhole           int `json:"fit_whole"`
	Dropped            int `json:"dropped"`
	ToolsDropped       int `json:"tools_dropped"`
	DroppedGroundTruth int `json:"dropped_ground_truth"`
}

// Count is OK passes out of N.
type Count struct {
	OK int `json:"ok"`
	N  int `json:"n"`
}

// Loop is bench/loop: one row per mode, API and client count.
type Loop struct {
	DurationSeconds float64   `json:"duration_s"`
	Rows            []LoopRow `json:"rows"`
}

// LoopRow is one measured row; overhead per iteration in µs, query latency in ms.
type LoopRow struct {
	Mode        string  `json:"mode"` // inproc, micro
	Via         string  `json:"via"`  // rest, grpc, chat
	Clients     int     `json:"clients"`
	Queries     int     `json:"queries"`
	Errors      int     `json:"errors"`
	QPS         float64 `json:"queries_per_sec"`
	P50         float64 `json:"p50_ms"`
	P99         float64 `json:"p99_ms"`
	IterP50     float64 `json:"overhead_per_iteration_p50_us"`
	IterP99     float64 `json:"overhead_per_iteration_p99_us"`
	CPUPerQuery float64 `json:"cpu_us_per_query"`
	AllocKB     float64 `json:"alloc_kb_per_query"`
	Target      float64 `json:"target_overhead_per_iteration_p50_us"`
}

// Find returns the row for mode, via and clients.
func (l *Loop) Find(mode, via string, clients int) (LoopRow, bool) {
	for _, r := range l.Rows {
		if r.Mode == mode && r.Via == via && r.Clients == clients {
			return r, true
		}
	}
	return LoopRow{}, false
}

// Replicas is bench/replicas: how calls spread over two executors, and what a drain and a
// restart of one of them cost.
type Replicas struct {
	Executor1, Executor2 int     // tools/call per executor while both ran
	Requests, Failed     int     // every request of the run, and the failed ones
	FailedAfterStop      int     // failed requests sent after executor 1 began to drain
	WindowMs             float64 // from the stop to the last failed request
	DrainExitMs          float64 // SIGTERM to exit of executor 1
	RejoinMs             float64 // restart of executor 1 to its first call
}

// Load is bench/load: the whole mix ("all") and each kind, and the process before and after.
type Load struct {
	Rate             float64   `json:"rate_per_sec"`
	DurationSeconds  float64   `json:"duration_s"`
	SettleSeconds    float64   `json:"settle_s"`
	Kinds            []LoadRow `json:"kinds"` // the last one is "all"
	RSSBefore        int64     `json:"rss_bytes_before"`
	RSSAfter         int64     `json:"rss_bytes_after"`
	HeapBefore       uint64    `json:"heap_inuse_bytes_before"`
	HeapAfter        uint64    `json:"heap_inuse_bytes_after"`
	GoroutinesBefore int       `json:"goroutines_before"`
	GoroutinesAfter  int       `json:"goroutines_after"`
	// Restart is the rolling-restart phase, when it ran (-restarts).
	Restart *LoadRestart `json:"restart,omitempty"`
	// SSE is the legacy SSE phase, when it ran (-sse-calls).
	SSE *LoadSSE `json:"sse,omitempty"`
}

// LoadSSE is bench/load's legacy SSE phase (issue 26): one token keeps Calls slow calls posted
// to one legacy SSE session while another token's calls of the same tool are timed, first alone
// and then beside that flood; latencies in ms.
type LoadSSE struct {
	Calls           int     `json:"calls"`        // the flood's calls kept posted at once
	CallMs          float64 `json:"call_ms"`      // what the slow tool takes at its server
	Rate            float64 `json:"rate_per_sec"` // the other token's calls
	DurationSeconds float64 `json:"duration_s"`   // of each of the two timed runs
	// Alone and Beside are the other token's calls without and with the flood (Kind "alone",
	// "beside the flood").
	Alone  LoadRow `json:"alone"`
	Beside LoadRow `json:"beside"`
	// The flood's POSTs: accepted (202, their results read from the stream), refused with 429
	// (posted again after a pause), and failed otherwise.
	Posted   int `json:"flood_posted"`
	Accepted int `json:"flood_accepted"`
	Refused  int `json:"flood_refused_429"`
	Failed   int `json:"flood_failed"`
}

// LoadRestart is bench/load's rolling-restart phase: the executor, its own process, stopped
// with SIGTERM and started again while the load runs. Every request counts in one of Before,
// Gap and After, by when it was sent.
type LoadRestart struct {
	Rate            float64 `json:"rate_per_sec"`
	DurationSeconds float64 `json:"duration_s"`
	Restarts        int     `json:"restarts"`
	// Before: sent before a stop began (since the executor last served); InFlight: those
	// answered after it began. BeforeFailed: those that failed, but for Before503: those the
	// api answered 503 because the executor refused the connection (their call reached it
	// only after the stop began, when it no longer listened).
	Before         int `json:"before"`
	BeforeFailed   int `json:"before_failed"`
	Before503      int `json:"before_refused_503"`
	InFlight       int `json:"in_flight"`
	InFlightFailed int `json:"in_flight_failed"`
	// Gap: sent from a stop until a tool call was served again; how many failed, how many
	// of those with 503, and how fast the failures came (ms from the scheduled send).
	Gap          int     `json:"gap"`
	GapFailed    int     `json:"gap_failed"`
	Gap503       int     `json:"gap_failed_503"`
	GapFailP50Ms float64 `json:"gap_fail_p50_ms"`
	GapFailMaxMs float64 `json:"gap_fail_max_ms"`
	// After: sent once the last restart served.
	After       int                `json:"after"`
	AfterFailed int                `json:"after_failed"`
	Cycles      []LoadRestartCycle `json:"cycles"`
}

// LoadRestartCycle is one stop and start; times in ms.
type LoadRestartCycle struct {
	DrainExitMs     float64 `json:"drain_exit_ms"`      // SIGTERM to the process's exit
	StartToServedMs float64 `json:"start_to_served_ms"` // the new process started to a call served through the api
	StopToServedMs  float64 `json:"stop_to_served_ms"`  // SIGTERM to a call served again
}

// LoadRow is one kind of request; latencies in ms.
type LoadRow struct {
	Kind   string  `json:"kind"`
	Sent   int     `json:"sent"`
	OK     int     `json:"ok"`
	Errors int     `json:"errors"`
	OKRate float64 `json:"ok_per_sec"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	P999   float64 `json:"p999_ms"`
}

// All is the row of the whole mix.
func (l *Load) All() (LoadRow, bool) {
	for _, r := range l.Kinds {
		if r.Kind == "all" {
			return r, true
		}
	}
	return LoadRow{}, false
}

// MCPFace is bench/mcpface: tool calls through the api's /mcp against the same calls on a held
// session directly, and tools/list of a big catalog both ways (issue 19); latencies in µs.
type MCPFace struct {
	Protocol string         `json:"protocol"`
	Callers  int            `json:"callers"` // the concurrent row's callers
	Calls    []MCPFaceCalls `json:"calls"`
	List     *MCPFaceList   `json:"list,omitempty"`
}

// MCPFaceCalls is one path at one number of callers.
type MCPFaceCalls struct {
	Path        string  `json:"path"` // direct, face
	Callers     int     `json:"callers"`
	Calls       int     `json:"calls"`
	CallsPerSec float64 `json:"calls_per_sec"`
	P50         float64 `json:"p50_us"`
	P99         float64 `json:"p99_us"`
	CPUPerCall  float64 `json:"cpu_us_per_call"`
}

// Find returns the row of path at callers.
func (m *MCPFace) Find(path string, callers int) (MCPFaceCalls, bool) {
	for _, c := range m.Calls {
		if c.Path == path && c.Callers == callers {
			return c, true
		}
	}
	return MCPFaceCalls{}, false
}

// MCPFaceList is the tools/list comparison: every page through /mcp against one unpaginated
// list on the server; p50 in ms.
type MCPFaceList struct {
	Tools       int     `json:"tools"`
	Pages       int     `json:"pages"`
	DirectP50Ms float64 `json:"direct_p50_ms"`
	FaceP50Ms   float64 `json:"face_p50_ms"`
}

// Audit is bench/audit: REST tool calls on a mesh without an audit trail and on one writing
// it, in the same run, and the Recorder alone (issue 27); latencies in µs.
type Audit struct {
	Callers   int          `json:"callers"` // the concurrent row's callers
	Arguments string       `json:"arguments"`
	Calls     []AuditCalls `json:"calls"`
	// PairedOffP50 and PairedOnP50 are the p50 of one caller alternating a call on each mesh,
	// over Pairs pairs: the fairest difference on a shared machine.
	PairedOffP50 float64 `json:"paired_off_p50_us"`
	PairedOnP50  float64 `json:"paired_on_p50_us"`
	Pairs        int     `json:"pairs"`
	// RecordNs is what Recorder.Record costs its caller, p50; WriterPerSec the records written a
	// second when one caller records as fast as it can.
	RecordNs     float64 `json:"record_ns_p50"`
	WriterPerSec float64 `json:"writer_records_per_sec"`
	// Verified says the audited mesh's trail verified; TrailRecords is its call records, for
	// Calls0 calls made on it (warm-ups included).
	Verified     bool `json:"verified"`
	TrailRecords int  `json:"trail_records"`
	Calls0       int  `json:"calls_made"`
}

// AuditCalls is one mesh at one number of callers.
type AuditCalls struct {
	Audit       bool    `json:"audit"`
	Callers     int     `json:"callers"`
	Calls       int     `json:"calls"`
	CallsPerSec float64 `json:"calls_per_sec"`
	P50         float64 `json:"p50_us"`
	P90         float64 `json:"p90_us"`
	P99         float64 `json:"p99_us"`
	CPUPerCall  float64 `json:"cpu_us_per_call"`
}

// Find returns the row of the mesh with the trail on or off, at callers.
func (a *Audit) Find(on bool, callers int) (AuditCalls, bool) {
	for _, c := range a.Calls {
		if c.Audit == on && c.Callers == callers {
			return c, true
		}
	}
	return AuditCalls{}, false
}

// Write writes v as indented JSON to path through a temporary file and a rename, so a reader
// never sees half a file.
func Write(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("figures: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".figures-*.json")
	if err != nil {
		return fmt.Errorf("figures: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	cerr := f.Close()
	if werr != nil || cerr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("figures: writing %s: %w", path, errors.Join(werr, cerr))
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("figures: %w", err)
	}
	return nil
}

// Read reads what Write wrote into v.
func Read(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("figures: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("figures: %s: %w", path, err)
	}
	return nil
}
