package executor

import (
	"encoding/json"
	"unicode/utf8"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// callArguments is the call's arguments decoded, for validation, and, when the caller sent
// them as JSON text (arguments_json), that text, which goes to the server as it came: the
// one parse of the arguments in the mesh is this one. Arguments sent as a Struct (an older
// caller) go to the server as the map.
func callArguments(id string, req *toolmeshv1.ExecutorServiceCallToolRequest) (map[string]any, json.RawMessage, error) {
	raw := req.GetArgumentsJson()
	if raw == nil {
		if args := req.GetArguments(); args != nil {
			return args.AsMap(), nil, nil
		}
		return map[string]any{}, nil, nil
	}
	// encoding/json would turn invalid UTF-8 into U+FFFD for validation and the text would go
	// on as it came: the server would see bytes the schema never judged.
	if !utf8.Valid(raw) {
		return nil, nil, &ValidationError{Tool: id, Violations: []FieldViolation{{Field: "arguments", Description: "invalid UTF-8: strings and names must be UTF-8"}}}
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, nil, &ValidationError{Tool: id, Violations: []FieldViolation{{Field: "arguments", Description: "must be a JSON object of the tool's arguments"}}}
	}
	return m, raw, nil
}
