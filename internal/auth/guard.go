package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/logsample"
)

// Config says where the tokens file is and how fast each token may call. The tokens
// themselves are never a flag: flags show up in ps and in shell history.
type Config struct {
	TokensFile string
	// RateLimit is requests per second per token; 0 means no limit.
	RateLimit float64
	// RateBurst is how many requests a token may make at once; 0 means RateLimit rounded up.
	RateBurst int
	// MaxInFlight is how many requests one token may have in flight at once; 0 means no limit.
	MaxInFlight int
	// FailuresPerMinute is how many failed authentication attempts (bearer tokens that match
	// none; a call with no token is not one) one client address may make at once, and then per
	// minute; 0 turns the throttle off. See admit for who is let through past it.
	FailuresPerMinute int

	prefix string // of the flag names, so Validate can name the flag
}

// RegisterFlags sets the defaults and binds them to prefix+"tokens-file", prefix+"rate-limit"
// and prefix+"rate-burst" (the api passes "api.").
func (c *Config) RegisterFlags(fs *flag.FlagSet, prefix string) {
	c.prefix = prefix
	fs.StringVar(&c.TokensFile, prefix+"tokens-file", "", "file of API tokens, one NAME:TOKEN (or bare TOKEN) a line; $"+EnvTokens+" adds comma-separated ones; no tokens turns auth off")
	fs.Float64Var(&c.RateLimit, prefix+"rate-limit", 0, "requests per second allowed to each API token (0 = no limit)")
	fs.IntVar(&c.RateBurst, prefix+"rate-burst", 0, "requests an API token may make at once above its rate (0 = the rate rounded up)")
	fs.IntVar(&c.MaxInFlight, prefix+"max-in-flight", DefaultMaxInFlight,
		"requests one API token may have in flight at once; more are refused with 429 (0 = no limit; without tokens there is none). A question holds its slot for up to its timeout, so this bounds how much of the model and the MCP servers one client can hold")
	// 10 covers a person retyping a token and a client retrying with a stale one; past it a
	// guesser gets one try every 6 s, and the log one line every few seconds, however fast it asks.
	fs.IntVar(&c.FailuresPerMinute, prefix+"auth-failures-per-minute", 10, "unknown tokens one client address may present at once and then per minute before it gets 429 (a request with no token costs nothing; a token that has been used from the address still gets in; 0 = no limit)")
}

// DefaultMaxInFlight is half the executor's default per-server concurrency (16): one token
// cannot fill an MCP server's slots, and a console (a few streams at once) and a script still fit.
const DefaultMaxInFlight = 8

// Validate reports the first bad value, naming its flag.
func (c *Config) Validate() error {
	if math.IsNaN(c.RateLimit) || math.IsInf(c.RateLimit, 0) || c.RateLimit < 0 {
		return fmt.Errorf("%srate-limit: %v is not a number of requests per second >= 0", c.prefix, c.RateLimit)
	}
	if c.RateBurst < 0 {
		return fmt.Errorf("%srate-burst: %d is negative", c.prefix, c.RateBurst)
	}
	if c.MaxInFlight < 0 {
		return fmt.Errorf("%smax-in-flight: %d is negative", c.prefix, c.MaxInFlight)
	}
	if c.FailuresPerMinute < 0 {
		return fmt.Errorf("%sauth-failures-per-minute: %d is negative", c.prefix, c.FailuresPerMinute)
	}
	return nil
}

// Guard checks bearer tokens and per-token rate limits for HTTP handlers (Guard.HTTP) and gRPC
// servers (Guard.ServerOptions). A Guard without tokens, and a nil *Guard, let everything through.
type Guard struct {
	tokens []Token
	// limiters[i] limits tokens[i]; nil when there is no rate limit.
	limiters []*rate.Limiter
	// inFlight[i] counts tokens[i]'s requests in flight; nil when there is no limit.
	inFlight    []atomic.Int32
	maxInFlight int32
	// index finds a token's position by its name, for Charge.
	index map[string]int
	// fails throttles failed attempts per client address; nil when off.
	fails  *throttle
	logger *slog.Logger
	// log takes the refusals, which a client can cause at will, on a bounded budget.
	log *logsample.Sampler
	// gatewayKey marks the calls the REST gateway forwards, whose client was checked already
	// (see ForwardedMetadata).
	gatewayKey string
	// now is the clock the limiters read; tests stop it.
	now func() time.Time
}

// New loads the tokens from cfg.TokensFile and env (the caller's os.Getenv(EnvTokens)) and
// returns the Guard that checks them.
func New(cfg Config, env string, logger *slog.Logger) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tokens, err := Load(cfg.TokensFile, env)
	if err != nil {
		return nil, err
	}
	g := &Guard{tokens: tokens, logger: logger, fails: newThrottle(cfg.FailuresPerMinute),
		log: logsample.New(logger, 10, 2*time.Second), gatewayKey: rand.Text()}
	if len(tokens) == 0 {
		if cfg.RateLimit > 0 {
			logger.Warn("api rate limit has no effect: no API tokens are configured, so calls are neither authenticated nor limited")
		}
		return g, nil
	}
	names := make([]string, len(tokens))
	g.index = make(map[string]int, len(tokens))
	for i, t := range tokens {
		names[i] = t.Name
		g.index[t.Name] = i
	}
	attrs := []any{"tokens", len(tokens), "names", names}
	if cfg.MaxInFlight > 0 {
		g.inFlight = make([]atomic.Int32, len(tokens))
		g.maxInFlight = int32(min(cfg.MaxInFlight, math.MaxInt32))
		attrs = append(attrs, "max_in_flight", cfg.MaxInFlight)
	}
	if cfg.RateLimit > 0 {
		burst := cfg.RateBurst
		if burst == 0 {
			burst = max(1, int(math.Ceil(cfg.RateLimit)))
		}
		g.limiters = make([]*rate.Limiter, len(tokens))
		for i := range g.limiters {
			g.limiters[i] = rate.NewLimiter(rate.Limit(cfg.RateLimit), burst)
		}
		attrs = append(attrs, "rate_limit", cfg.RateLimit, "rate_burst", burst)
	}
	logger.Info("api tokens required", attrs...)
	return g, nil
}

// Enabled reports whether tokens are configured, that is whether calls are checked at all.
func (g *Guard) Enabled() bool { return g != nil && len(g.tokens) > 0 }

// Names lists the configured tokens' names, in the order they were loaded.
func (g *Guard) Names() []string {
	if g == nil {
		return nil
	}
	out := make([]string, len(g.tokens))
	for i, t := range g.tokens {
		out[i] = t.Name
	}
	return out
}

type nameKey struct{}

// Name is the name of the token that authenticated the call in ctx, or "" when auth is off or
// the call needed no token. It is safe to log; the token itself is never in the context.
func Name(ctx context.Context) string {
	n, _ := ctx.Value(nameKey{}).(string)
	return n
}

func withName(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, nameKey{}, name)
}

// denial is why a call was refused, in terms both transports can render.
type denial struct {
	code    codes.Code // Unauthenticated or ResourceExhausted
	message string     // for the client and the log; never contains the token
	retry   int        // whole seconds, for ResourceExhausted
	name    string     // the client, when the token was good but over its limit
	// throttled: the client address is over its budget of failed attempts.
	throttled bool
}

func (d *denial) Error() string { return d.message }

// admit checks the Authorization values of one call from client (its address, for the failure
// throttle; "" skips the throttle) and, when count is set, takes a slot of the token's requests
// in flight and one request from its rate limit. It returns the token's index (-1 when it took
// no slot) and name, or why the call is refused; a call admitted with a slot must be followed by
// leave(i) once it has ended.
//
// Only a token that matches none is a failed attempt. A call that presents none (no
// Authorization, another scheme, an empty one) guesses nothing: it is refused, but costs its
// address nothing, so that requests a web page makes through the user's browser (which can
// carry no Authorization without the api's consent) cannot lock that address out.
//
// A client over its failure budget is refused with 429 whether its token is right or wrong, so
// it learns no faster than the budget allows, except for a token that has authenticated from
// the same address before (throttle.knows): someone else's failures, a guesser sharing the
// address (every local user shares 127.0.0.1), must not lock out a token already in use there,
// and letting it through tells the guesser nothing it did not know. A right token never seen
// from the address waits like a guess, or answering it would say that the guess was right.
func (g *Guard) admit(values []string, client string, count bool) (int, string, *denial) {
	secret, err := bearer(values)
	if err != nil {
		return -1, "", &denial{code: codes.Unauthenticated, message: err.Error()}
	}
	now := g.clock()
	i := g.lookup(secret)
	if wait := g.fails.wait(client, now); wait > 0 && !g.fails.knows(client, i, now) {
		secs := max(1, int(math.Ceil(wait.Seconds())))
		return -1, "", &denial{code: codes.ResourceExhausted, retry: secs, throttled: true,
			message: fmt.Sprintf("too many failed authentication attempts from this address: retry after %ds", secs)}
	}
	if i < 0 {
		g.fails.fail(client, now)
		return -1, "", &denial{code: codes.Unauthenticated, message: "unknown token"}
	}
	g.fails.succeed(client, i, now)
	name := g.tokens[i].Name
	if !count {
		return -1, name, nil
	}
	if g.inFlight != nil {
		if g.inFlight[i].Add(1) > g.maxInFlight {
			g.inFlight[i].Add(-1)
			// Nothing says when a slot frees up; a second is a polite first wait.
			return -1, name, &denial{code: codes.ResourceExhausted, name: name, retry: 1,
				message: fmt.Sprintf("too many requests in flight for %s: at most %d at once", name, g.maxInFlight)}
		}
	}
	if d := g.take(i, 1, "rate limit exceeded for %[1]s: retry after %[2]ds"); d != nil {
		g.leave(i)
		return -1, name, d
	}
	return i, name, nil
}

// leave frees the slot admit took for token i; i < 0 is no slot.
func (g *Guard) leave(i int) {
	if i >= 0 && g.inFlight != nil {
		g.inFlight[i].Add(-1)
	}
}

// take reserves n requests of token i's rate limit, or returns the denial with format's
// message (%[1]s the name, %[2]d the seconds to wait).
func (g *Guard) take(i, n int, format string) *denial {
	if g.limiters == nil {
		return nil
	}
	name := g.tokens[i].Name
	// Reserve and cancel rather than Allow, because the reservation says how long to wait.
	now := g.clock()
	lim := g.limiters[i]
	if n > lim.Burst() {
		// Never possible: waiting does not help.
		return &denial{code: codes.ResourceExhausted, name: name, retry: int(math.Ceil(float64(n) / float64(lim.Limit()))),
			message: fmt.Sprintf("rate limit of %s: %d requests at once are more than its burst of %d", name, n, lim.Burst())}
	}
	r := lim.ReserveN(now, n)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		secs := max(1, int(math.Ceil(d.Seconds())))
		return &denial{code: codes.ResourceExhausted, name: name, retry: secs, message: fmt.Sprintf(format, name, secs)}
	}
	return nil
}

func (g *Guard) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// Charge takes n more requests from the rate limit of the token that authenticated ctx. The
// api charges each tool call a query makes this way, so that the rate limit bounds work, not
// only requests: one request that makes 16 calls costs 17. Over the limit it returns a
// ResourceExhausted status and sets the call's "retry-after" header, as a refused request gets;
// without tokens, a rate limit or a token in ctx it returns nil.
func (g *Guard) Charge(ctx context.Context, n int) error {
	if !g.Enabled() || g.limiters == nil || n <= 0 {
		return nil
	}
	i, ok := g.index[Name(ctx)]
	if !ok {
		return nil
	}
	d := g.take(i, n, "rate limit exceeded for %[1]s by the tool calls of this request: retry after %[2]ds")
	if d == nil {
		return nil
	}
	_ = grpc.SetHeader(ctx, d.header())
	g.logDenial(ctx, d, "calls", n)
	return status.Error(d.code, d.message)
}

// bearer returns the token of the one "Bearer TOKEN" value; its errors say what is wrong with
// the header without quoting it.
func bearer(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", errors.New(`missing Authorization header: send "Authorization: Bearer TOKEN"`)
	case 1:
	default:
		return "", errors.New("more than one Authorization header")
	}
	scheme, rest, _ := strings.Cut(strings.TrimSpace(values[0]), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", errors.New(`the Authorization header is not a Bearer token: send "Authorization: Bearer TOKEN"`)
	}
	secret := strings.TrimSpace(rest)
	if secret == "" {
		return "", errors.New("empty Bearer token in the Authorization header")
	}
	return secret, nil
}

// compare is subtle.ConstantTimeCompare; a test counts its calls.
var compare = subtle.ConstantTimeCompare

// lookup returns the index of the token whose secret is secret, or -1. It compares the digest
// of secret with every token's digest and never stops early, so how long it takes says neither
// which token matched nor, because digests of different lengths' secrets are all 32 bytes, how
// much of one matched.
func (g *Guard) lookup(secret string) int {
	d := sha256.Sum256([]byte(secret))
	found := -1
	for i := range g.tokens {
		found = subtle.ConstantTimeSelect(compare(d[:], g.tokens[i].digest[:]), i, found)
	}
	return found
}

// logDenial logs a refused call with where it came from, sampled: a client that keeps failing
// makes a line every few seconds, which says how many were left out. attrs must not include
// the token.
func (g *Guard) logDenial(ctx context.Context, d *denial, attrs ...any) {
	attrs = append(attrs, "reason", d.message)
	if d.name != "" {
		attrs = append(attrs, "client", d.name)
	}
	g.log.Log(ctx, slog.LevelInfo, "api call refused", attrs...)
}
