// Package errreason marks a gRPC status with why a toolmesh service failed, in the details a
// caller reads instead of the message: a google.rpc.ErrorInfo in the "toolmesh" domain (Error,
// Of), and for bad input a google.rpc.BadRequest naming the field (InvalidField, FieldOf).
// Callers sort errors by code, reason and field, never by the wording of a message, which
// neither grpc-go nor our services promise to keep.
package errreason

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of every reason here.
const Domain = "toolmesh"

// The reasons.
const (
	// ToolResultTooLarge: RESOURCE_EXHAUSTED because a tool's answer was over the limit. The REST
	// front tells it from a rate limit (both RESOURCE_EXHAUSTED): a rate limit is 429 (come back
	// later), an oversized result 502 (the tool's answer is the problem; a retry gets it again).
	ToolResultTooLarge = "TOOL_RESULT_TOO_LARGE"
	// BackendUnavailable: UNAVAILABLE because what the service calls (an MCP server, Qdrant, the
	// model server) is down; the service itself answered. Without it, an UNAVAILABLE comes from
	// the transport: the service could not be reached.
	BackendUnavailable = "BACKEND_UNAVAILABLE"
	// NotReady: UNAVAILABLE because the service or its backend is still starting (the model is
	// loading, the index is syncing); retrying soon helps.
	NotReady = "NOT_READY"
	// BackendUnreadable: UNAVAILABLE because the backend answered something that is not its
	// protocol (a proxy's error page, another service on its port).
	BackendUnreadable = "BACKEND_UNREADABLE"
	// PolicyDenied: PERMISSION_DENIED because internal/policy refused the call; the ErrorInfo's
	// metadata says the action, the tool and the rule.
	PolicyDenied = "POLICY_DENIED"
	// Stopping: UNAVAILABLE because the service is draining before it stops; the caller
	// retries, on another replica when there is one.
	Stopping = "STOPPING"
	// UnknownTool: the executor's catalog has no such tool (NOT_FOUND; or UNAVAILABLE when its
	// server has never listed its tools). Callers label metrics by tool only when a call did
	// not fail with it, so a name anyone can make up never becomes a series.
	UnknownTool = "UNKNOWN_TOOL"
	// ContextTooLong: RESOURCE_EXHAUSTED because the prompt does not fit the model's context even
	// after the inference service left out what it may (earlier turns, lower-ranked tools), or
	// the model server said so. A rate limit is RESOURCE_EXHAUSTED too; this is a request that
	// will never fit as it is (OpenAI's 400 context_length_exceeded), so a retry does not help.
	ContextTooLong = "CONTEXT_TOO_LONG"
	// ToolQuarantined: FAILED_PRECONDITION because the tool is held until an admin approves its
	// definition (mcpServers pinning: enforce): it changed since it was pinned, or it was first
	// seen with findings. `toolmesh tools approve SERVER.TOOL` releases it.
	ToolQuarantined = "TOOL_QUARANTINED"
	// ToolRateLimited: RESOURCE_EXHAUSTED because the caller has made its calls of the tool for
	// now (mcpServers rateLimit, per tool and token); a google.rpc.RetryInfo and the
	// "retry-after" header say when to come back (HTTP 429 with Retry-After).
	ToolRateLimited = "TOOL_RATE_LIMITED"
	// AuditUnavailable: UNAVAILABLE because the api's audit trail cannot be written and fails
	// closed (--audit.on-failure=closed): the call was not made, and the api itself answered.
	AuditUnavailable = "AUDIT_UNAVAILABLE"
)

// Status is a status of code and msg carrying reason.
func Status(code codes.Code, reason, msg string) *status.Status {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain}); err == nil {
		return d
	}
	return st
}

// Error is Status as an error.
func Error(code codes.Code, reason, msg string) error { return Status(code, reason, msg).Err() }

// Of is the toolmesh reason err's status carries, or "" when it carries none (or err is no
// status).
func Of(err error) string { return Info(err).GetReason() }

// Info is the toolmesh ErrorInfo err's status carries (its reason and metadata), or nil.
func Info(err error) *errdetails.ErrorInfo {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return nil
	}
	for _, d := range se.GRPCStatus().Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == Domain {
			return ei
		}
	}
	return nil
}
