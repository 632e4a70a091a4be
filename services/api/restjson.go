package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// restJSON is the REST gateway's marshaler: runtime.JSONPb, except that a tool call's
// arguments and structured result travel as the JSON text they are. The body's "arguments"
// go to the api's gRPC server as the client wrote them (CallToolRequest.arguments_json), not
// decoded into a google.protobuf.Struct, and the executor parses them once, to validate them;
// a CallToolResponse's structured_content_json is written as "structured_content", the text
// the MCP server sent. Everything else is JSONPb's.
type restJSON struct{ *runtime.JSONPb }

// NewDecoder reads a CallToolRequest's body with its arguments kept as text.
func (m restJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		req, ok := v.(*toolmeshv1.CallToolRequest)
		if !ok {
			return m.JSONPb.NewDecoder(r).Decode(v)
		}
		return m.decodeCall(r, req)
	})
}

// decodeCall reads the body's top level only: "arguments" is kept as the text it is (a scan,
// not a decode into values), every other field goes through JSONPb as it would have, so that an
// unknown field or a bad value is refused as before.
func (m restJSON) decodeCall(r io.Reader, req *toolmeshv1.CallToolRequest) error {
	body, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return io.EOF // no body: the gateway takes it as an empty request
	}
	d := json.NewDecoder(bytes.NewReader(body))
	var fields map[string]json.RawMessage
	if err := d.Decode(&fields); err != nil {
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after request body")
	}
	if fields == nil {
		return nil // null
	}
	args, hasArgs := fields["arguments"]
	delete(fields, "arguments")
	if len(fields) > 0 {
		rest, err := json.Marshal(fields)
		if err != nil {
			return err
		}
		if err := m.JSONPb.Unmarshal(rest, req); err != nil {
			return err
		}
	}
	switch {
	case !hasArgs || string(args) == "null":
	case args[0] != '{':
		return errors.New("arguments: must be a JSON object of the tool's arguments")
	case !utf8.Valid(args):
		return errors.New("arguments: invalid UTF-8 (strings and names must be UTF-8)")
	default:
		req.Arguments, req.ArgumentsJson = nil, args
	}
	return nil
}

// Marshal writes a CallToolResponse with the server's structured content text; anything else
// as JSONPb does.
func (m restJSON) Marshal(v any) ([]byte, error) {
	resp, ok := v.(*toolmeshv1.CallToolResponse)
	if !ok {
		return m.JSONPb.Marshal(v)
	}
	b, err := m.JSONPb.Marshal(&toolmeshv1.CallToolResponse{Content: resp.GetContent(), StructuredContent: resp.GetStructuredContent(),
		IsError: resp.GetIsError(), DurationMs: resp.GetDurationMs()})
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("call response: %w", err)
	}
	// JSONPb writes the bytes field (empty, as base64) with the defaults: it is for gRPC only.
	delete(fields, "structured_content_json")
	if raw := resp.GetStructuredContentJson(); raw != nil {
		fields["structured_content"] = raw
	}
	// As JSONPb writes text: <, > and & as they are, here in the server's text too.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}
