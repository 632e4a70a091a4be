package openaiface

import (
	"testing"
	"unicode/utf8"
)

// FuzzParseChat: whatever body a client sends, parsing it neither panics nor passes on a request
// without a model and a message, and every refusal says why, in valid UTF-8 (it is quoted back
// to the client).
func FuzzParseChat(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"stream":true,"stream_options":{"include_usage":true},"stop":["x"],"seed":1,"temperature":0.5,"toolmesh":{"servers":["calculator"],"k":2}}`,
		`{"model":"m","messages":[],"n":2}`,
		`[`, `null`, `{"model":1}`, `{"model":"m","messages":[{"role":"\xff"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parseChat(body)
		if err != nil {
			if req != nil || err.msg == "" || !utf8.ValidString(err.msg) && utf8.Valid(body) {
				t.Fatalf("refusal %+v with request %v", err, req)
			}
			return
		}
		if req.query.GetModel() == "" || len(req.query.GetMessages()) == 0 {
			t.Fatalf("accepted without a model or a message: %v", req.query)
		}
	})
}
