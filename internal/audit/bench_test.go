package audit

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
)

func benchRecord(b *testing.B) Record {
	args, err := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	if err != nil {
		b.Fatal(err)
	}
	return Record{Token: "bench", Client: "127.0.0.1:50000", Via: "rest", Origin: OriginCall, Tool: "calculator.add",
		Arguments: args, ResultBytes: 40, Duration: 300 * time.Microsecond, Decision: Allowed, Time: time.Now()}
}

// BenchmarkEncode is the writer's work per record: the digest, the line, its hash.
func BenchmarkEncode(b *testing.B) {
	for _, mode := range []string{ArgumentsDigest, ArgumentsFull} {
		b.Run(mode, func(b *testing.B) {
			w := &writer{cfg: Config{Arguments: mode}, mac: newHasher(nil), argsMac: newHasher(nil), macName: "sha256"}
			it := item{rec: benchRecord(b)}
			var buf []byte
			prev := ""
			b.ReportAllocs()
			for b.Loop() {
				buf, prev = w.appendRecord(buf[:0], it, 1, prev, 0)
			}
		})
	}
}

// BenchmarkRecord is what Record costs its caller, with the writer running (records it cannot
// keep up with are dropped, as in the mesh).
func BenchmarkRecord(b *testing.B) {
	r, err := New(Config{File: filepath.Join(b.TempDir(), "audit.jsonl")}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	rec := benchRecord(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r.Record(ctx, rec)
	}
	b.StopTimer()
	_ = r.Close()
}
