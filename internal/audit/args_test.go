package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// TestCanonicalJSON: the digest is taken over the arguments as encoding/json writes them
// (keys sorted, no spaces, no HTML escaping), so anyone can compute it again from the JSON.
func TestCanonicalJSON(t *testing.T) {
	cases := []map[string]any{
		{},
		{"b": 3, "a": "x"},
		{"z": 1, "a": []any{1.5, 1e21, 0.000001, 1e-7, -0.0, true, nil, "<&>\u2028\x01\"\\"}},
		{"nested": map[string]any{"y": map[string]any{}, "x": []any{}}, "n": 123456789.123, "ü": "ünïcode"},
		{"big": 12345678901234567890.0, "neg": -42},
	}
	for _, c := range cases {
		s, err := structpb.NewStruct(c)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s.AsMap()); err != nil {
			t.Fatal(err)
		}
		got := appendArgs(nil, s, false)
		if w := bytes.TrimSuffix(want.Bytes(), []byte("\n")); !bytes.Equal(got, w) {
			t.Errorf("canonical JSON of %v:\n got %s\nwant %s", c, got, w)
		}
	}
}

// TestArguments: by default a record holds the arguments' digest only; with arguments full it
// holds them too, with what looks like a secret masked (values under secret-like keys, a URL's
// credentials, bearer credentials); the digest is always of the arguments as given.
func TestArguments(t *testing.T) {
	args := map[string]any{
		"query":    "select 1",
		"password": "hunter2",
		"nested": map[string]any{
			"api_key": "k-123",
			"URL":     "https://user:pw@example.com/x?token=abc&page=2",
			"Author":  "Ada",
		},
		"list":        []any{"Bearer abcdefghijkl", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "plain"},
		"X-Api-Token": 42,
	}
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(appendArgs(nil, s, false))
	wantDigest := "sha256:" + hex.EncodeToString(sum[:])
	for _, mode := range []string{ArgumentsDigest, ArgumentsFull} {
		t.Run(mode, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "audit.jsonl")
			r, err := New(Config{File: file, Arguments: mode}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			r.Record(context.Background(), Record{Tool: "db.query", Arguments: s, Decision: Allowed})
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			rec := readLines(t, file)[1]
			if rec["args_digest"] != wantDigest {
				t.Errorf("args_digest %v, want %s", rec["args_digest"], wantDigest)
			}
			got, has := rec["arguments"]
			if mode == ArgumentsDigest {
				if has {
					t.Errorf("arguments recorded without arguments full: %v", got)
				}
				return
			}
			var enc bytes.Buffer
			e := json.NewEncoder(&enc)
			e.SetEscapeHTML(false)
			if err := e.Encode(got); err != nil {
				t.Fatal(err)
			}
			b := enc.Bytes()
			for _, secret := range []string{"hunter2", "k-123", "pw@", "abc", "abcdefghijkl", "eyJzdWIiOiIxIn0"} {
				if strings.Contains(string(b), secret) {
					t.Errorf("arguments %s hold %q", b, secret)
				}
			}
			for _, kept := range []string{`"query":"select 1"`, `"Author":"Ada"`, `https://REDACTED@example.com/x?token=REDACTED&page=REDACTED`, `"plain"`, `"password":"REDACTED"`, `"X-Api-Token":"REDACTED"`} {
				if !strings.Contains(string(b), kept) {
					t.Errorf("arguments %s lack %s", b, kept)
				}
			}
		})
	}
}

// TestArgumentsTooLarge: arguments past the limit are left out of a record (it says so), their
// digest kept.
func TestArgumentsTooLarge(t *testing.T) {
	s, err := structpb.NewStruct(map[string]any{"text": strings.Repeat("x", maxArgumentBytes)})
	if err != nil {
		t.Fatal(err)
	}
	r, file := fullArgumentsTrail(t)
	r.Record(context.Background(), Record{Tool: "notes.save", Arguments: s, Decision: Allowed})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	rec := readLines(t, file)[1]
	if _, has := rec["arguments"]; has || rec["arguments_omitted"] != true || rec["args_digest"] == nil || rec["args_bytes"].(float64) <= maxArgumentBytes {
		t.Errorf("record %v: want no arguments, arguments_omitted, a digest and the size", rec)
	}
}
