package auth

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// The REST gateway needs nothing to send the token on: grpc-gateway forwards the HTTP
// Authorization header as "authorization" metadata by default. It needs two things on the
// way back, both given to runtime.NewServeMux.

// OutgoingHeaderMatcher is for runtime.WithOutgoingHeaderMatcher: it turns the "retry-after"
// and "www-authenticate" header metadata of a refused call into the HTTP headers of those
// names, and keeps the gateway's default ("Grpc-Metadata-" + key) for every other key.
func OutgoingHeaderMatcher(key string) (string, bool) {
	switch key {
	case "retry-after":
		return "Retry-After", true
	case "www-authenticate":
		return "WWW-Authenticate", true
	}
	return runtime.MetadataHeaderPrefix + key, true
}

// GatewayErrorHandler wraps next (runtime.DefaultHTTPErrorHandler when nil) for
// runtime.WithErrorHandler. The default handler sets WWW-Authenticate to the status message on
// a 401, which is not a challenge a client understands; this makes it "Bearer", as Guard.HTTP
// sends, and leaves every other response alone. (Streaming routes do not use the error handler;
// their 401 gets "Bearer" from the header metadata through OutgoingHeaderMatcher.)
func GatewayErrorHandler(next runtime.ErrorHandlerFunc) runtime.ErrorHandlerFunc {
	if next == nil {
		next = runtime.DefaultHTTPErrorHandler
	}
	return func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		next(ctx, mux, m, challengeWriter{w}, r, err)
	}
}

// challengeWriter fixes WWW-Authenticate at the last moment headers can change.
type challengeWriter struct{ http.ResponseWriter }

func (c challengeWriter) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		c.Header().Set("WWW-Authenticate", "Bearer")
	}
	c.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the real writer.
func (c challengeWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
