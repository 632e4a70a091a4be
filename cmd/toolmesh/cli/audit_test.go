package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/audit"
)

// writeAuditTrail writes a trail of 1,000 mixed call records (allowed, refused, failed, over
// every front) and returns its file.
func writeAuditTrail(t *testing.T, dir string, cfg audit.Config) string {
	t.Helper()
	cfg.File = filepath.Join(dir, "audit.jsonl")
	r, err := audit.New(cfg, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	vias := []string{"rest", "grpc", "mcp", "chat"}
	for i := range 1000 {
		args, _ := structpb.NewStruct(map[string]any{"a": i, "b": 3})
		rec := audit.Record{Token: "ci", Client: "127.0.0.1:5000", Via: vias[i%4], Origin: audit.OriginCall, Tool: "calculator.add",
			Arguments: args, ResultBytes: 9, Decision: audit.Allowed}
		switch i % 5 {
		case 1:
			rec.Decision, rec.Rule = audit.Denied, "scope"
		case 2:
			rec.Origin, rec.IsError = audit.OriginModel, true
		case 3:
			rec.Status = "DeadlineExceeded"
		}
		r.Record(context.Background(), rec)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	return cfg.File
}

// TestAuditVerify runs `toolmesh audit verify` on a trail of 1,000 mixed calls: it passes;
// after one record is edited, one removed or two swapped it fails (exit 1) naming the first bad
// record's line and number.
func TestAuditVerify(t *testing.T) {
	dir := t.TempDir()
	file := writeAuditTrail(t, dir, audit.Config{})
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	lines = lines[:len(lines)-1]
	tampered := func(name string, ls []string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(strings.Join(ls, "")), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	edited := append([]string(nil), lines...)
	edited[300] = strings.Replace(edited[300], `"token":"ci"`, `"token":"root"`, 1)
	removed := append(append([]string(nil), lines[:600]...), lines[601:]...)
	swapped := append([]string(nil), lines...)
	swapped[800], swapped[801] = swapped[801], swapped[800]

	cases := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"the trail holds", []string{"audit", "verify", file}, 0, "ok: 1001 records in 1 file", ""},
		{"an edited record", []string{"audit", "verify", tampered("edited.jsonl", edited)}, 1, "",
			"edited.jsonl:301: record seq 300: its hash does not match its content: the record was edited"},
		{"a removed record", []string{"audit", "verify", tampered("removed.jsonl", removed)}, 1, "",
			"removed.jsonl:601: record seq 601: seq 601 follows seq 599: 1 record before it is missing (removed)"},
		{"two records swapped", []string{"audit", "verify", tampered("swapped.jsonl", swapped)}, 1, "",
			"swapped.jsonl:801: record seq 801: seq 801 follows seq 799: records are out of order (seq 800 is at line 802)"},
		{"no file", []string{"audit", "verify"}, 2, "", "name the trail's files"},
		{"a file that is not there", []string{"audit", "verify", filepath.Join(dir, "nope.jsonl")}, 1, "", "no such file"},
		{"no subcommand", []string{"audit"}, 2, "", "toolmesh audit verify"},
		{"json", []string{"audit", "verify", "--json", file}, 0, `"records": 1001`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), tc.args, nil, &stdout, &stderr)
			if code != tc.wantCode || !strings.Contains(stdout.String(), tc.wantStdout) || !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("toolmesh %v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					tc.args, code, stdout.String(), stderr.String(), tc.wantCode, tc.wantStdout, tc.wantStderr)
			}
		})
	}
}

// TestAuditVerifyRotated: --rotated verifies the rotated files before FILE too, and the joins;
// a keyed trail needs its key.
func TestAuditVerifyRotated(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "audit.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	file := writeAuditTrail(t, dir, audit.Config{MaxBytes: 64 << 10, KeyFile: key})
	files, err := audit.Files(file)
	if err != nil || len(files) < 3 {
		t.Fatalf("files %v, %v: want several", files, err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"audit", "verify", "--rotated", "--key-file", key, "--json", file}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("verify --rotated: exit %d: %s", code, stderr.String())
	}
	var rep struct {
		Files   int  `json:"files"`
		Records int  `json:"records"`
		Keyed   bool `json:"keyed"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Files != len(files) || rep.Records != 1000+len(files) || !rep.Keyed {
		t.Errorf("report %s (%v), want %d files, %d records, keyed", stdout.String(), err, len(files), 1000+len(files))
	}
	stderr.Reset()
	if code := Main(context.Background(), []string{"audit", "verify", file}, nil, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "keyed") {
		t.Errorf("verify without the key: exit %d, %q", code, stderr.String())
	}
}

// TestAuditDigest: `toolmesh audit digest` gives the digest a record holds of the same
// arguments, however their JSON is spaced and ordered.
func TestAuditDigest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	r, err := audit.New(audit.Config{File: file}, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	args, _ := structpb.NewStruct(map[string]any{"b": 3, "a": "x"})
	r.Record(context.Background(), audit.Record{Tool: "calculator.add", Arguments: args, Decision: audit.Allowed})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(file)
	var rec struct {
		Digest string `json:"args_digest"`
	}
	_ = json.Unmarshal(bytes.SplitAfter(data, []byte("\n"))[1], &rec)
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"audit", "digest", `{ "a": "x",  "b": 3 }`}, nil, &stdout, &stderr); code != 0 || strings.TrimSpace(stdout.String()) != rec.Digest || rec.Digest == "" {
		t.Errorf("audit digest: exit %d %q %q, want the record's %q", code, stdout.String(), stderr.String(), rec.Digest)
	}
}
