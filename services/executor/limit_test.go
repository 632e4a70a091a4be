package executor

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestLineCap(t *testing.T) {
	big := strings.Repeat("x", 200)
	answer := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32603,"message":"` + oversizedMessage + `"}}` + "\n"
	}
	tests := []struct {
		name    string
		in      string
		want    string
		dropped []string // ids lineCap answered for
	}{
		{"small lines pass", "{\"a\":1}\n{\"b\":2}\r\n\n", "{\"a\":1}\n{\"b\":2}\r\n\n", nil},
		{"unterminated last line passes", "{\"a\":1}\n{\"b\"", "{\"a\":1}\n{\"b\"", nil},
		{"id before result (mcp-go, Python SDK)",
			`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"` + big + `"}]}}` + "\n{\"next\":1}\n",
			answer("7") + "{\"next\":1}\n", []string{"7"}},
		{"id last (TypeScript SDK)",
			`{"result":{"content":[{"type":"text","text":"` + big + `","id":99}]},"jsonrpc":"2.0","id":"req-3"}` + "\r\n",
			answer(`"req-3"`), []string{`"req-3"`}},
		{"an id inside the result is not taken",
			`{"jsonrpc":"2.0","result":{"id":5,"text":"` + big + `"},"x":1}` + "\n",
			"", nil},
		{"SSE data line keeps its prefix",
			"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":12,\"result\":{\"t\":\"" + big + "\"}}\n\nevent: message\ndata: {}\n\n",
			"event: message\ndata: " + answer("12") + "\nevent: message\ndata: {}\n\n", []string{"12"}},
	}
	for _, tt := range tests {
		for _, rd := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{{"whole", func(r io.Reader) io.Reader { return r }}, {"byte by byte", iotest.OneByteReader}} {
			t.Run(tt.name+"/"+rd.name, func(t *testing.T) {
				h := &hooks{}
				c := newLineCap(rd.wrap(strings.NewReader(tt.in)), 100, h)
				got, err := io.ReadAll(c)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, []byte(tt.want)) {
					t.Errorf("got\n%q\nwant\n%q", got, tt.want)
				}
				for _, id := range tt.dropped {
					if _, ok := h.oversized.Load(id); !ok {
						t.Errorf("id %s not recorded", id)
					}
				}
			})
		}
	}
}
