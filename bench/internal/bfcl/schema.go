// Package bfcl reads what the benchmark programs share of the Berkeley Function Calling
// Leaderboard data.
package bfcl

// JSONSchema converts BFCL's schema dialect to JSON Schema: "dict" is object, "float" is
// number, "tuple" is array, "any" is no type; BFCL's non-standard "optional" flag is dropped.
// A nil schema is the empty schema.
func JSONSchema(v any) any {
	switch v := v.(type) {
	case nil:
		return map[string]any{}
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			switch k {
			case "optional":
				continue
			case "type":
				if s, ok := e.(string); ok {
					switch s {
					case "dict":
						e = "object"
					case "float":
						e = "number"
					case "tuple":
						e = "array"
					case "any":
						continue
					}
				}
			case "properties":
				if props, ok := e.(map[string]any); ok {
					np := make(map[string]any, len(props))
					for name, s := range props {
						np[name] = JSONSchema(s)
					}
					e = np
				}
			case "items", "additionalProperties":
				e = JSONSchema(e)
			}
			out[k] = e
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = JSONSchema(e)
		}
		return out
	}
	return v
}
