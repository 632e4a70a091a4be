package lexical

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kljensen/snowball/english"
)

func TestSplitASCIIMatchesRunes(t *testing.T) {
	const alphabet = "aZ9_.-'/ bY0xQ7HTTPServer"
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		n := 1 + rng.IntN(12)
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		w := string(b)
		if got, want := splitASCII(w), splitRunes(w); !slices.Equal(got, want) {
			t.Fatalf("splitASCII(%q) = %q, rune path %q", w, got, want)
		}
	}
}

func TestStemCacheMatchesSnowball(t *testing.T) {
	for _, w := range []string{"running", "generously", "discovered", "discoverer", "celsius", "a", "running"} {
		if got, want := stem(w), english.Stem(w, true); got != want {
			t.Errorf("stem(%q) = %q, want %q", w, got, want)
		}
	}
}
