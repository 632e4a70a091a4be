package errreason

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestOf(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"made by Error", Error(codes.ResourceExhausted, ToolResultTooLarge, "result of tool \"x.y\" is 2000000 bytes"), ToolResultTooLarge},
		{"wrapped", fmt.Errorf("call: %w", Error(codes.Unavailable, BackendUnavailable, "down")), BackendUnavailable},
		{"a rate limit", status.Error(codes.ResourceExhausted, "rate limit"), ""},
		{"not a status", errors.New("plain"), ""},
		{"nil", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.err); got != tc.want {
				t.Errorf("Of(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
	if st := status.Convert(Error(codes.ResourceExhausted, ToolResultTooLarge, "big")); st.Code() != codes.ResourceExhausted || st.Message() != "big" {
		t.Errorf("Error = %v %q, want ResourceExhausted \"big\"", st.Code(), st.Message())
	}
}

func TestFieldOf(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		wantField string
		wantOK    bool
	}{
		{"made by InvalidField", InvalidField("k", "must be 1..50"), "k", true},
		{"wrapped", fmt.Errorf("search: %w", InvalidField("q", "required")), "q", true},
		{"INVALID_ARGUMENT without a field", status.Error(codes.InvalidArgument, "bad"), "", false},
		{"another code", Error(codes.NotFound, UnknownTool, "no tool"), "", false},
		{"not a status", errors.New("plain"), "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := FieldOf(tc.err); got != tc.wantField || ok != tc.wantOK {
				t.Errorf("FieldOf(%v) = %q, %v; want %q, %v", tc.err, got, ok, tc.wantField, tc.wantOK)
			}
		})
	}
	if st := status.Convert(InvalidField("k", "must be 1..50")); st.Code() != codes.InvalidArgument || st.Message() != "k: must be 1..50" {
		t.Errorf("InvalidField = %v %q, want InvalidArgument \"k: must be 1..50\"", st.Code(), st.Message())
	}
}
