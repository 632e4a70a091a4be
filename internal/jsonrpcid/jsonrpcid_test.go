package jsonrpcid

import (
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestString(t *testing.T) {
	id := mcp.NewRequestId(int64(7))
	for _, tc := range []struct {
		in   any
		want string
	}{
		{"abc", "abc"}, {int64(42), "42"}, {float64(3), "3"}, {1.5, "1.5"}, {json.Number("12"), "12"},
		{mcp.NewRequestId("x-1"), "x-1"}, {id, "7"}, {&id, "7"}, {(*mcp.RequestId)(nil), ""}, {nil, ""}, {true, ""},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%#v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
