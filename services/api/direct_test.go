package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/toolid"
)

func TestParseDirect(t *testing.T) {
	cases := []struct {
		in      string
		want    string // calls as "id args" lines
		wantErr string
	}{
		{in: `@calculator.add({"a":2,"b":3})`, want: `calculator.add {"a":2,"b":3}`},
		{in: "  @calculator.pi()  ", want: `calculator.pi {}`},
		{in: `@calculator.add( {"a":1} )`, want: `calculator.add {"a":1}`},
		{in: `@a.x({"s":"a ) b"}), @b-2.y.z({"n":[1,{"m":null}]});`, want: "a.x {\"s\":\"a ) b\"}\nb-2.y.z {\"n\":[1,{\"m\":null}]}"},
		{in: "@fs.read_file({\"path\":\"é.txt\"})\n@fs.list()", want: "fs.read_file {\"path\":\"é.txt\"}\nfs.list {}"},
		{in: `@calculator({})`, wantErr: `byte 1: "calculator" is not a tool id of the form SERVER.TOOL`},
		{in: `@.add({})`, wantErr: `byte 1: ".add" is not a tool id`},
		{in: `@Calc.add({})`, wantErr: `byte 1: server "Calc" must match [a-z0-9_-]+`},
		{in: `@calculator.add`, wantErr: `byte 15: expected '(' after calculator.add`},
		{in: `@calculator.add {"a":1}`, wantErr: `byte 15: expected '(' after calculator.add`},
		{in: `@calculator.add({"a":1}`, wantErr: `byte 23: expected ')' to close the call of calculator.add`},
		{in: `@calculator.add([1,2])`, wantErr: `byte 16: arguments of calculator.add must be a JSON object`},
		{in: `@calculator.add({"a":})`, wantErr: `byte 16: arguments of calculator.add are not valid JSON`},
		{in: `@calculator.add({}) and more`, wantErr: `byte 20: expected '@' to start a call`},
		{in: `@`, wantErr: `byte 1: "" is not a tool id`},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			calls, err := parseDirect(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseDirect(%q) error = %v, want %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseDirect(%q): %v", tc.in, err)
			}
			var lines []string
			for _, c := range calls {
				args, _ := json.Marshal(c.Arguments)
				lines = append(lines, c.ToolID+" "+string(args))
			}
			if got := strings.Join(lines, "\n"); got != tc.want {
				t.Errorf("parseDirect(%q) =\n%s\nwant\n%s", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzParseDirect: any input parses or fails with a position, never panics, and what parses
// names a SERVER.TOOL id with object arguments.
func FuzzParseDirect(f *testing.F) {
	for _, s := range []string{`@calculator.add({"a":2,"b":3})`, `@a.b() @c.d({})`, `@x.y({"s":"\u00e9)"})`, `@`, `@a.b(`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		calls, err := parseDirect(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "byte ") {
				t.Fatalf("error without a position: %v", err)
			}
			return
		}
		for _, c := range calls {
			if _, _, ok := toolid.Split(c.ToolID); !ok || c.Arguments == nil {
				t.Fatalf("parsed %q into %+v", s, c)
			}
		}
	})
}
