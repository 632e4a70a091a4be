package openaiface

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	textlanguage "golang.org/x/text/language"
	textmessage "golang.org/x/text/message"
)

// openAISchemaFile holds OpenAI's published response schemas (testdata/openai/README.md says from
// which commit of openai/openai-openapi and how to regenerate it).
var openAISchemaFile = filepath.Join("testdata", "openai", "schemas.json")

// openAISchemas compiles every schema under $defs of openAISchemaFile once, by name.
var openAISchemas = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	raw, err := os.ReadFile(openAISchemaFile)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", openAISchemaFile, err)
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: not a JSON object", openAISchemaFile)
	}
	defs, ok := top["$defs"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: no $defs", openAISchemaFile)
	}
	const url = "file:///openai/schemas.json"
	c := jsonschema.NewCompiler()
	c.AssertFormat() // date, uri; OpenAI's own "unixtime" is unknown to the validator and not checked
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	out := make(map[string]*jsonschema.Schema, len(defs))
	for name := range defs {
		s, err := c.Compile(url + "#/$defs/" + name)
		if err != nil {
			return nil, fmt.Errorf("compile $defs/%s: %w", name, err)
		}
		out[name] = s
	}
	return out, nil
})

// openAIViolations validates doc (one JSON value) against $defs/<def> of OpenAI's schemas and
// returns one line per violation, "at /instance/path: what is wrong [#/$defs/... keyword]",
// or an error when doc is not JSON or def is unknown.
func openAIViolations(def string, doc []byte) ([]string, error) {
	schemas, err := openAISchemas()
	if err != nil {
		return nil, err
	}
	s, ok := schemas[def]
	if !ok {
		return nil, fmt.Errorf("no schema %q in %s", def, openAISchemaFile)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	err = s.Validate(v)
	if err == nil {
		return nil, nil
	}
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return nil, err
	}
	p := textmessage.NewPrinter(textlanguage.English)
	var lines []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			kw := e.SchemaURL
			if i := strings.Index(kw, "#"); i >= 0 {
				kw = kw[i:]
			}
			for _, k := range e.ErrorKind.KeywordPath() {
				kw += "/" + k
			}
			lines = append(lines, fmt.Sprintf("at %s: %s [%s]", jsonPointer(e.InstanceLocation), e.ErrorKind.LocalizedString(p), kw))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	return lines, nil
}

// jsonPointer renders an instance location as a JSON pointer ("/choices/0/finish_reason"; "" is
// the document itself, shown as "/").
func jsonPointer(loc []string) string {
	if len(loc) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, tok := range loc {
		b.WriteString("/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(tok))
	}
	return b.String()
}

// checkSchema fails t unless doc is valid against $defs/<def> of OpenAI's published schemas
// (for example "CreateChatCompletionResponse", "CreateChatCompletionStreamResponse" for one
// chunk's data, "ListModelsResponse", "Model", "ErrorResponse"), naming the path of every
// violation.
func checkSchema(t testing.TB, def string, doc []byte) {
	t.Helper()
	violations, err := openAIViolations(def, doc)
	if err != nil {
		t.Fatalf("validate against OpenAI's %s: %v\ndocument: %s", def, err, doc)
	}
	if len(violations) > 0 {
		t.Errorf("not a valid OpenAI %s:\n  %s\ndocument: %s", def, strings.Join(violations, "\n  "), doc)
	}
}

// TestSchemasAccept checks the kept schemas against hand-written bodies shaped as OpenAI sends
// them, and against broken ones that each break one rule.
func TestSchemasAccept(t *testing.T) {
	cases := []struct {
		name string
		def  string
		doc  string
		// wantAt: empty when doc must pass; otherwise the instance paths that must be
		// among its violations.
		wantAt []string
	}{
		{
			name: "completion with text",
			def:  "CreateChatCompletionResponse",
			doc: `{
				"id": "chatcmpl-CbGq8mJ0x1mH2f5vQk3LrT9pZsYwA",
				"object": "chat.completion",
				"created": 1763651200,
				"model": "gpt-4.1-mini-2025-04-14",
				"choices": [{
					"index": 0,
					"message": {"role": "assistant", "content": "2 + 3 = 5.", "refusal": null, "annotations": []},
					"logprobs": null,
					"finish_reason": "stop"
				}],
				"usage": {
					"prompt_tokens": 24, "completion_tokens": 8, "total_tokens": 32,
					"prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
					"completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
				},
				"service_tier": "default",
				"system_fingerprint": "fp_6d7dcc9a98"
			}`,
		},
		{
			name: "completion with tool_calls",
			def:  "CreateChatCompletionResponse",
			doc: `{
				"id": "chatcmpl-CbGqA1u7c2Yl8eNn0sXbVd4KfHq3R",
				"object": "chat.completion",
				"created": 1763651202,
				"model": "gpt-4.1-mini-2025-04-14",
				"choices": [{
					"index": 0,
					"message": {
						"role": "assistant",
						"content": null,
						"tool_calls": [
							{"id": "call_Vq3lU0bE4m1Xh8sY2dKc7aP9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
							{"id": "call_Jt6wR2nF8q0Zb3vM5xLe1cH4", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\":\"Europe/Paris\"}"}}
						],
						"refusal": null,
						"annotations": []
					},
					"logprobs": null,
					"finish_reason": "tool_calls"
				}],
				"usage": {"prompt_tokens": 81, "completion_tokens": 46, "total_tokens": 127},
				"service_tier": "default",
				"system_fingerprint": "fp_6d7dcc9a98"
			}`,
		},
		{
			name: "completion with an extension object",
			def:  "CreateChatCompletionResponse",
			doc: `{
				"id": "chatcmpl-1", "object": "chat.completion", "created": 1763651202, "model": "gorilla",
				"choices": [{"index": 0, "message": {"role": "assistant", "content": "5", "refusal": null}, "logprobs": null, "finish_reason": "stop"}],
				"toolmesh": {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "tool_calls": [{"tool": "calculator.add", "output": "5"}]}
			}`,
		},
		{
			name: "chunk with the role delta",
			def:  "CreateChatCompletionStreamResponse",
			doc:  `{"id":"chatcmpl-CbGqC7","object":"chat.completion.chunk","created":1763651204,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6d7dcc9a98","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Xp3"}`,
		},
		{
			name: "chunk with a text delta",
			def:  "CreateChatCompletionStreamResponse",
			doc:  `{"id":"chatcmpl-CbGqC7","object":"chat.completion.chunk","created":1763651204,"model":"gpt-4.1-mini-2025-04-14","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		},
		{
			name: "chunk opening a tool call",
			def:  "CreateChatCompletionStreamResponse",
			doc:  `{"id":"chatcmpl-CbGqE2","object":"chat.completion.chunk","created":1763651206,"model":"gpt-4.1-mini-2025-04-14","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_Vq3lU0bE4m1Xh8sY2dKc7aP9","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
		},
		{
			name: "chunk with a tool-call arguments delta",
			def:  "CreateChatCompletionStreamResponse",
			doc:  `{"id":"chatcmpl-CbGqE2","object":"chat.completion.chunk","created":1763651206,"model":"gpt-4.1-mini-2025-04-14","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
		},
		{
			name: "chunk ending in tool_calls",
			def:  "CreateChatCompletionStreamResponse",
			doc:  `{"id":"chatcmpl-CbGqE2","object":"chat.completion.chunk","created":1763651206,"model":"gpt-4.1-mini-2025-04-14","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}`,
		},
		{
			name: "final usage chunk with empty choices",
			def:  "CreateChatCompletionStreamResponse",
			doc:  `{"id":"chatcmpl-CbGqE2","object":"chat.completion.chunk","created":1763651206,"model":"gpt-4.1-mini-2025-04-14","choices":[],"usage":{"prompt_tokens":81,"completion_tokens":17,"total_tokens":98,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`,
		},
		{
			name: "extension chunk with empty choices",
			def:  "CreateChatCompletionStreamResponse",
			doc:  `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1763651206,"model":"gorilla","choices":[],"toolmesh":{"step":"tool_call","tool":"calculator.add","arguments":{"a":2,"b":3}}}`,
		},
		{
			name: "model list",
			def:  "ListModelsResponse",
			doc:  `{"object":"list","data":[{"id":"gpt-4.1-mini","object":"model","created":1744316542,"owned_by":"system"},{"id":"ft:gpt-4.1-mini-2025-04-14:acme::BxK2","object":"model","created":1750000000,"owned_by":"acme-org"}]}`,
		},
		{
			name: "one model",
			def:  "Model",
			doc:  `{"id":"gpt-4.1-mini","object":"model","created":1744316542,"owned_by":"system"}`,
		},
		{
			name: "error body for a bad key",
			def:  "ErrorResponse",
			doc:  `{"error":{"message":"Incorrect API key provided: sk-abc***xyz. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
		},
		{
			name: "error body naming the parameter",
			def:  "ErrorResponse",
			doc:  `{"error":{"message":"Invalid 'n': only 1 choice is supported.","type":"invalid_request_error","param":"n","code":null}}`,
		},

		// Broken ones: each must fail, at the path named.
		{
			name:   "completion without id",
			def:    "CreateChatCompletionResponse",
			doc:    `{"object":"chat.completion","created":1763651200,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},"logprobs":null,"finish_reason":"stop"}]}`,
			wantAt: []string{"/"},
		},
		{
			name:   "completion with the chunk's object",
			def:    "CreateChatCompletionResponse",
			doc:    `{"id":"c","object":"chat.completion.chunk","created":1763651200,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},"logprobs":null,"finish_reason":"stop"}]}`,
			wantAt: []string{"/object"},
		},
		{
			name:   "completion with finish_reason bogus",
			def:    "CreateChatCompletionResponse",
			doc:    `{"id":"c","object":"chat.completion","created":1763651200,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},"logprobs":null,"finish_reason":"bogus"}]}`,
			wantAt: []string{"/choices/0/finish_reason"},
		},
		{
			name:   "completion with finish_reason null",
			def:    "CreateChatCompletionResponse",
			doc:    `{"id":"c","object":"chat.completion","created":1763651200,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},"logprobs":null,"finish_reason":null}]}`,
			wantAt: []string{"/choices/0/finish_reason"},
		},
		{
			name:   "chunk with the completion's object",
			def:    "CreateChatCompletionStreamResponse",
			doc:    `{"id":"c","object":"chat.completion","created":1763651204,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`,
			wantAt: []string{"/object"},
		},
		{
			name:   "chunk with finish_reason bogus",
			def:    "CreateChatCompletionStreamResponse",
			doc:    `{"id":"c","object":"chat.completion.chunk","created":1763651204,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"bogus"}]}`,
			wantAt: []string{"/choices/0/finish_reason"},
		},
		{
			name:   "chunk without id and with a tool-call delta lacking its index",
			def:    "CreateChatCompletionStreamResponse",
			doc:    `{"object":"chat.completion.chunk","created":1763651204,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"{}"}}]},"finish_reason":null}]}`,
			wantAt: []string{"/", "/choices/0/delta/tool_calls/0"},
		},
		{
			name:   "model list with a model lacking owned_by",
			def:    "ListModelsResponse",
			doc:    `{"object":"list","data":[{"id":"gorilla","object":"model","created":1744316542}]}`,
			wantAt: []string{"/data/0"},
		},
		{
			name:   "error without message",
			def:    "ErrorResponse",
			doc:    `{"error":{"type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			wantAt: []string{"/error"},
		},
		{
			name:   "error as a bare string",
			def:    "ErrorResponse",
			doc:    `{"error":"Incorrect API key provided"}`,
			wantAt: []string{"/error"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.wantAt) == 0 {
				checkSchema(t, tc.def, []byte(tc.doc))
				return
			}
			violations, err := openAIViolations(tc.def, []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if len(violations) == 0 {
				t.Fatalf("got valid, want violations at %v", tc.wantAt)
			}
			for _, at := range tc.wantAt {
				if !slices.ContainsFunc(violations, func(v string) bool { return strings.HasPrefix(v, "at "+at+": ") }) {
					t.Errorf("got violations\n  %s\nwant one at %s", strings.Join(violations, "\n  "), at)
				}
			}
		})
	}
}
