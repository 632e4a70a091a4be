package lexical

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rivo/uniseg"

	"github.com/toolmesh/toolmesh/services/retriever/store"
)

// queryRef is Query as it was before QueryParts: one segmentation per vector.
func (e *Encoder) queryRef(text string) map[string]store.SparseVector {
	tf := map[string]float64{}
	for _, t := range e.terms(text, true) {
		tf[t]++
	}
	out := map[string]store.SparseVector{VectorWords: hashed(tf)}
	if e.cfg.CharN > 0 {
		var ws []string
		for _, w := range Words(text) {
			if e.keepQueryWord(w) {
				ws = append(ws, w)
			}
		}
		out[VectorChars] = e.charsRef(ws)
	}
	if e.cfg.PairWeight > 0 {
		tf := map[string]float64{}
		e.pairs(text, tf)
		out[VectorPairs] = hashed(tf)
	}
	return out
}

// charsRef is chars without the ASCII fast path.
func (e *Encoder) charsRef(words []string) store.SparseVector {
	n := e.cfg.CharN
	tf := map[string]float64{}
	for _, w := range words {
		rs := []rune(" " + w + " ")
		if len(rs) <= n {
			tf[string(rs)]++
			continue
		}
		for i := 0; i+n <= len(rs); i++ {
			tf[string(rs[i:i+n])]++
		}
	}
	ss := 0.0
	for g, x := range tf {
		x = 1 + math.Log(x)
		tf[g] = x
		ss += x * x
	}
	if ss > 0 {
		inv := 1 / math.Sqrt(ss)
		for g := range tf {
			tf[g] *= inv
		}
	}
	return hashed(tf)
}

// partsRef is index.Parts as it was before QueryParts.
func partsRef(text string) []string {
	var out []string
	rest := text
	state := -1
	var s string
	for len(rest) > 0 {
		s, rest, state = uniseg.FirstSentenceInString(rest, state)
		for _, c := range strings.Split(s, ";") {
			if c = strings.TrimSpace(c); c != "" && len(Terms(c, true)) > 0 {
				out = append(out, c)
			}
		}
	}
	return out
}

func queryTexts(t *testing.T) []string {
	texts := []string{
		"", "a", "the of", "42", "Convert 100 Celsius to Fahrenheit; then get the weather in Paris.",
		"Find the GCD of 12 and 18. Also compute the LCM! What's the area of a triangle? Use getWeatherHTTPServer.",
		"Café déjà vu — naïve résumé. Straße; İstanbul. 東京の天気は？ Then mp3 to wav.",
		"e.g. 3;4 i.e. U.S.A. Mr. Smith went to Washington.He said hi.x; ;; ; .",
		"first sentence.\u0301second sentence \u200d; 🇫🇷🇩🇪 flags; emoji 👍🏽 done",
		"calculate_area(base=10, height=5). next: fetch_stock-price for AAPL & MSFT... DONE",
	}
	f, err := os.Open("../../../testdata/bfcl/retrieval/queries-dev.jsonl")
	if err != nil {
		t.Fatalf("the BFCL dev queries are part of the repository: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var q struct{ Query string }
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, q.Query)
	}
	return texts
}

func TestQueryPartsMatchesQuery(t *testing.T) {
	texts := queryTexts(t)
	for _, e := range []*Encoder{Default(), New(BaselineConfig(55))} {
		for _, text := range texts {
			if got, want := Parts(text), partsRef(text); !slices.Equal(got, want) {
				t.Fatalf("Parts(%q) = %q, want %q", text, got, want)
			}
			whole, parts := e.QueryParts(text)
			if want := e.queryRef(text); !reflect.DeepEqual(whole, want) {
				t.Fatalf("QueryParts(%q) whole = %v, want %v", text, whole, want)
			}
			if got := e.Query(text); !reflect.DeepEqual(got, whole) {
				t.Fatalf("Query(%q) = %v, want %v", text, got, whole)
			}
			ps := partsRef(text)
			if len(ps) < 2 {
				if parts != nil {
					t.Fatalf("QueryParts(%q): %d parts, want none", text, len(parts))
				}
				continue
			}
			if len(parts) != len(ps) {
				t.Fatalf("QueryParts(%q): %d parts, want %d", text, len(parts), len(ps))
			}
			for i, p := range ps {
				if want := e.queryRef(p); !reflect.DeepEqual(parts[i], want) {
					t.Fatalf("QueryParts(%q) part %d (%q) = %v, want %v", text, i, p, parts[i], want)
				}
			}
		}
	}
}
