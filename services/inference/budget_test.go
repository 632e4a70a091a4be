package inference

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/services/inference/gorilla/gbnf"
)

// budgetTools are tools whose schemas use what the grammar enforces (types, enums, required
// keys, nesting, free-form values), so every call the grammar admits must validate.
var budgetTools = []struct{ id, schema string }{
	{"calculator.add", `{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`},
	{"weather.forecast", `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},
		"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}`},
	{"mail.send", `{"type":"object","properties":{"to":{"type":"string"},"cc":{"type":"string"},"subject":{"type":"string"},
		"body":{"type":"string"},"urgent":{"type":"boolean"}},"required":["to","subject","body"]}`},
	{"files.write", `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"},
		"mode":{"type":["string","null"]}},"required":["path","content"]}`},
	{"db.query", `{"type":"object","properties":{"table":{"type":"string"},
		"where":{"type":"array","items":{"type":"object","properties":{"field":{"type":"string"},"op":{"enum":["=","<",">"]},
		"value":{"anyOf":[{"type":"string"},{"type":"number"},{"type":"null"}]}},"required":["field","op","value"],"additionalProperties":false}},
		"limit":{"type":"integer"}},"required":["table"]}`},
	{"stats.describe", `{"type":"object","properties":{"data":{"type":"array","items":{"type":"number"}},
		"weights":{"type":"object","additionalProperties":{"type":"number"}}},"required":["data"]}`},
	{"kv.put", `{"type":"object","properties":{"key":{"type":"string"},"value":{}},"required":["key","value"]}`},
	{"matrix.solve", `{"type":"object","properties":{"rows":{"type":"array","items":{"type":"array","items":{"type":"integer"}}}},"required":["rows"]}`},
	{"notes.list", `{"type":"object","properties":{}}`},
}

// budgetToolSet is the i-th of many varied tool sets: rotating runs of the tools above.
func budgetToolSet(t *testing.T, i int) ([]*toolmeshv1.ScoredTool, map[string]*jsonschema.Schema) {
	t.Helper()
	n := 1 + i%4
	comp := jsonschema.NewCompiler()
	schemas := map[string]*jsonschema.Schema{}
	var out []*toolmeshv1.ScoredTool
	for j := 0; j < n; j++ {
		bt := budgetTools[(i*3+j*2)%len(budgetTools)]
		if schemas[bt.id] != nil {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(bt.schema), &m); err != nil {
			t.Fatalf("%s: %v", bt.id, err)
		}
		st, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		server, name, _ := strings.Cut(bt.id, ".")
		out = append(out, &toolmeshv1.ScoredTool{Score: float64(10 - j), Tool: &toolmeshv1.Tool{
			Id: bt.id, Server: server, Name: name, Description: "The " + name + " tool of " + server + ".", InputSchema: st}})
		url := "mem://" + bt.id + ".json"
		if err := comp.AddResource(url, m); err != nil {
			t.Fatal(err)
		}
		if schemas[bt.id], err = comp.Compile(url); err != nil {
			t.Fatal(err)
		}
	}
	return out, schemas
}

// TestGenerateNeverCutOffOnRealServer runs many Generate calls under the grammar on a real
// llama-server with the tiny random-weight model, whose noise fills strings, lists and call
// sequences as far as the grammar lets it: with the grammar sized to max_tokens, every answer
// must be calls that parse and validate against their tools' schemas, or a plain answer, and
// never an output cut off at max_tokens.
func TestGenerateNeverCutOffOnRealServer(t *testing.T) {
	// Left alone, the noise hardly ever starts with "<<" (one character of about 200 allowed
	// at first), so it would only ever answer: a bias on "<" makes it call tools often.
	srv := llamatest.StartServer(t, llamatest.ServerOptions{Args: llamatest.CallBias()})
	s := newTestService(t, srv.URL)
	s.cfg.LLM.Sampling.Temperature = new(1.0) // noise that explores the grammar, not one path
	budgets := []int32{16, 40, 64, 100, 130, 160, 256}
	calls, answers, longest := 0, 0, 0
	for i := range 50 {
		tools, schemas := budgetToolSet(t, i)
		maxTokens := budgets[i%len(budgets)]
		resp, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{
			Query: fmt.Sprintf("Request %d: do what the tools can.", i), Tools: tools, MaxTokens: maxTokens})
		if err != nil {
			t.Fatalf("generate %d (max_tokens %d, %d tools): %v", i, maxTokens, len(tools), err)
		}
		// A token is at least one byte, and the grammar leaves room for the end-of-text token.
		// Bytes that never formed a character come back as one U+FFFD per run: count it one.
		out := resp.GetRawOutput()
		if n := len(out) - 2*strings.Count(out, "\uFFFD"); n > int(maxTokens)-1 {
			t.Errorf("generate %d: %d bytes of output for max_tokens %d: the grammar let it run to the limit: %q", i, n, maxTokens, out)
		}
		longest = max(longest, len(out))
		if len(resp.GetCalls()) == 0 {
			answers++
			if resp.GetAnswer() == "" && strings.TrimSpace(out) != "" {
				t.Errorf("generate %d: neither calls nor an answer from %q", i, out)
			}
			continue
		}
		for _, c := range resp.GetCalls() {
			calls++
			sch, ok := schemas[c.GetToolId()]
			if !ok {
				t.Errorf("generate %d: call to %q, which was not offered", i, c.GetToolId())
				continue
			}
			if err := sch.Validate(c.GetArguments().AsMap()); err != nil {
				t.Errorf("generate %d: call to %s does not validate: %v\noutput %q", i, c.GetToolId(), err, out)
			}
		}
	}
	t.Logf("50 generations: %d calls, %d plain answers, longest output %d bytes", calls, answers, longest)
	if calls == 0 {
		t.Error("the noise model made no call in 50 generations: the test no longer exercises the calls' limits")
	}
}

// TestGenerateSizesGrammarToMaxTokens: the grammar sent with each completion admits nothing
// longer than n_predict - 1 bytes, whatever max_tokens the request asks for.
func TestGenerateSizesGrammarToMaxTokens(t *testing.T) {
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	d.SetDefault(llamatest.Reply{Pieces: []string{"Five."}})
	s := newTestService(t, d.URL) // n_predict 64 when max_tokens is 0
	tools, _ := budgetToolSet(t, 3)
	for _, tc := range []struct {
		maxTokens int32
		nPredict  int
	}{{0, 64}, {8, 8}, {32, 32}, {300, 300}, {2000, 2000}} {
		if _, err := s.Generate(t.Context(), &toolmeshv1.GenerateRequest{Query: "q", Tools: tools, MaxTokens: tc.maxTokens}); err != nil {
			t.Fatalf("max_tokens %d: %v", tc.maxTokens, err)
		}
		reqs := d.Requests()
		last := reqs[len(reqs)-1]
		g, err := gbnf.Parse(last.Grammar)
		if err != nil {
			t.Fatalf("max_tokens %d: grammar: %v", tc.maxTokens, err)
		}
		n, finite := g.MaxLen("root")
		if last.NPredict != tc.nPredict || !finite || n > tc.nPredict-1 {
			t.Errorf("max_tokens %d: n_predict %d, grammar admits %d bytes (finite %v); want n_predict %d and at most %d bytes",
				tc.maxTokens, last.NPredict, n, finite, tc.nPredict, tc.nPredict-1)
		}
	}
}
