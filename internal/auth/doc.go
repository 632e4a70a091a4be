// Package auth requires API tokens on the public API's REST and gRPC calls and limits how
// fast each token may call.
//
// # Tokens
//
// Tokens come from a file and from the environment, never from a flag, because flags show up
// in ps and in shell history. The file has one token a line; blank lines and lines starting
// with '#' are ignored:
//
//	# NAME:TOKEN — NAME says which client called, in logs and in Name(ctx)
//	ci-bot:6f1c0e9a2b7d4c3e8f5a1b2c3d4e5f60
//	# a bare TOKEN is named after its line: "file:4"
//	9d2f7b1c4e8a3f6b0c5d2e7a1f4b8c3e
//
// A NAME is 1 to 64 letters, digits, '.', '_' or '-'. A TOKEN is at least MinTokenLen (16)
// visible ASCII characters without spaces (openssl rand -hex 32 makes a good one); a token
// that contains ':' must have a NAME in front. The TOOLMESH_API_TOKENS environment variable
// holds the same entries separated by commas ("ci-bot:6f1c...,ops:...", bare ones named
// "env:1", "env:2", ...). Both sources may be used together; a name or a token used twice is an
// error. With no tokens at all, auth is off and every call goes through.
//
// Errors name the file line or env entry and never contain a token. A token is kept only as
// its SHA-256 digest; a presented token is hashed and compared with every configured digest
// (crypto/subtle, no early exit), so timing reveals neither which token matched nor how much of
// one did. Logs say which client by name and never contain a token.
//
// # What is checked
//
// Every call needs "Authorization: Bearer TOKEN" (gRPC: "authorization" metadata) except
// grpc.health.v1.Health calls and the HTTP paths the caller skips (at least /healthz). A
// missing or wrong token is HTTP 401 with "WWW-Authenticate: Bearer" / codes.Unauthenticated;
// the message says what is wrong (no header, not Bearer, unknown token). gRPC reflection needs
// a token too: grpcurl -H 'authorization: Bearer TOKEN' ...
//
// With a rate limit, each token has its own bucket of RateLimit requests per second and
// RateBurst at once. A call over it is HTTP 429 with Retry-After / codes.ResourceExhausted
// with a "retry-after" header, both in whole seconds and at least 1. Guard.Charge takes more
// from the caller's bucket: the api charges each tool call a query makes, so the limit bounds
// work and not only requests.
//
// With MaxInFlight, a token may have at most that many requests running at once (a streamed
// question holds its slot until it ends; a call posted to a legacy MCP SSE session, answered 202,
// until its result is written on the stream: see Hold); one more is refused the same way, with a
// wait of 1 s.
//
// Failed attempts (an unknown token) are counted per client address (its IP; for IPv6 its
// /64): FailuresPerMinute at once, then that many a minute. A call with no token (no or another
// scheme, an empty one) is refused 401 but guesses nothing and costs nothing, so a web page
// cannot spend the budget through the user's browser. An address over the budget gets the same
// 429 whether its token is right or wrong, so guessing goes no faster; only a token that has
// authenticated from that address within the last day is still let in, so that someone else's
// failures never lock out a token already in use there. The REST front checks the token before it reads the body. Refusals are logged sampled (a burst,
// then a line every few seconds saying how many were left out), never one line a try.
//
// # Wiring
//
// The api's flags, env and constructor (the env is read by the caller, not by this package):
//
//	// api.Config
//	Auth auth.Config
//	// api.Config.RegisterFlags: --api.tokens-file, --api.rate-limit, --api.rate-burst, --api.max-in-flight,
//	// --api.auth-failures-per-minute
//	c.Auth.RegisterFlags(fs, "api.")
//	// api.Config.Validate
//	if err := c.Auth.Validate(); err != nil { return err }
//
//	// initAPI (or api.New)
//	guard, err := auth.New(cfg.API.Auth, os.Getenv(auth.EnvTokens), logger)
//	if err != nil { return nil, err }
//	g, err := server.NewGRPC(cfg.API.GRPCAddr, logger, drain, guard.ServerOptions()...)
//
// The REST gateway calls that gRPC server over loopback and forwards the Authorization header
// as metadata by default, so the gRPC interceptor counts the gateway routes against the rate
// limit once. The gateway marks its calls (ForwardedMetadata), turns "retry-after" back into
// Retry-After and fixes the 401 challenge; Guard.HTTP checks every request but /healthz before
// the body is read, counting the plain handlers (/readyz, /openapi.json, /metrics, ...) and
// leaving the count of the gateway's routes to the interceptor:
//
//	gw := runtime.NewServeMux(
//		// ...the existing options...
//		runtime.WithMetadata(guard.ForwardedMetadata),
//		runtime.WithOutgoingHeaderMatcher(auth.OutgoingHeaderMatcher),
//		runtime.WithErrorHandler(auth.GatewayErrorHandler(nil)),
//	)
//	// ...mux.Handle("/", gw) and the plain handlers as now...
//	h := guard.HTTP(checkBody(max, mux), auth.Paths("/healthz"), auth.Paths("/v1/"))
//
// Handlers read the caller with auth.Name(ctx), e.g. logger.Info("query", "client", auth.Name(ctx)).
package auth
