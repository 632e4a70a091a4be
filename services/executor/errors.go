package executor

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors; handler.go maps them (and the typed errors below) to gRPC codes.
var (
	// ErrUnknownTool: the tool id names no server or no tool of that server.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrUnavailable: the server is not connected, or its connection broke during the call.
	ErrUnavailable = errors.New("server unavailable")
	// ErrTimeout: the call did not finish within its timeout.
	ErrTimeout = errors.New("tool call timed out")
	// ErrSessionExpired: the server forgot our session (HTTP 404 for its Mcp-Session-Id).
	ErrSessionExpired = errors.New("mcp session expired")
	// ErrResultTooLarge: the tool's answer is larger than its limit and no result can be
	// cut from it (its first bytes hold no result: an error answer, a notification).
	ErrResultTooLarge = errors.New("tool result too large")
	// ErrStopped: the executor is shutting down.
	ErrStopped = errors.New("executor stopped")
)

// unknownToolError names the tool that is not in the catalog.
type unknownToolError struct{ id string }

func (e *unknownToolError) Error() string { return fmt.Sprintf("unknown tool %q", e.id) }
func (e *unknownToolError) Is(target error) bool {
	return target == ErrUnknownTool
}

// refusedError says which limit a listed tool breaks: the tool is listed in
// ListServers as refused, and never indexed or called.
type refusedError struct{ reason string }

func (e *refusedError) Error() string { return e.reason }

// refusedToolError is a call to a refused tool.
type refusedToolError struct{ id, reason string }

func (e *refusedToolError) Error() string {
	return fmt.Sprintf("tool %q is not callable: refused when its server listed it: %s", e.id, e.reason)
}
func (e *refusedToolError) Is(target error) bool { return target == ErrUnknownTool }

// listLimitError: a tools/list broke executor.max-tools-per-server or
// executor.max-list-bytes. The listing stops there; the catalog keeps the
// server's last good tools.
type listLimitError struct {
	tools, pages int // tools in the pages read, when maxTools broke
	maxTools     int
	bytes        int64 // bytes read, when maxBytes broke
	over         bool  // bytes is a lower bound: reading stopped there
	maxBytes     int
}

func (e *listLimitError) Error() string {
	if e.maxTools > 0 {
		return fmt.Sprintf("the server lists more than %d tools (%d in the first %d pages), the limit (executor.max-tools-per-server)", e.maxTools, e.tools, e.pages)
	}
	size := fmt.Sprintf("%d bytes", e.bytes)
	if e.over {
		size = fmt.Sprintf("more than %d bytes", e.bytes)
	}
	return fmt.Sprintf("the tool list is %s, over the %d-byte limit (executor.max-list-bytes)", size, e.maxBytes)
}

// lostError: a request failed because the connection is gone.
type lostError struct{ err error }

func (e *lostError) Error() string { return e.err.Error() }
func (e *lostError) Unwrap() error { return e.err }

// notInCatalogError: the tool is not in the catalog, and err says more (its
// server is down, say). handler.go marks it UNKNOWN_TOOL.
type notInCatalogError struct{ err error }

func (e *notInCatalogError) Error() string { return e.err.Error() }
func (e *notInCatalogError) Unwrap() error { return e.err }

// unavailableError says which server is down and why.
type unavailableError struct {
	server string
	reason string
}

func (e *unavailableError) Error() string {
	if e.reason == "" {
		return fmt.Sprintf("server %q is unavailable", e.server)
	}
	return fmt.Sprintf("server %q is unavailable: %s", e.server, e.reason)
}
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// timeoutError names the tool and the timeout it hit.
type timeoutError struct {
	tool    string
	timeout time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("tool %q timed out after %s", e.tool, e.timeout)
}
func (e *timeoutError) Is(target error) bool { return target == ErrTimeout }

// resultTooLargeError names the tool, how large its result was and the limit.
// size is a lower bound when over is set: reading stopped at the limit.
type resultTooLargeError struct {
	tool   string
	size   int64
	over   bool
	limit  int
	source string // the setting of the limit; "" is executor.max-result-bytes
}

func (e *resultTooLargeError) Error() string {
	size := fmt.Sprintf("%d bytes", e.size)
	if e.over {
		size = fmt.Sprintf("more than %d bytes", e.size)
	}
	source := e.source
	if source == "" {
		source = "executor.max-result-bytes"
	}
	return fmt.Sprintf("result of tool %q is %s, over the %d-byte limit (%s), and no result could be cut from it", e.tool, size, e.limit, source)
}
func (e *resultTooLargeError) Is(target error) bool { return target == ErrResultTooLarge }

// FieldViolation is one argument that failed validation.
type FieldViolation struct {
	// Field is the JSON path of the argument, e.g. "arguments.a".
	Field string
	// Description is the broken rule, e.g. "got string, want number".
	Description string
}

// ValidationError lists why a call's arguments do not match the tool's input schema.
type ValidationError struct {
	Tool       string
	Violations []FieldViolation
}

func (e *ValidationError) Error() string {
	msg := ""
	for i, v := range e.Violations {
		if i > 0 {
			msg += "; "
		}
		msg += v.Field + ": " + v.Description
	}
	return msg
}

// ServerError is a JSON-RPC error the MCP server answered the call with.
type ServerError struct {
	Server string
	Err    error
}

func (e *ServerError) Error() string { return fmt.Sprintf("server %q: %v", e.Server, e.Err) }
func (e *ServerError) Unwrap() error { return e.Err }
