package qdranttest

import (
	"math"
	"testing"

	qc "github.com/qdrant/go-client/qdrant"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func list(ids ...uint64) []scored {
	out := make([]scored, len(ids))
	for i, id := range ids {
		out[i] = scored{p: &point{key: pointKey{num: id}}}
	}
	return out
}

// The double's RRF gives the numbers of Qdrant's own unit tests
// (lib/segment/src/common/reciprocal_rank_fusion.rs: test_rrf_scoring, test_rrf_scoring_zero_weight).
func TestRRFMatchesQdrant(t *testing.T) {
	got := rrf([][]scored{list(2, 1), list(1, 2, 3), list(5, 3, 1)}, DefaultRRFK, nil)
	want := []struct {
		id    uint64
		score float64
	}{{1, 1.0833334}, {2, 0.8333334}, {3, 0.5833334}, {5, 0.5}}
	if len(got) != len(want) {
		t.Fatalf("got %d points, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].p.key.num != w.id || math.Abs(got[i].score-w.score) > 1e-6 {
			t.Errorf("rank %d: got point %d score %.7f, want point %d score %.7f", i, got[i].p.key.num, got[i].score, w.id, w.score)
		}
	}
	zero := rrf([][]scored{list(1), list(2)}, DefaultRRFK, []float32{1, 0})
	if zero[0].p.key.num != 1 || zero[0].score != 0.5 || zero[1].score != 0 {
		t.Errorf("zero weight: got %v, want point 1 at 0.5 and point 2 at 0", zero)
	}
}

func TestIDF(t *testing.T) {
	c := &collection{sparse: map[string]qc.Modifier{"w": qc.Modifier_Idf}, points: map[pointKey]*point{}}
	for i, idx := range [][]uint32{{1, 2}, {2}, {2}, {3}} {
		k := pointKey{num: uint64(i)}
		c.points[k] = &point{key: k, sparse: map[string]sparseVec{"w": {indices: idx, values: make([]float32, len(idx))}}}
		for j := range idx {
			c.points[k].sparse["w"].values[j] = 1
		}
	}
	// A point without the sparse vector does not count in N.
	c.points[pointKey{num: 9}] = &point{key: pointKey{num: 9}}
	w := map[uint32]float64{1: 1, 2: 2, 7: 1}
	c.applyIDF("w", w)
	idf := func(n, df float64) float64 { return math.Log(1 + (n-df+0.5)/(df+0.5)) }
	for idx, want := range map[uint32]float64{1: idf(4, 1), 2: 2 * idf(4, 3), 7: idf(4, 0)} {
		if math.Abs(w[idx]-want) > 1e-12 {
			t.Errorf("term %d: got %v, want %v", idx, w[idx], want)
		}
	}
}

func TestPointKeyOrder(t *testing.T) {
	num := pointKey{num: 1 << 40}
	lo, err := keyOf(qc.NewIDUUID("0000000A-0000-0000-0000-000000000000"))
	if err != nil {
		t.Fatal(err)
	}
	hi, err := keyOf(qc.NewIDUUID("f0000000000000000000000000000000"))
	if err != nil {
		t.Fatal(err)
	}
	if lo.uuid != "0000000a-0000-0000-0000-000000000000" {
		t.Errorf("canonical UUID: got %q", lo.uuid)
	}
	if num.compare(lo) >= 0 || lo.compare(hi) >= 0 {
		t.Errorf("order: want numeric ids before UUIDs, UUIDs by value")
	}
	if _, err := keyOf(qc.NewIDUUID("not-a-uuid")); err == nil {
		t.Error("bad UUID: got no error")
	}
}
