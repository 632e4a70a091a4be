package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
	"github.com/toolmesh/toolmesh/services/inference/llama/llamatest"
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
	l := newLiveRun(d.URL, "", 10*time.Second, 64, 0, 5, gorilla.DefaultOptions)
	var out strings.Builder
	l.out = &out
	got, err := l.run(t.Context(), cases)
	if err != nil {
		t.Fatal(err)
	}
	want := figures.Live{Server: "llama-server b11669-llamatest, model tiny.gguf", NPredict: 64, Cases: 8,
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
