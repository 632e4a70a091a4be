package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestDirectQueryContract: a direct query fails the way POST .../TOOL:call fails for the same
// mistake (404 unknown tool, 400 invalid arguments), and a tool that ran and reported an error
// is 200 with the call's is_error and stop_reason TOOL_ERROR, so a script can tell either from
// an answer.
func TestDirectQueryContract(t *testing.T) {
	m := startMesh(t)
	cases := []struct {
		name       string
		query      string
		call       string // the same mistake through the tools API
		args       string
		wantStatus int
		wantStop   string
		wantMsg    string
	}{
		{"works", `@calculator.add({"a":2,"b":3})`, "calculator/add", `{"a":2,"b":3}`, 200, "STOP_REASON_ANSWERED", ""},
		{"unknown tool", `@calculator.nope({})`, "calculator/nope", `{}`, 404, "", `unknown tool "calculator.nope"`},
		{"unknown server", `@nowhere.add({})`, "nowhere/add", `{}`, 404, "", "nowhere"},
		{"invalid arguments", `@calculator.add({"a":"x","b":3})`, "calculator/add", `{"a":"x","b":3}`, 400, "", "invalid arguments"},
		{"the tool fails", `@calculator.divide({"a":1,"b":0})`, "calculator/divide", `{"a":1,"b":0}`, 200, "STOP_REASON_TOOL_ERROR", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := json.Marshal(tc.query)
			code, body := post(t, m.base+"/v1/query", `{"query":`+string(q)+`}`)
			callCode, callBody := post(t, m.base+"/v1/tools/"+tc.call+":call", `{"arguments":`+tc.args+`}`)
			if code != tc.wantStatus || callCode != tc.wantStatus {
				t.Fatalf("direct query %d %.200s, call %d %.200s; want %d for both", code, body, callCode, callBody, tc.wantStatus)
			}
			if code != http.StatusOK {
				var e struct{ Message string }
				if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Message, tc.wantMsg) {
					t.Errorf("direct query error %s; want a message naming %q", body, tc.wantMsg)
				}
				return
			}
			got := decodeQuery(t, body)
			if got.StopReason != tc.wantStop {
				t.Errorf("stop_reason %s, want %s", got.StopReason, tc.wantStop)
			}
			var call struct {
				IsError bool `json:"is_error"`
			}
			_ = json.Unmarshal(callBody, &call)
			if len(got.ToolCalls) != 1 || got.ToolCalls[0].IsError != call.IsError {
				t.Errorf("direct query's call %+v; want is_error %v as the tools API said", got.ToolCalls, call.IsError)
			}
		})
	}
}
