package openaiface

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// chatRequest is a checked chat completion request: the native query it runs, and how to
// answer.
type chatRequest struct {
	query        *toolmeshv1.QueryRequest
	stream       bool
	includeUsage bool
	user         string
}

// badParam is a request OpenAI would refuse with 400: which parameter, and why.
type badParam struct {
	param, msg, code string
}

func (e *badParam) Error() string { return e.msg }

func bad(param, format string, args ...any) *badParam {
	return &badParam{param: param, msg: param + ": " + fmt.Sprintf(format, args...), code: "invalid_value"}
}

// unsupported refuses a parameter toolmesh cannot honour; it is never silently ignored.
func unsupported(param, why string) *badParam {
	return &badParam{param: param, msg: param + ": " + why, code: "unsupported_parameter"}
}

// The request's parameters: honoured ones, and ones accepted only at the value that asks for
// nothing (null, false, 0, empty), which any other value of is refused. Anything else is
// unknown, as OpenAI answers it.
var (
	honoured = map[string]bool{
		"model": true, "messages": true, "tools": true, "tool_choice": true, "stream": true, "stream_options": true,
		"max_tokens": true, "max_completion_tokens": true, "temperature": true, "top_p": true, "stop": true, "seed": true,
		"user": true, "safety_identifier": true, "n": true, "parallel_tool_calls": true, "store": true, "metadata": true,
		"frequency_penalty": true, "presence_penalty": true, "logprobs": true, "top_logprobs": true, "logit_bias": true,
		"response_format": true, "modalities": true, "service_tier": true, "prompt_cache_key": true, "toolmesh": true,
	}
	// refused are OpenAI parameters toolmesh has nothing for, with the reason; null is accepted.
	refused = map[string]string{
		"audio":              "toolmesh answers with a text-only model",
		"prediction":         "predicted outputs are not supported",
		"reasoning_effort":   "toolmesh's models do not reason in a separate phase",
		"verbosity":          "not supported",
		"web_search_options": "web search is not a mesh tool; add an MCP server that searches",
		"functions":          "the deprecated functions parameter is not supported: use tools",
		"function_call":      "the deprecated function_call parameter is not supported: use tool_choice",
	}
)

// parseChat checks a chat completion request body and turns it into the native query.
func parseChat(body []byte) (*chatRequest, *badParam) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, &badParam{msg: fmt.Sprintf("We could not parse the JSON body of your request: invalid JSON at byte %d: %v", syn.Offset, syn)}
		}
		return nil, &badParam{msg: "We could not parse the JSON body of your request: it must be a JSON object"}
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if why, ok := refused[k]; ok {
			if !isNull(fields[k]) {
				return nil, unsupported(k, why)
			}
			continue
		}
		if !honoured[k] {
			return nil, &badParam{param: k, msg: fmt.Sprintf("Unrecognized request argument supplied: %s", k), code: "unknown_parameter"}
		}
	}
	q := &toolmeshv1.QueryRequest{}
	out := &chatRequest{query: q}
	if err := str(fields, "model", &q.Model); err != nil {
		return nil, err
	}
	if strings.TrimSpace(q.Model) == "" {
		return nil, &badParam{param: "model", msg: "you must provide a model parameter (GET /v1/models lists the mesh's)", code: "missing_required_parameter"}
	}
	raw, ok := fields["messages"]
	if !ok || isNull(raw) {
		return nil, &badParam{param: "messages", msg: "messages: is required", code: "missing_required_parameter"}
	}
	var err *badParam
	if q.Messages, err = parseMessages(raw); err != nil {
		return nil, err
	}
	if q.Functions, err = parseTools(fields["tools"]); err != nil {
		return nil, err
	}
	if q.ToolChoice, err = parseToolChoice(fields["tool_choice"], q.Functions); err != nil {
		return nil, err
	}
	if err := boolean(fields, "stream", &out.stream); err != nil {
		return nil, err
	}
	if out.includeUsage, err = parseStreamOptions(fields["stream_options"], out.stream); err != nil {
		return nil, err
	}
	if q.Generation, err = parseGeneration(fields); err != nil {
		return nil, err
	}
	if err := str(fields, "user", &out.user); err != nil {
		return nil, err
	}
	if out.user == "" {
		if err := str(fields, "safety_identifier", &out.user); err != nil {
			return nil, err
		}
	}
	if err := checkNeutral(fields); err != nil {
		return nil, err
	}
	if err := parseExtension(fields["toolmesh"], q); err != nil {
		return nil, err
	}
	return out, nil
}

// checkNeutral accepts the parameters toolmesh honours by doing nothing only at their neutral
// values.
func checkNeutral(fields map[string]json.RawMessage) *badParam {
	if v, ok := fields["n"]; ok && !isNull(v) {
		var n float64
		if json.Unmarshal(v, &n) != nil || n != 1 {
			return unsupported("n", "toolmesh answers with one choice: n must be 1")
		}
	}
	if v, ok := fields["parallel_tool_calls"]; ok && !isNull(v) {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return bad("parallel_tool_calls", "must be a boolean")
		}
		if !b {
			return unsupported("parallel_tool_calls", "toolmesh runs the calls of one model turn in parallel; false is not supported")
		}
	}
	for _, k := range []string{"store", "logprobs"} {
		if v, ok := fields[k]; ok && !isNull(v) {
			var b bool
			if json.Unmarshal(v, &b) != nil {
				return bad(k, "must be a boolean")
			}
			if b {
				why := map[string]string{"store": "toolmesh does not store completions", "logprobs": "log probabilities are not returned"}[k]
				return unsupported(k, why)
			}
		}
	}
	for _, k := range []string{"frequency_penalty", "presence_penalty"} {
		if v, ok := fields[k]; ok && !isNull(v) {
			var f float64
			if json.Unmarshal(v, &f) != nil {
				return bad(k, "must be a number")
			}
			if f != 0 {
				return unsupported(k, "penalties are not supported; leave it unset or 0")
			}
		}
	}
	if v, ok := fields["top_logprobs"]; ok && !isNull(v) {
		return unsupported("top_logprobs", "log probabilities are not returned")
	}
	for _, k := range []string{"metadata", "logit_bias"} {
		if v, ok := fields[k]; ok && !isNull(v) {
			var m map[string]json.RawMessage
			if json.Unmarshal(v, &m) != nil {
				return bad(k, "must be an object")
			}
			if len(m) > 0 {
				why := map[string]string{"metadata": "metadata is for stored completions, which toolmesh does not keep", "logit_bias": "logit bias is not supported"}[k]
				return unsupported(k, why)
			}
		}
	}
	if v, ok := fields["response_format"]; ok && !isNull(v) {
		var rf struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(v, &rf) != nil {
			return bad("response_format", "must be an object with a type")
		}
		if rf.Type != "text" {
			return unsupported("response_format", fmt.Sprintf("%q is not supported: answers are text", rf.Type))
		}
	}
	if v, ok := fields["modalities"]; ok && !isNull(v) {
		var m []string
		if json.Unmarshal(v, &m) != nil {
			return bad("modalities", "must be a list of strings")
		}
		for _, s := range m {
			if s != "text" {
				return unsupported("modalities", fmt.Sprintf("%q is not supported: toolmesh answers with text", s))
			}
		}
	}
	if v, ok := fields["service_tier"]; ok && !isNull(v) {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return bad("service_tier", "must be a string")
		}
		if s != "auto" && s != "default" {
			return unsupported("service_tier", fmt.Sprintf("%q is not offered: toolmesh has one tier", s))
		}
	}
	var key string
	return str(fields, "prompt_cache_key", &key)
}

// parseMessages reads OpenAI's messages into the native ones. The conversation's shape (which
// message may follow which, calls answered) is the agent's to check, with the same indexes.
func parseMessages(raw json.RawMessage) ([]*toolmeshv1.Message, *badParam) {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, bad("messages", "must be a list of messages")
	}
	if len(list) == 0 {
		return nil, bad("messages", "must hold at least one message")
	}
	out := make([]*toolmeshv1.Message, len(list))
	for i, r := range list {
		m, err := parseMessage(i, r)
		if err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

// keysByRole are the fields each role's message may have.
var keysByRole = map[string][]string{
	"system":    {"role", "content", "name"},
	"developer": {"role", "content", "name"},
	"user":      {"role", "content", "name"},
	// An assistant message as a completion returned it, sent back unchanged (the SDKs' own
	// way to continue a conversation), carries annotations too (metadata about its text), and
	// from the npm SDK's stream helper "parsed" (its parse of a structured answer): what the
	// model said is in content and tool_calls, which is all a model reads back.
	"assistant": {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call", "annotations", "parsed"},
	"tool":      {"role", "content", "tool_call_id"},
}

func parseMessage(i int, raw json.RawMessage) (*toolmeshv1.Message, *badParam) {
	p := func(s string) string { return fmt.Sprintf("messages[%d].%s", i, s) }
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return nil, bad(fmt.Sprintf("messages[%d]", i), "must be an object with a role")
	}
	m := &toolmeshv1.Message{}
	if err := str(fields, "role", &m.Role); err != nil {
		return nil, &badParam{param: p("role"), msg: p("role") + ": must be a string", code: "invalid_type"}
	}
	keys, ok := keysByRole[m.Role]
	switch {
	case m.Role == "":
		return nil, &badParam{param: p("role"), msg: p("role") + ": is required: system, developer, user, assistant or tool", code: "missing_required_parameter"}
	case m.Role == "function":
		return nil, unsupported(p("role"), `the deprecated "function" role is not supported: use "tool" messages`)
	case !ok:
		return nil, bad(p("role"), "%q is not a role: system, developer, user, assistant or tool", cut(m.Role, 32))
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if !slices.Contains(keys, k) {
			return nil, &badParam{param: p(k), msg: fmt.Sprintf("%s: unknown parameter for %s message", p(k), article(m.Role)), code: "unknown_parameter"}
		}
	}
	for _, k := range []string{"refusal", "audio", "function_call"} {
		if v, ok := fields[k]; ok && !isNull(v) {
			return nil, unsupported(p(k), "is not supported: send the assistant's text as content")
		}
	}
	if v, ok := fields["name"]; ok && !isNull(v) {
		return nil, unsupported(p("name"), "participant names are not shown to toolmesh's models; put the name in the content")
	}
	var err *badParam
	if m.Content, err = parseContent(p("content"), fields["content"]); err != nil {
		return nil, err
	}
	if err := str(fields, "tool_call_id", &m.ToolCallId); err != nil {
		return nil, &badParam{param: p("tool_call_id"), msg: p("tool_call_id") + ": must be a string", code: "invalid_type"}
	}
	if v, ok := fields["tool_calls"]; ok && !isNull(v) {
		if m.ToolCalls, err = parseToolCalls(p("tool_calls"), v); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// parseContent reads a message's content: a string, null, or a list of text parts (joined by
// newlines). Images, audio and files are refused: toolmesh's models read text.
func parseContent(param string, raw json.RawMessage) (string, *badParam) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []map[string]json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return "", bad(param, "must be a string or a list of text parts")
	}
	texts := make([]string, 0, len(parts))
	for j, part := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var typ, text string
		if err := str(part, "type", &typ); err != nil {
			return "", bad(pp+".type", "must be a string")
		}
		if typ != "text" {
			if typ == "" {
				return "", bad(pp+".type", "is required")
			}
			return "", unsupported(pp+".type", fmt.Sprintf("%q parts are not supported: toolmesh answers with a text-only model", cut(typ, 32)))
		}
		for k := range part {
			if k != "type" && k != "text" {
				return "", &badParam{param: pp + "." + k, msg: pp + "." + k + ": unknown parameter for a text part", code: "unknown_parameter"}
			}
		}
		if err := str(part, "text", &text); err != nil {
			return "", bad(pp+".text", "must be a string")
		}
		texts = append(texts, text)
	}
	return strings.Join(texts, "\n"), nil
}

// parseToolCalls reads an assistant message's calls of the caller's functions.
func parseToolCalls(param string, raw json.RawMessage) ([]*toolmeshv1.FunctionCall, *badParam) {
	var list []struct {
		ID       *string `json:"id"`
		Type     *string `json:"type"`
		Function *struct {
			Name      *string `json:"name"`
			Arguments *string `json:"arguments"`
		} `json:"function"`
	}
	if err := strictUnmarshal(raw, &list); err != nil {
		return nil, bad(param, "must be a list of {id, type: \"function\", function: {name, arguments}}: %v", err)
	}
	out := make([]*toolmeshv1.FunctionCall, len(list))
	for j, c := range list {
		pp := fmt.Sprintf("%s[%d]", param, j)
		switch {
		case c.ID == nil:
			return nil, &badParam{param: pp + ".id", msg: pp + ".id: is required", code: "missing_required_parameter"}
		case c.Type != nil && *c.Type != "function":
			return nil, unsupported(pp+".type", fmt.Sprintf("%q calls are not supported: only function calls", cut(*c.Type, 32)))
		case c.Function == nil || c.Function.Name == nil:
			return nil, &badParam{param: pp + ".function.name", msg: pp + ".function.name: is required", code: "missing_required_parameter"}
		}
		args, err := parseArguments(pp+".function.arguments", c.Function.Arguments)
		if err != nil {
			return nil, err
		}
		out[j] = &toolmeshv1.FunctionCall{Id: *c.ID, ToolId: *c.Function.Name, Arguments: args}
	}
	return out, nil
}

// parseArguments reads a call's arguments: a JSON object written as a string, as OpenAI sends it.
func parseArguments(param string, s *string) (*structpb.Struct, *badParam) {
	if s == nil || strings.TrimSpace(*s) == "" {
		return &structpb.Struct{Fields: map[string]*structpb.Value{}}, nil
	}
	if d := depth([]byte(*s)); d > maxDepth {
		return nil, bad(param, "nests %d deep, more than the %d allowed", d, maxDepth)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(*s), &m); err != nil || m == nil {
		return nil, bad(param, "must be a JSON object written as a string, e.g. \"{\\\"city\\\": \\\"Paris\\\"}\"")
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		return nil, bad(param, "%v", err)
	}
	return st, nil
}

// parseTools reads the caller's functions.
func parseTools(raw json.RawMessage) ([]*toolmeshv1.Function, *badParam) {
	if isNull(raw) {
		return nil, nil
	}
	var raws []json.RawMessage
	if json.Unmarshal(raw, &raws) != nil {
		return nil, bad("tools", "must be a list of {type: \"function\", function: {name, description, parameters}}")
	}
	out := make([]*toolmeshv1.Function, len(raws))
	for i, r := range raws {
		p := fmt.Sprintf("tools[%d]", i)
		// The type first: a tool of another type has other fields.
		var typed struct {
			Type *string `json:"type"`
		}
		if json.Unmarshal(r, &typed) != nil {
			return nil, bad(p, "must be an object {type: \"function\", function: {...}}")
		}
		switch {
		case typed.Type == nil:
			return nil, &badParam{param: p + ".type", msg: p + ".type: is required (\"function\")", code: "missing_required_parameter"}
		case *typed.Type != "function":
			return nil, unsupported(p+".type", fmt.Sprintf("%q tools are not supported: only functions (the mesh's own tools are offered anyway)", cut(*typed.Type, 32)))
		}
		var t struct {
			Type     *string `json:"type"`
			Function *struct {
				Name        *string         `json:"name"`
				Description *string         `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
				Strict      *bool           `json:"strict"`
			} `json:"function"`
		}
		if err := strictUnmarshal(r, &t); err != nil {
			return nil, bad(p, "must be {type: \"function\", function: {name, description, parameters}}: %v", err)
		}
		switch {
		case t.Function == nil || t.Function.Name == nil:
			return nil, &badParam{param: p + ".function.name", msg: p + ".function.name: is required", code: "missing_required_parameter"}
		case t.Function.Strict != nil && *t.Function.Strict:
			return nil, unsupported(p+".function.strict", "strict schema adherence is not promised for the caller's functions; leave it unset or false")
		}
		f := &toolmeshv1.Function{Name: *t.Function.Name}
		if t.Function.Description != nil {
			f.Description = *t.Function.Description
		}
		if !isNull(t.Function.Parameters) {
			if d := depth(t.Function.Parameters); d > maxDepth {
				return nil, bad(p+".function.parameters", "nests %d deep, more than the %d allowed", d, maxDepth)
			}
			var m map[string]any
			if json.Unmarshal(t.Function.Parameters, &m) != nil {
				return nil, bad(p+".function.parameters", "must be a JSON Schema object")
			}
			st, err := structpb.NewStruct(m)
			if err != nil {
				return nil, bad(p+".function.parameters", "%v", err)
			}
			f.Parameters = st
		}
		out[i] = f
	}
	return out, nil
}

// parseToolChoice reads "auto", "none", "required" or {"type": "function", "function": {"name": N}}.
func parseToolChoice(raw json.RawMessage, fns []*toolmeshv1.Function) (*toolmeshv1.ToolChoice, *badParam) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		mode, ok := map[string]toolmeshv1.ToolChoiceMode{
			"auto": toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO, "none": toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE,
			"required": toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED,
		}[s]
		if !ok {
			return nil, bad("tool_choice", "%q is not auto, none, required or a named function", cut(s, 32))
		}
		return &toolmeshv1.ToolChoice{Mode: mode}, nil
	}
	var named struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := strictUnmarshal(raw, &named); err != nil {
		return nil, bad("tool_choice", "must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	if named.Type != "function" {
		return nil, unsupported("tool_choice", fmt.Sprintf("%q is not supported: name a function", cut(named.Type, 32)))
	}
	if named.Function == nil || named.Function.Name == "" {
		return nil, bad("tool_choice", "function.name is required")
	}
	if !slices.ContainsFunc(fns, func(f *toolmeshv1.Function) bool { return f.GetName() == named.Function.Name }) {
		return nil, bad("tool_choice", "%q is none of the functions in tools", cut(named.Function.Name, 64))
	}
	return &toolmeshv1.ToolChoice{Mode: toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_FUNCTION, Function: named.Function.Name}, nil
}

func parseStreamOptions(raw json.RawMessage, stream bool) (bool, *badParam) {
	if isNull(raw) {
		return false, nil
	}
	if !stream {
		return false, bad("stream_options", "is only allowed when stream is true")
	}
	var o struct {
		IncludeUsage       *bool `json:"include_usage"`
		IncludeObfuscation *bool `json:"include_obfuscation"`
	}
	if err := strictUnmarshal(raw, &o); err != nil {
		return false, bad("stream_options", "%v", err)
	}
	if o.IncludeObfuscation != nil && *o.IncludeObfuscation {
		return false, unsupported("stream_options.include_obfuscation", "toolmesh does not pad its chunks")
	}
	return o.IncludeUsage != nil && *o.IncludeUsage, nil
}

func parseGeneration(fields map[string]json.RawMessage) (*toolmeshv1.GenerationOptions, *badParam) {
	g := &toolmeshv1.GenerationOptions{}
	set := false
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		v, ok := fields[k]
		if !ok || isNull(v) {
			continue
		}
		var n float64
		if json.Unmarshal(v, &n) != nil || n != math.Trunc(n) || n < 1 || n > 1<<20 {
			return nil, bad(k, "must be an integer between 1 and %d", 1<<20)
		}
		if g.MaxTokens != 0 {
			return nil, bad("max_completion_tokens", "give max_tokens or max_completion_tokens, not both")
		}
		g.MaxTokens, set = int32(n), true
	}
	for _, k := range []string{"temperature", "top_p"} {
		v, ok := fields[k]
		if !ok || isNull(v) {
			continue
		}
		var f float64
		if json.Unmarshal(v, &f) != nil {
			return nil, bad(k, "must be a number")
		}
		if k == "temperature" {
			if f < 0 || f > 2 {
				return nil, bad(k, "must be between 0 and 2")
			}
			g.Temperature = &f
		} else {
			if f < 0 || f > 1 {
				return nil, bad(k, "must be between 0 and 1")
			}
			g.TopP = &f
		}
		set = true
	}
	if v, ok := fields["seed"]; ok && !isNull(v) {
		var n json.Number
		d := json.NewDecoder(bytes.NewReader(v))
		d.UseNumber()
		if d.Decode(&n) != nil {
			return nil, bad("seed", "must be an integer")
		}
		i, err := n.Int64()
		if err != nil {
			return nil, bad("seed", "must be an integer")
		}
		g.Seed, set = &i, true
	}
	if v, ok := fields["stop"]; ok && !isNull(v) {
		var one string
		var many []string
		switch {
		case json.Unmarshal(v, &one) == nil:
			many = []string{one}
		case json.Unmarshal(v, &many) == nil:
		default:
			return nil, bad("stop", "must be a string or a list of up to 4 strings")
		}
		if len(many) > 4 {
			return nil, bad("stop", "has %d sequences, more than the 4 allowed", len(many))
		}
		for i, s := range many {
			if s == "" {
				return nil, bad(fmt.Sprintf("stop[%d]", i), "must not be empty")
			}
		}
		g.Stop, set = many, len(many) > 0 || set
	}
	if !set {
		return nil, nil
	}
	return g, nil
}

// parseExtension reads toolmesh's own parameters: {"servers": [...], "k": N, "max_iterations": N,
// "timeout_seconds": N}. The OpenAI SDKs send them as extra body fields.
func parseExtension(raw json.RawMessage, q *toolmeshv1.QueryRequest) *badParam {
	if isNull(raw) {
		return nil
	}
	var ext struct {
		Servers        []string `json:"servers"`
		K              *int32   `json:"k"`
		MaxIterations  *int32   `json:"max_iterations"`
		TimeoutSeconds *int32   `json:"timeout_seconds"`
	}
	if err := strictUnmarshal(raw, &ext); err != nil {
		return bad("toolmesh", "must be {servers, k, max_iterations, timeout_seconds}: %v", err)
	}
	q.Servers = ext.Servers
	if ext.K != nil {
		if *ext.K < 1 {
			return bad("toolmesh.k", "must be between 1 and 50")
		}
		q.K = *ext.K
	}
	if ext.MaxIterations != nil {
		if *ext.MaxIterations < 1 {
			return bad("toolmesh.max_iterations", "must be between 1 and 32")
		}
		q.MaxIterations = *ext.MaxIterations
	}
	if ext.TimeoutSeconds != nil {
		if *ext.TimeoutSeconds < 1 {
			return bad("toolmesh.timeout_seconds", "must be between 1 and 600")
		}
		q.TimeoutSeconds = *ext.TimeoutSeconds
	}
	return nil
}

// maxDepth bounds how deeply a function's schema or a call's arguments nest: far more than a
// real schema needs, and far less than what the services' decoders refuse without naming the
// parameter.
const maxDepth = 64

// depth is how deeply JSON text nests its arrays and objects (strings skipped).
func depth(b []byte) int {
	d, most, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			d++
			most = max(most, d)
		case c == ']' || c == '}':
			d--
		}
	}
	return most
}

// article is "a system", "an assistant".
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

// str reads fields[key] into dst when it is a string; a missing or null field leaves dst.
func str(fields map[string]json.RawMessage, key string, dst *string) *badParam {
	v, ok := fields[key]
	if !ok || isNull(v) {
		return nil
	}
	if json.Unmarshal(v, dst) != nil {
		return &badParam{param: key, msg: key + ": must be a string", code: "invalid_type"}
	}
	return nil
}

func boolean(fields map[string]json.RawMessage, key string, dst *bool) *badParam {
	v, ok := fields[key]
	if !ok || isNull(v) {
		return nil
	}
	if json.Unmarshal(v, dst) != nil {
		return &badParam{param: key, msg: key + ": must be a boolean", code: "invalid_type"}
	}
	return nil
}

func isNull(v json.RawMessage) bool {
	t := bytes.TrimSpace(v)
	return len(t) == 0 || string(t) == "null"
}

// strictUnmarshal refuses fields dst does not have, so a misspelt one is not ignored.
func strictUnmarshal(data []byte, dst any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	return d.Decode(dst)
}

// cut shortens a value quoted back in a message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
