package toolresult

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestIsTooLarge(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"made by TooLarge", TooLarge("result of tool \"x.y\" is 2000000 bytes"), true},
		{"wrapped", fmt.Errorf("call: %w", TooLarge("big")), true},
		{"a rate limit", status.Error(codes.ResourceExhausted, "rate limit"), false},
		{"not a status", errors.New("plain"), false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsTooLarge(tc.err); got != tc.want {
				t.Errorf("IsTooLarge(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	if st := status.Convert(TooLarge("big")); st.Code() != codes.ResourceExhausted || st.Message() != "big" {
		t.Errorf("TooLarge = %v %q, want ResourceExhausted \"big\"", st.Code(), st.Message())
	}
}
