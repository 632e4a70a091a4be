// Package toolresult marks the status of a tool call whose result was too large to pass on, so
// the REST front can tell it from a rate limit: both are RESOURCE_EXHAUSTED over gRPC, but a
// rate limit is 429 (come back later) and an oversized result is 502 (the tool's answer is
// the problem, and retrying gets the same answer).
package toolresult

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reason and Domain are the google.rpc.ErrorInfo of the status.
const (
	Reason = "TOOL_RESULT_TOO_LARGE"
	Domain = "toolmesh"
)

// TooLarge is RESOURCE_EXHAUSTED with msg and the ErrorInfo detail.
func TooLarge(msg string) error {
	st := status.New(codes.ResourceExhausted, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: Reason, Domain: Domain}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// IsTooLarge reports whether err is a status made by TooLarge.
func IsTooLarge(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false
	}
	for _, d := range se.GRPCStatus().Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == Reason && ei.GetDomain() == Domain {
			return true
		}
	}
	return false
}
