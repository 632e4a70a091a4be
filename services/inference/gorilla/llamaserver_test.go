package gorilla

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/services/inference/gorilla/gbnf"
)

// TestGrammarsLoadInLlamaServer sends the grammars FuzzGrammar builds from its seeds and its
// corpus in testdata/fuzz (not what a fuzzing run finds beyond them) to a real llama-server
// (TOOLMESH_LLAMA_SERVER, from ./scripts/llamaserver) with a short completion: llama-server
// refuses a grammar its parser cannot load, so each must be accepted, and what the tiny model
// writes under it (biased towards calls) must be a sentence or a prefix of one for package gbnf
// as well. A grammar
// llama.cpp cannot parse is sent first, to show that a refusal is seen.
func TestGrammarsLoadInLlamaServer(t *testing.T) {
	srv := llamatest.StartServer(t, llamatest.ServerOptions{Args: llamatest.CallBias()})
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()

	if content, err := complete(hc, srv.URL, "root ::= undefined-rule"); err == nil {
		t.Fatalf("llama-server accepted a grammar naming an undefined rule (wrote %q): the check below could not fail", content)
	} else {
		t.Logf("an unloadable grammar is refused: %v", err)
	}

	seeds := append(grammarSeeds(t), fuzzCorpus(t, "FuzzGrammar")...)
	sent, calls, unknown, start := 0, 0, 0, time.Now()
	for _, s := range seeds {
		tools, _, opts, ok := grammarInput(s.id, s.schema)
		if !ok {
			continue
		}
		for _, o := range opts {
			cat, err := BuildWith(tools, o)
			if err != nil {
				continue // FuzzGrammar says which build errors are allowed
			}
			sent++
			content, err := complete(hc, srv.URL, cat.Grammar())
			if err != nil {
				t.Errorf("%s %+v: %v\n%s", s.id, o, err, cat.Grammar())
				continue
			}
			if strings.HasPrefix(content, fnDelim) {
				calls++
			}
			g, err := gbnf.Parse(cat.Grammar())
			if err != nil {
				t.Errorf("%s %+v: llama-server loads the grammar, gbnf does not: %v", s.id, o, err)
				continue
			}
			if strings.ContainsRune(content, utf8.RuneError) {
				// llama.cpp's grammar takes any lead byte's length of bytes as one code point,
				// valid UTF-8 or not, and llama-server's JSON replaces what is not valid with
				// U+FFFD: the bytes the model wrote are not known, so they cannot be checked.
				unknown++
				continue
			}
			if ok, at, err := g.Match(content); err != nil || !ok && at < len(content) {
				t.Errorf("%s %+v: llama-server wrote %q under the grammar; gbnf refuses it at byte %d (%v)", s.id, o, content, at, err)
			}
		}
	}
	t.Logf("%d grammars from %d seeds loaded by llama-server in %v; %d outputs began a call, %d held invalid UTF-8 (not matched)",
		sent, len(seeds), time.Since(start).Round(time.Millisecond), calls, unknown)
	if sent < 3*len(seeds)/2 {
		t.Errorf("only %d grammars from %d seeds; FuzzGrammar's builds fail far more often than they should", sent, len(seeds))
	}
}

// fuzzCorpus reads the inputs the fuzzer saved under testdata/fuzz/NAME (Go's "go test fuzz
// v1" files of two strings).
func fuzzCorpus(t *testing.T, name string) []grammarSeed {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", name, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []grammarSeed
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		var vals []string
		for _, l := range lines[1:] {
			inner, ok := strings.CutPrefix(l, "string(")
			inner, ok2 := strings.CutSuffix(inner, ")")
			v, err := strconv.Unquote(inner)
			if !ok || !ok2 || err != nil {
				t.Fatalf("%s: %q is not a string( ) line", f, l)
			}
			vals = append(vals, v)
		}
		if lines[0] != "go test fuzz v1" || len(vals) != 2 {
			t.Fatalf("%s: want a go test fuzz v1 file of two strings", f)
		}
		out = append(out, grammarSeed{vals[0], vals[1]})
	}
	return out
}

// complete asks for a few tokens under grammar and returns what was written, or llama-server's
// error.
func complete(hc *http.Client, base, grammar string) (string, error) {
	body, err := json.Marshal(map[string]any{
		"prompt": "### Instruction: what can you do?\n### Response: ", "grammar": grammar,
		"n_predict": 48, "temperature": 0, "seed": 1, "cache_prompt": false,
	})
	if err != nil {
		return "", err
	}
	resp, err := hc.Post(base+"/completion", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("llama-server refused the request: %s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	var out struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("llama-server's reply: %w", err)
	}
	return out.Content, nil
}
