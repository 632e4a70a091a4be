// Package jsonrpcid writes a JSON-RPC request id as the OpenTelemetry attribute
// jsonrpc.request.id wants it: the number or the string itself. The executor (an MCP client),
// the shipped MCP servers and the api's MCP face all trace MCP requests with it.
package jsonrpcid

import (
	"encoding/json"
	"strconv"

	"github.com/mark3labs/mcp-go/mcp"
)

// String is id as text, or "" when it is none of the forms an id takes (a string, a number as
// mcp-go or encoding/json decodes it, or mcp-go's RequestId holding one).
func String(id any) string {
	switch v := id.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case json.Number:
		return v.String()
	case mcp.RequestId:
		return String(v.Value())
	case *mcp.RequestId:
		if v != nil {
			return String(v.Value())
		}
	}
	return ""
}
