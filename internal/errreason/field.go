package errreason

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// InvalidField is the INVALID_ARGUMENT status every service returns for bad input: the message
// "FIELD: WHY", and a google.rpc.BadRequest detail naming the field for clients that read it.
func InvalidField(field, why string) error {
	st := status.New(codes.InvalidArgument, field+": "+why)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: why}}}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// FieldOf is the field an error made by InvalidField names, and whether it names one.
func FieldOf(err error) (string, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return "", false
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField(), true
		}
	}
	return "", false
}
