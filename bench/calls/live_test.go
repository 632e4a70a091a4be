package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
)

// liveCase is a BFCL case offering get_weather(city: string) and get_time(zone: integer), whose
// ground truth calls get_weather; the query names the reply the double gives.
func liveCase(t *testing.T, query string) bfclCase {
	t.Helper()
	var c bfclCase
	err := json.Unmarshal([]byte(`{"qid":"`+query+`","query":"`+query+`","functions":[
		{"name":"get_weather","description":"Weather.","parameters":{"type":"dict","properties":{"city":{"type":"string"}},"required":["city"]}},
		{"name":"get_time","description":"Time.","parameters":{"type":"dict","properties":{"zone":{"type":"integer"}},"required":["zone"]}}],
		"ground_truth":[{"name":"get_weather","arguments":{"city":["Paris"]}}]}`), &c)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLiveSortsOutputs: every output counts as exactly one kind, and only calls that parse,
// validate and name the ground truth's functions count as whole; a plain answer does not.
// (Against the llama-server double: what is checked is the sorting, not llama-server.)
func TestLiveSortsOutputs(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	replies := map[string]llamatest.Reply{
		"whole":    {Pieces: []string{"<<function>>get_weather(city='Paris')"}},
		"plain":    {Pieces: []string{"It is sunny in Paris."}},
		"other":    {Pieces: []string{"<<function>>get_time(zone=2)"}},
		"both":     {Pieces: []string{"<<function>>get_weather(city='Paris')<<function>>get_time(zone=2)"}},
		"invalid":  {Pieces: []string{"<<function>>get_weather(city=7)"}},
		"cut":      {Pieces: []string{"<<function>>get_weather(city='Par"}, StopType: "limit"},
		"refused":  {Status: 500, Body: `{"error":{"code":500,"message":"boom","type":"server_error"}}`},
		"repeated": {Pieces: []string{"<<function>>get_weather(city='Paris')<<function>>get_weather(city='Rome')"}},
	}
	d.ScriptFunc(func(r llamatest.Request) (llamatest.Reply, bool) {
		for q, reply := range replies {
			if strings.Contains(r.Prompt, "<<question>>"+q+"\n") {
				return reply, true
			}
		}
		return llamatest.Reply{}, false
	})
	var cases []bfclCase
	for _, q := range []string{"whole", "plain", "other", "both", "invalid", "cut", "refused", "repeated"} {
		cases = append(cases, liveCase(t, q))
	}
	l, err := newLiveRun(liveOptions{URL: d.URL, Timeout: 10 * time.Second, NPredict: 64, Show: 5, Raw: true, Opts: gorilla.DefaultOptions})
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	var out strings.Builder
	l.out = &out
	got, err := l.run(t.Context(), cases)
	if err != nil {
		t.Fatal(err)
	}
	want := figures.Live{Server: "llama-server b11669-llamatest, model tiny.gguf", Path: pathRaw, CtxSize: 4096, NPredict: 64, Cases: 8,
		Whole: 2, OtherNames: 2, Invalid: 1, Unparsed: 1, Plain: 1, Errors: 1, Cut: 1}
	if got != want {
		t.Errorf("live figures\n got %+v\nwant %+v", got, want)
	}
	if last := out.String()[strings.LastIndex(strings.TrimSpace(out.String()), "\n")+1:]; last != "live: calls=2/8 whole (parse+validate+names), plain=1\n" {
		t.Errorf("headline %q; want calls=2/8 whole and plain=1 apart", last)
	}
	for _, r := range d.Requests() {
		if r.Grammar == "" || r.NPredict != 64 {
			t.Errorf("request sent n_predict %d, grammar %d bytes; want 64 and the case's grammar", r.NPredict, len(r.Grammar))
		}
	}
}

// TestLivePicks: -live-cases N decodes exactly N cases, spread over the file.
func TestLivePicks(t *testing.T) {
	for _, tc := range []struct{ cases, n, want int }{{0, 10, 10}, {3, 10, 3}, {20, 1000, 20}, {50, 10, 10}} {
		l := &liveRun{cases: tc.cases}
		got, first, last := 0, -1, -1
		for i := range tc.n {
			if l.picks(i, tc.n) {
				got++
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		if got != tc.want || last-first < tc.n*(tc.want-1)/tc.want-1 {
			t.Errorf("-live-cases %d of %d: %d picked, from %d to %d; want %d spread over the file", tc.cases, tc.n, got, first, last, tc.want)
		}
	}
}

// budgetCase offers get_weather(city) and get_time(zone), the one named long with a
// description of pad bytes; its ground truth calls get_weather.
func budgetCase(t *testing.T, query, long string, pad int) bfclCase {
	t.Helper()
	desc := map[string]string{"get_weather": "Weather of a city.", "get_time": "Time in a zone."}
	desc[long] += strings.Repeat(" Detail.", pad/8)
	fns, err := json.Marshal([]map[string]any{
		{"name": "get_weather", "description": desc["get_weather"], "parameters": map[string]any{"type": "dict",
			"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}},
		{"name": "get_time", "description": desc["get_time"], "parameters": map[string]any{"type": "dict",
			"properties": map[string]any{"zone": map[string]any{"type": "integer"}}, "required": []string{"zone"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var c bfclCase
	err = json.Unmarshal([]byte(`{"qid":"`+query[:4]+`","query":"`+query+`","functions":`+string(fns)+`,
		"ground_truth":[{"name":"get_weather","arguments":{"city":["Paris"]}}]}`), &c)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLiveThroughService: through the inference service each case's prompt meets the
// context as a question's would. A prompt that fits keeps every tool; one that does not loses
// its lowest-ranked tools (the retriever's order, not the file's), and the check says whether
// the ground truth's function was among them; a question too long for any tool is refused.
// (Against the llama-server double with a 1024-token context: what is checked is the path and
// the counting, not llama-server.)
func TestLiveThroughService(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{CtxSize: 1024})
	weather := llamatest.Reply{Pieces: []string{"<<function>>get_weather(city='Paris')"}}
	cases := []struct {
		c     bfclCase
		reply llamatest.Reply
	}{
		// Fits: both tools offered, the ground truth called.
		{budgetCase(t, "fits: the weather in Paris", "", 0), weather},
		// get_time is long and shares no word with the question: it ranks last and is
		// dropped, the ground truth stays and is called.
		{budgetCase(t, "drop: the weather in Paris", "get_time", 2000), weather},
		// get_weather is long and the question is about time: the ground truth ranks last,
		// is dropped, and the model calls the other.
		{budgetCase(t, "gtdr: the time in zone 2", "get_weather", 2000), llamatest.Reply{Pieces: []string{"<<function>>get_time(zone=2)"}}},
		// Fits, and the model answers in plain text.
		{budgetCase(t, "plan: the weather in Paris", "", 0), llamatest.Reply{Pieces: []string{"Sunny."}}},
		// The question alone is longer than the context.
		{budgetCase(t, "long: the weather in Paris"+strings.Repeat(" really", 200), "", 0), weather},
	}
	d.ScriptFunc(func(r llamatest.Request) (llamatest.Reply, bool) {
		for _, tc := range cases {
			if strings.Contains(r.Prompt, "<<question>>"+tc.c.Query+"\n") {
				return tc.reply, true
			}
		}
		return llamatest.Reply{}, false
	})
	var in []bfclCase
	for _, tc := range cases {
		in = append(in, tc.c)
	}
	l, err := newLiveRun(liveOptions{URL: d.URL, Timeout: 10 * time.Second, NPredict: 64, Show: 5, Opts: gorilla.DefaultOptions})
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	var out strings.Builder
	l.out = &out
	got, err := l.run(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := figures.Live{Server: "llama-server b11669-llamatest, model tiny.gguf", Path: pathService, CtxSize: 1024, NPredict: 64, Cases: 5,
		Whole: 2, OtherNames: 1, Plain: 1, Refused: 1, FitWhole: 2, Dropped: 2, ToolsDropped: 2, DroppedGroundTruth: 1,
		// The two cases with a long tool and the one with a long question: without the budget
		// llama-server would refuse all three.
		WholeOverCtx: 3}
	if got.LongestWhole <= 1024 {
		t.Errorf("the longest whole prompt took %d tokens; want more than the context of 1024", got.LongestWhole)
	}
	want.LongestWhole = got.LongestWhole
	if got != want {
		t.Errorf("live figures\n got %+v\nwant %+v\n%s", got, want, out.String())
	}
	for _, line := range []string{
		"live: prompt budget: 2 cases fit with every tool, 2 had tools dropped to fit (2 tools; a ground-truth function among them in 1 cases), 1 refused even with every tool dropped, 0 unknown (the request failed)",
		"live dropped: drop: 1 of 2 tools dropped: get_time\n",
		"live dropped: gtdr: 1 of 2 tools dropped: get_weather (the ground truth's get_weather among them)",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
	for _, r := range d.Requests() {
		if r.Grammar == "" || r.NPredict < 32 || r.NPredict > 64 {
			t.Errorf("request sent n_predict %d, grammar %d bytes; want the service's budget (32 to 64) and a grammar", r.NPredict, len(r.Grammar))
		}
	}
}

// TestLiveCallsOnlyNeedsRaw: the service's grammars always allow a plain answer, so
// -calls-only without -raw is refused rather than silently ignored.
func TestLiveCallsOnlyNeedsRaw(t *testing.T) {
	opts := gorilla.DefaultOptions
	opts.CallsOnly = true
	if _, err := newLiveRun(liveOptions{URL: "http://127.0.0.1:1", Opts: opts}); err == nil || !strings.Contains(err.Error(), "-raw") {
		t.Errorf("newLiveRun(-calls-only, service) = %v; want an error naming -raw", err)
	}
}
