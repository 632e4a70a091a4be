package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
)

// writeTrail writes n mixed records (REST, gRPC, MCP and model calls, errors, refusals, an
// event) through a Recorder with cfg and closes it; it returns the trail's files, oldest first.
func writeTrail(t *testing.T, cfg Config, n int) []string {
	t.Helper()
	r, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range n {
		r.Record(ctx, mixedRecord(i))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := Files(cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// mixedRecord is the i-th record of a trail of every kind of call.
func mixedRecord(i int) Record {
	args, _ := structpb.NewStruct(map[string]any{"a": float64(i), "b": 3})
	vias := []string{"rest", "grpc", "mcp", "chat"}
	rec := Record{Token: "ci", Client: "203.0.113.7:5000", Via: vias[i%len(vias)], Origin: OriginCall,
		Tool: "calculator.add", Arguments: args, ResultBytes: 12, Duration: time.Duration(i) * time.Microsecond, Decision: Allowed}
	switch i % 7 {
	case 1:
		rec.Origin = OriginModel
	case 2:
		rec.IsError = true
	case 3:
		rec.Decision, rec.Rule, rec.ResultBytes = Denied, "scope", 0
	case 4:
		rec.Status = "NotFound"
	case 5:
		rec = Record{Type: "pin.quarantined", Tool: "notes.fetch", Detail: "description changed"}
	}
	return rec
}

// TestVerifyTamper: a trail of 1,000 mixed calls verifies; after one record is edited, one is
// removed or two are swapped it fails, naming the first bad record.
func TestVerifyTamper(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	files := writeTrail(t, Config{File: file, Arguments: ArgumentsDigest}, 1000)
	if len(files) != 1 {
		t.Fatalf("files %v, want one", files)
	}
	rep, err := Verify(files, nil)
	if err != nil {
		t.Fatalf("Verify of the untouched trail: %v", err)
	}
	if rep.Records != 1001 { // the start record and 1,000 records
		t.Errorf("Verify counted %d records, want 1001", rep.Records)
	}
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(orig, []byte("\n"))
	lines = lines[:len(lines)-1] // the empty piece after the last newline
	join := func(ls [][]byte) []byte { return bytes.Join(ls, nil) }
	cases := []struct {
		name     string
		tampered []byte
		line     int    // the first bad line, 1-based
		why      string // in the error
	}{
		{"one record edited", join(replace(lines, 500, bytes.Replace(lines[499], []byte(`"result_bytes":12`), []byte(`"result_bytes":13`), 1))),
			500, "its hash does not match its content"},
		{"the last record edited", join(replace(lines, 1001, bytes.Replace(lines[1000], []byte(`"time":"2`), []byte(`"time":"1`), 1))),
			1001, "its hash does not match its content"},
		{"one record removed", join(append(clone(lines[:499]), lines[500:]...)),
			500, "seq 500 follows seq 498: 1 record before it is missing"},
		{"two records swapped", join(swap(lines, 500, 501)),
			500, "seq 500 follows seq 498: records are out of order (seq 499 is at line 501)"},
		{"the start record removed", join(lines[1:]), 1, "not a start record"},
		{"a torn last line", join(replace(lines, 1001, lines[1000][:40])), 1001, "not a complete audit record"},
		{"a record rehashed after its edit", join(replace(lines, 500, rehash(t, bytes.Replace(lines[499], []byte(`"result_bytes":12`), []byte(`"result_bytes":13`), 1)))),
			501, "prev does not match the hash of line 500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if bytes.Equal(tc.tampered, orig) {
				t.Fatal("the tampering changed nothing")
			}
			f := filepath.Join(t.TempDir(), "tampered.jsonl")
			if err := os.WriteFile(f, tc.tampered, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Verify([]string{f}, nil)
			var bad *BadRecord
			if !errors.As(err, &bad) {
				t.Fatalf("Verify: %v, want a *BadRecord", err)
			}
			if bad.Line != tc.line || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), fmt.Sprintf("%s:%d", f, tc.line)) {
				t.Errorf("Verify: %v (line %d); want line %d and %q", err, bad.Line, tc.line, tc.why)
			}
		})
	}
}

// TestVerifyKey: with a key the chain is an HMAC: the trail verifies with that key only, and a
// record rehashed without it fails.
func TestVerifyKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "audit.key")
	if err := os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := writeTrail(t, Config{File: filepath.Join(dir, "audit.jsonl"), Arguments: ArgumentsDigest, KeyFile: keyFile}, 20)
	key, err := ReadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(files, key); err != nil {
		t.Errorf("Verify with the key: %v", err)
	}
	if _, err := Verify(files, nil); err == nil || !strings.Contains(err.Error(), "keyed") {
		t.Errorf("Verify without the key: %v, want an error saying the trail is keyed", err)
	}
	if _, err := Verify(files, []byte("another key of thirty-two bytes!")); err == nil || !strings.Contains(err.Error(), ":1: ") {
		t.Errorf("Verify with another key: %v, want line 1 to fail", err)
	}
}

func clone(ls [][]byte) [][]byte { return append([][]byte(nil), ls...) }

// replace is lines with line n (1-based) replaced by l.
func replace(lines [][]byte, n int, l []byte) [][]byte {
	out := clone(lines)
	if len(l) > 0 && l[len(l)-1] != '\n' && n < len(lines) {
		l = append(l, '\n')
	}
	out[n-1] = l
	return out
}

// swap is lines with lines n and n+1 (1-based) swapped.
func swap(lines [][]byte, n, m int) [][]byte {
	out := clone(lines)
	out[n-1], out[m-1] = out[m-1], out[n-1]
	return out
}

// rehash gives an edited line the hash of its new content, as someone who knows the format
// (but not a key) would.
func rehash(t *testing.T, line []byte) []byte {
	t.Helper()
	line = bytes.TrimSuffix(line, []byte("\n"))
	body, ok := bodyOf(line)
	if !ok {
		t.Fatalf("no hash in %s", line)
	}
	return append(sealed(body, newHasher(nil)), '\n')
}
