package auth

import (
	"context"
	"crypto/subtle"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"
)

// The REST gateway needs nothing to send the token on: grpc-gateway forwards the HTTP
// Authorization header as "authorization" metadata by default. It marks its calls with
// ForwardedMetadata, and needs two things on the way back, all given to runtime.NewServeMux.

// gatewayHeader carries the Guard's per-process key on the calls the REST gateway forwards.
const gatewayHeader = "x-toolmesh-gateway"

// ForwardedMetadata is for runtime.WithMetadata: it marks a call as forwarded by this
// process's REST gateway, whose Guard.HTTP has already checked the client by its address, so
// that the gRPC interceptor does not count every REST client's failures as the gateway's
// loopback address. The mark is a random key made when the Guard is, so no other client can
// forge it.
func (g *Guard) ForwardedMetadata(context.Context, *http.Request) metadata.MD {
	if !g.Enabled() {
		return nil
	}
	return metadata.Pairs(gatewayHeader, g.gatewayKey)
}

// fromGateway reports whether md carries the gateway's key, and nothing else under its name
// (a REST client can add metadata with Grpc-Metadata- headers).
func (g *Guard) fromGateway(md metadata.MD) bool {
	v := md.Get(gatewayHeader)
	return len(v) == 1 && subtle.ConstantTimeCompare([]byte(v[0]), []byte(g.gatewayKey)) == 1
}

// OutgoingHeaderMatcher is for runtime.WithOutgoingHeaderMatcher: it turns the "retry-after"
// and "www-authenticate" header metadata of a refused call, and "toolmesh-result-cut" of a call
// whose result was cut, into the HTTP headers of those names, and keeps the gateway's default
// ("Grpc-Metadata-" + key) for every other key.
func OutgoingHeaderMatcher(key string) (string, bool) {
	switch key {
	case "retry-after":
		return "Retry-After", true
	case "www-authenticate":
		return "WWW-Authenticate", true
	case "toolmesh-result-cut":
		return "Toolmesh-Result-Cut", true // a tool's result was cut to its limit
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
