package executor

import (
	"encoding/json"

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
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, nil, &ValidationError{Tool: id, Violations: []FieldViolation{{Field: "arguments", Description: "must be a JSON object of the tool's arguments"}}}
	}
	return m, raw, nil
}
