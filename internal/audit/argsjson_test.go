package audit

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// TestArgumentsJSON: arguments recorded as the JSON text a call carried get the digest and the
// masked form of the same arguments recorded as a Struct; a text that is not an object, the
// digest of none.
func TestArgumentsJSON(t *testing.T) {
	s, err := structpb.NewStruct(map[string]any{"b": 1e21, "a": "x", "password": "hunter2", "n": []any{1.5, nil}})
	if err != nil {
		t.Fatal(err)
	}
	r, file := fullArgumentsTrail(t)
	ctx := context.Background()
	r.Record(ctx, Record{Tool: "t.a", Arguments: s, Decision: Allowed})
	r.Record(ctx, Record{Tool: "t.a", ArgumentsJSON: []byte(` {"password":"hunter2", "n":[1.5,null],"a":"x","b":1000000000000000000000}`), Decision: Allowed})
	r.Record(ctx, Record{Tool: "t.a", Decision: Allowed})
	r.Record(ctx, Record{Tool: "t.a", ArgumentsJSON: []byte(`[1,2]`), Decision: Allowed})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, file)[1:]
	for _, k := range []string{"args_digest", "args_bytes"} {
		if lines[0][k] != lines[1][k] {
			t.Errorf("%s of the JSON text %v, want the Struct's %v", k, lines[1][k], lines[0][k])
		}
		if lines[2][k] != lines[3][k] {
			t.Errorf("%s of a text that is no object %v, want that of none %v", k, lines[3][k], lines[2][k])
		}
	}
	if got, want := lines[1]["arguments"], lines[0]["arguments"]; got == nil || !reflect.DeepEqual(got, want) {
		t.Errorf("arguments of the JSON text %v, want the Struct's %v", got, want)
	}
}

// fullArgumentsTrail is a recorder writing the arguments too (arguments full) to a file of its
// own, and that file.
func fullArgumentsTrail(t *testing.T) (*Recorder, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	r, err := New(Config{File: file, Arguments: ArgumentsFull}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r, file
}
