// Package toolargs reads and checks tool call arguments for the MCP servers
// toolmesh ships.
package toolargs

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// Number returns the finite number argument key. JSON numbers are accepted,
// and so are numeric strings ("2.5"), which language models sometimes send.
func Number(req mcp.CallToolRequest, key string) (float64, error) {
	raw, ok := req.GetArguments()[key]
	if !ok || raw == nil {
		return 0, fmt.Errorf("missing required argument %q (a number)", key)
	}
	var v float64
	switch x := raw.(type) {
	case float64:
		v = x
	case float32:
		v = float64(x)
	case int:
		v = float64(x)
	case int64:
		v = float64(x)
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, fmt.Errorf("argument %q must be a number, got %q", key, x.String())
		}
		v = f
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, fmt.Errorf("argument %q must be a number, got %q", key, x)
		}
		v = f
	default:
		return 0, fmt.Errorf("argument %q must be a number, got %T", key, raw)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("argument %q must be a finite number", key)
	}
	return v, nil
}
