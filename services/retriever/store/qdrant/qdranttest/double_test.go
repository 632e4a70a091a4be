package qdranttest

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	qc "github.com/qdrant/go-client/qdrant"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// The double preprocesses Cosine vectors as Qdrant does (cosine_preprocess in
// lib/segment/src/spaces/simple.rs and is_length_zero_or_normalized in lib/segment/src/spaces/tools.rs):
// divided by the length in float32, except a vector whose squared length is below float32's
// epsilon or already within 1e-6 of 1, which is kept as it is.
func TestNormalizeMatchesQdrant(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in, out []float32
	}{
		{"not unit", []float32{3, 4}, []float32{0.6, 0.8}},
		{"long", []float32{0, 0, 12.5}, []float32{0, 0, 1}},
		{"squared length within 1e-6 of 1: kept", []float32{1, 0.0005}, []float32{1, 0.0005}},
		{"squared length below epsilon: kept", []float32{1e-4, 0}, []float32{1e-4, 0}},
		{"zero: kept", []float32{0, 0}, []float32{0, 0}},
	} {
		got := slices.Clone(tc.in)
		normalize(got)
		if !slices.Equal(got, tc.out) {
			t.Errorf("%s: normalize(%v) = %v, want %v", tc.name, tc.in, got, tc.out)
		}
	}
}

// Qdrant's RRF does not break ties: it collects the fused points in a hash map and sorts them
// with an unstable sort by score alone (rrf_scoring in
// lib/segment/src/common/reciprocal_rank_fusion.rs), so tied points come in any order, and which
// of them survive a limit varies. The double shuffles them so that callers relying on an order
// fail in its tests too.
func TestRRFShufflesTies(t *testing.T) {
	first := map[uint64]int{}
	for range 64 {
		got := rrf([][]scored{list(1, 3), list(2, 4)}, DefaultRRFK, nil)
		if len(got) != 4 || got[0].score != got[1].score || got[2].score != got[3].score || got[1].score <= got[2].score {
			t.Fatalf("got %v, want two pairs of tied points", got)
		}
		first[got[0].p.key.num]++
	}
	if first[1] == 0 || first[2] == 0 {
		t.Errorf("first of two tied points over 64 fusions: %v, want each of 1 and 2 sometimes", first)
	}
}

// client is a go-client on d, closed when the test ends.
func client(t *testing.T, d *Double) *qc.Client {
	t.Helper()
	host, port, err := net.SplitHostPort(d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	c, err := qc.NewClient(&qc.Config{Host: host, Port: p, SkipCompatibilityCheck: true, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sparseCollection creates collection "c" with one IDF sparse vector "w" and upserts points
// 1…len(terms), point i having the terms terms[i-1] (weight 1 each).
func sparseCollection(t *testing.T, c *qc.Client, terms ...[]uint32) {
	t.Helper()
	err := c.CreateCollection(t.Context(), &qc.CreateCollection{
		CollectionName:      "c",
		VectorsConfig:       qc.NewVectorsConfigMap(map[string]*qc.VectorParams{}),
		SparseVectorsConfig: qc.NewSparseVectorsConfig(map[string]*qc.SparseVectorParams{"w": {Modifier: qc.Modifier_Idf.Enum()}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	var pts []*qc.PointStruct
	for i, idx := range terms {
		vals := make([]float32, len(idx))
		for j := range vals {
			vals[j] = 1
		}
		pts = append(pts, &qc.PointStruct{Id: qc.NewIDNum(uint64(i + 1)), Vectors: qc.NewVectorsMap(map[string]*qc.Vector{"w": qc.NewVectorSparse(idx, vals)})})
	}
	if _, err := c.Upsert(t.Context(), &qc.UpsertPoints{CollectionName: "c", Wait: qc.PtrOf(true), Points: pts}); err != nil {
		t.Fatal(err)
	}
}

func sparseScore(t *testing.T, c *qc.Client, term uint32) float64 {
	t.Helper()
	res, err := c.Query(t.Context(), &qc.QueryPoints{CollectionName: "c", Query: qc.NewQuerySparse([]uint32{term}, []float32{1}), Using: qc.PtrOf("w"), Limit: qc.PtrOf(uint64(1))})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("query for term %d: got %d points, want 1", term, len(res))
	}
	return float64(res[0].GetScore())
}

// A deleted point keeps counting in Qdrant's IDF: deleting marks it deleted in the id tracker
// and leaves its vectors, and so its postings, in the segment (delete_point_internal in
// lib/segment/src/segment/segment_ops.rs: "propagate point deletion to also delete its vectors"
// is disabled), and the statistics are the postings' lengths and the inverted index's vector
// count (fill_idf_statistics in lib/segment/src/index/sparse_index/sparse_vector_index.rs). They
// stop counting once the optimizer rebuilds the segment, which the double's Vacuum stands for.
func TestDeletedPointsCountInIDF(t *testing.T) {
	d := Start(t)
	c := client(t, d)
	// Term 1 in points 1 and 2, term 2 in point 3 only.
	sparseCollection(t, c, []uint32{1}, []uint32{1}, []uint32{2})
	idf := func(n, df float64) float64 { return math.Log(1 + (n-df+0.5)/(df+0.5)) }
	if got, want := sparseScore(t, c, 1), idf(3, 2); math.Abs(got-want) > 1e-6 {
		t.Fatalf("before the delete: got %v, want %v", got, want)
	}
	if _, err := c.Delete(t.Context(), &qc.DeletePoints{CollectionName: "c", Wait: qc.PtrOf(true), Points: qc.NewPointsSelector(qc.NewIDNum(2))}); err != nil {
		t.Fatal(err)
	}
	if got, want := sparseScore(t, c, 1), idf(3, 2); math.Abs(got-want) > 1e-6 {
		t.Errorf("after deleting point 2: got %v, want %v (N and df still count the deleted point)", got, want)
	}
	d.Vacuum()
	if got, want := sparseScore(t, c, 1), idf(2, 1); math.Abs(got-want) > 1e-6 {
		t.Errorf("after the vacuum: got %v, want %v", got, want)
	}
}

// An update Qdrant accepted is applied even when its client gave up waiting, in the order the
// updates came; reads in the meantime do not see it.
func TestStalledUpdatesAppliedAfterTheClientGaveUp(t *testing.T) {
	d := Start(t)
	c := client(t, d)
	sparseCollection(t, c, []uint32{1})
	d.StallUpdates()

	ids := func() []uint64 {
		t.Helper()
		pts, err := c.Scroll(t.Context(), &qc.ScrollPoints{CollectionName: "c", Limit: qc.PtrOf(uint32(10))})
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, p := range pts {
			out = append(out, p.GetId().GetNum())
		}
		return out
	}
	upsert := func(id uint64, wait bool, timeout time.Duration) (*qc.UpdateResult, error) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		return c.Upsert(ctx, &qc.UpsertPoints{CollectionName: "c", Wait: qc.PtrOf(wait), Points: []*qc.PointStruct{
			{Id: qc.NewIDNum(id), Vectors: qc.NewVectorsMap(map[string]*qc.Vector{"w": qc.NewVectorSparse([]uint32{1}, []float32{1})})},
		}})
	}
	if _, err := upsert(2, true, 100*time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("upsert while stalled: got %v, want DeadlineExceeded", err)
	}
	if res, err := upsert(3, false, time.Second); err != nil || res.GetStatus() != qc.UpdateStatus_Acknowledged {
		t.Fatalf("upsert without wait while stalled: got %v, %v, want Acknowledged", res, err)
	}
	// Delete point 2 after it: applied after the upsert, so point 2 ends up gone.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	_, err := c.Delete(ctx, &qc.DeletePoints{CollectionName: "c", Wait: qc.PtrOf(true), Points: qc.NewPointsSelector(qc.NewIDNum(2))})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("delete while stalled: got %v, want DeadlineExceeded", err)
	}
	if got := ids(); !slices.Equal(got, []uint64{1}) {
		t.Errorf("points while stalled: got %v, want [1]", got)
	}
	if n := d.Queued(); n != 3 {
		t.Errorf("queued: got %d, want 3", n)
	}

	// A waiting call is answered once its update is applied.
	done := make(chan error, 1)
	go func() {
		res, err := upsert(4, true, 5*time.Second)
		if err == nil && res.GetStatus() != qc.UpdateStatus_Completed {
			err = fmt.Errorf("status %v, want Completed", res.GetStatus())
		}
		done <- err
	}()
	for d.Queued() < 4 {
		time.Sleep(time.Millisecond)
	}
	if n := d.ResumeUpdates(); n != 4 {
		t.Errorf("ResumeUpdates applied %d updates, want 4", n)
	}
	if err := <-done; err != nil {
		t.Errorf("upsert waiting through the stall: %v", err)
	}
	if got := ids(); !slices.Equal(got, []uint64{1, 3, 4}) {
		t.Errorf("points after the stall: got %v, want [1 3 4]", got)
	}
}

// DeletePayload and Delete take a filter as well as ids; a filter that matches nothing changes
// nothing.
func TestSelectByFilter(t *testing.T) {
	d := Start(t)
	c := client(t, d)
	sparseCollection(t, c)
	var pts []*qc.PointStruct
	for id := range uint64(3) {
		pts = append(pts, &qc.PointStruct{Id: qc.NewIDNum(id), Vectors: qc.NewVectorsMap(map[string]*qc.Vector{}),
			Payload: map[string]*qc.Value{"k": qc.NewValueString("v"), "x": qc.NewValueString("y")}})
	}
	if _, err := c.Upsert(t.Context(), &qc.UpsertPoints{CollectionName: "c", Wait: qc.PtrOf(true), Points: pts}); err != nil {
		t.Fatal(err)
	}
	has := func(ids ...uint64) *qc.PointsSelector {
		var conds []*qc.PointId
		for _, id := range ids {
			conds = append(conds, qc.NewIDNum(id))
		}
		return qc.NewPointsSelectorFilter(&qc.Filter{Must: []*qc.Condition{qc.NewHasID(conds...)}})
	}
	for _, sel := range []*qc.PointsSelector{has(99), has(1)} {
		if _, err := c.DeletePayload(t.Context(), &qc.DeletePayloadPoints{CollectionName: "c", Wait: qc.PtrOf(true), Keys: []string{"k"}, PointsSelector: sel}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sel := range []*qc.PointsSelector{has(99), has(2)} {
		if _, err := c.Delete(t.Context(), &qc.DeletePoints{CollectionName: "c", Wait: qc.PtrOf(true), Points: sel}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Scroll(t.Context(), &qc.ScrollPoints{CollectionName: "c", WithPayload: qc.NewWithPayload(true)})
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, p := range got {
		desc = append(desc, fmt.Sprintf("%d:%d", p.GetId().GetNum(), len(p.GetPayload())))
	}
	if want := []string{"0:2", "1:1"}; !slices.Equal(desc, want) {
		t.Errorf("points (id:payload keys) after deleting point 1's key k and point 2: got %v, want %v", desc, want)
	}
}
