package llmhttp

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/internal/errreason"
)

// TestContextExceeded: the words each server uses for a prompt over the context, as both
// backends read them, and a status a user can tell from a rate limit.
func TestContextExceeded(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want bool
	}{
		{"the request exceeds the available context size, try increasing it", true}, // llama-server
		{"This model's maximum context length is 4096 tokens.", true},               // OpenAI, vLLM
		{"Input is too large to process. Increase the physical batch size", true},   // llama-server embeddings
		{"prompt is too long: 5000 tokens > 4096 maximum", true},
		{"Rate limit reached for requests", false},
		{"", false},
	} {
		if got := ContextExceeded(tc.msg); got != tc.want {
			t.Errorf("ContextExceeded(%q) = %v, want %v", tc.msg, got, tc.want)
		}
	}
	st := StatusOf(codes.ResourceExhausted, "too long", errors.Join(errors.New("x"), ErrContextExceeded))
	if errreason.Of(st.Err()) != errreason.ContextTooLong {
		t.Errorf("StatusOf(ResourceExhausted, ErrContextExceeded) reason = %q, want %q", errreason.Of(st.Err()), errreason.ContextTooLong)
	}
	if st := StatusOf(codes.ResourceExhausted, "slow down", errors.New("429")); errreason.Of(st.Err()) == errreason.ContextTooLong {
		t.Error("a rate limit reads as a prompt over the context")
	}
}
