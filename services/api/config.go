package api

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"time"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/audit"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/secret"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/webguard"
	"github.com/toolmesh/toolmesh/services/api/mcpface"
)

// Config is the api target's configuration.
type Config struct {
	HTTPAddr      string
	GRPCAddr      string
	ExecutorAddr  string
	RetrieverAddr string
	InferenceAddr string
	// CallTimeout bounds one tool call made through the api; the executor applies its own too.
	CallTimeout time.Duration
	// RPCTimeout bounds every other call to a dependency.
	RPCTimeout   time.Duration
	MaxBodyBytes int64
	// QueryTimeout bounds a whole query unless the request asks for another bound.
	QueryTimeout     time.Duration
	MaxParallelCalls int
	// MaxOutputBytes bounds a tool's output as recorded and fed back to the model.
	MaxOutputBytes int
	// StepOutputTokens bounds the outputs of one step's calls together, as the model's prompt
	// will hold them (budget.go): so that tools cannot push the question out of the context.
	StepOutputTokens int
	// ReadyNeedsInference makes /readyz fail while the model is not reachable.
	ReadyNeedsInference bool
	// ReadyServerGrace is how long after the api starts /readyz waits for an MCP server that
	// has not connected yet; zero waits only for a first attempt under way.
	ReadyServerGrace time.Duration
	// JaegerURL is the Jaeger UI's base URL; the web console links each query to its trace there.
	JaegerURL string
	// Auth holds where API tokens come from and the per-token rate limit; tokens are never flags.
	Auth auth.Config
	// Tokens are API tokens from the environment, a secret (Secrets), added to Auth's file.
	Tokens string
	// MaxToolCalls bounds the tool calls one query makes, over all its steps (a direct query's
	// calls included); MaxStepCalls bounds those of one step the model asks for.
	MaxToolCalls int
	MaxStepCalls int
	// Policy is who may list, search and call what: the token scopes of the config's `policy:`
	// key (YAML-only, set by the app). Its Servers are not read: the MCP servers' rules are the
	// executor's, and come from it (rules.go).
	Policy policy.Config
	// Web is what the REST port allows browsers: extra host names and origins.
	Web webguard.Config
	// AllowOpen lets the api listen beyond loopback without tokens.
	AllowOpen bool
	// BodyTimeout bounds how long a client may take to send a request body.
	BodyTimeout time.Duration
	// DialOptions are added to those of every client of a dependency (mutual TLS); set by the
	// app, not a flag.
	DialOptions []grpc.DialOption
	// LocalExecutor, LocalRetriever and LocalInference are the dependencies that run in this
	// process (`toolmesh up`, internal/localclient): when set, the api calls them directly
	// instead of dialing their address. Set by the app, not flags.
	LocalExecutor  toolmeshv1.ExecutorServiceClient
	LocalRetriever toolmeshv1.RetrieverServiceClient
	LocalInference toolmeshv1.InferenceServiceClient
	// MCP tunes the MCP endpoints on the REST port (/mcp, /mcp/search, /mcp/servers/S, /sse).
	MCP mcpface.Config
	// Audit is the audit trail of the tool calls the api makes (the audit.* flags).
	Audit audit.Config
}

// Secrets are the values the api target reads from the environment.
func (c *Config) Secrets() []secret.Var {
	return []secret.Var{{Env: auth.EnvTokens, Value: &c.Tokens,
		Usage: "API tokens, comma-separated NAME:TOKEN (or bare TOKEN), added to those of --api.tokens-file"}}
}

// Defaults of the limits on work, with their reasons.
const (
	// DefaultMaxToolCalls: BFCL's multi-call cases need at most 4 calls and the demo's chained
	// questions 2-3; 16 leaves room for a model that retries, while one request can no longer
	// make hundreds (an 8 KiB direct query held 240).
	DefaultMaxToolCalls = 16
	// DefaultMaxStepCalls: Gorilla's parallel calls in one step number at most 4 in BFCL's
	// parallel categories; twice that still runs in two rounds of api.max-parallel-calls.
	DefaultMaxStepCalls = 8
	// DefaultStepOutputTokens: half of the smallest context toolmesh's models run with (4096
	// tokens), so the question, the offered tools and the answer keep the other half whatever
	// the tools of one step return; counted as an upper bound, it holds about 2 KiB of output.
	DefaultStepOutputTokens = 2048
	// minStepOutputTokens leaves each call of a full step some output beside the note of the cut.
	minStepOutputTokens = 256
	// maxToolCallsLimit bounds the flags themselves.
	maxToolCallsLimit = 1000
)

// RegisterFlags sets the defaults and binds them to flags prefixed "api.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTPAddr, "api.http-addr", "127.0.0.1:7700", "REST listen address (host:port)")
	fs.StringVar(&c.GRPCAddr, "api.grpc-addr", "127.0.0.1:7701", "api gRPC listen address (host:port)")
	fs.StringVar(&c.ExecutorAddr, "api.executor-addr", "127.0.0.1:7704", "executor gRPC address the api calls")
	fs.StringVar(&c.RetrieverAddr, "api.retriever-addr", "127.0.0.1:7702", "retriever gRPC address the api calls for tool search; empty turns search off")
	fs.StringVar(&c.InferenceAddr, "api.inference-addr", "127.0.0.1:7703", "inference gRPC address the api calls to answer questions; empty turns questions off (direct @SERVER.TOOL calls still work)")
	fs.DurationVar(&c.QueryTimeout, "api.query-timeout", 120*time.Second, "default bound on a whole query; a request's timeout_seconds (at most 600) overrides it")
	fs.IntVar(&c.MaxParallelCalls, "api.max-parallel-calls", 4, "how many calls of one step run at the same time")
	fs.IntVar(&c.MaxOutputBytes, "api.max-output-bytes", 16<<10, "longest tool output kept in a query's record and fed back to the model, in bytes")
	fs.IntVar(&c.StepOutputTokens, "api.step-output-tokens", DefaultStepOutputTokens,
		"most tokens the outputs of one model step's tool calls take together in the model's prompt (counted as an upper bound: a character as the bytes it takes quoted); larger outputs are cut, fairly, saying so in the query's record")
	fs.BoolVar(&c.ReadyNeedsInference, "api.ready-needs-inference", false, "make /readyz fail while the model backend is unreachable (it is always reported)")
	fs.DurationVar(&c.ReadyServerGrace, "api.ready-server-grace", 30*time.Second, "after the api starts, how long /readyz waits for an MCP server that has not connected yet (one starting beside the mesh); after it a server that is down is only reported")
	fs.DurationVar(&c.CallTimeout, "api.call-timeout", 2*time.Minute, "upper bound on one tool call made through the api")
	fs.DurationVar(&c.RPCTimeout, "api.rpc-timeout", 10*time.Second, "timeout of every other call from the api to a dependency")
	fs.Int64Var(&c.MaxBodyBytes, "api.max-body-bytes", 1<<20, "largest REST request body accepted, in bytes")
	fs.StringVar(&c.JaegerURL, "api.jaeger-url", "", "Jaeger UI base URL (e.g. http://127.0.0.1:16686); when set, the web console at /ui links each query to URL/trace/TRACE_ID")
	fs.IntVar(&c.MaxToolCalls, "api.max-tool-calls", DefaultMaxToolCalls, "most tool calls one query makes over all its steps, a direct @SERVER.TOOL query's included (it is refused with more); each call also costs one request of the token's rate limit")
	fs.IntVar(&c.MaxStepCalls, "api.max-step-calls", DefaultMaxStepCalls, "most calls of one model step that run; the model's further calls in that step are recorded as not run")
	// A query or a call is a few KB; 10 s is a whole 1 MiB body at 100 KB/s, and a client that
	// trickles slower holds a connection (and a goroutine) no longer than that.
	fs.DurationVar(&c.BodyTimeout, "api.body-timeout", 10*time.Second, "how long a client may take to send a REST request body (408 after that)")
	fs.BoolVar(&c.AllowOpen, "api.allow-open", false, "let the api listen beyond loopback without API tokens, so that anyone who reaches it can call every tool (without it, such a start is refused)")
	c.Auth.RegisterFlags(fs, "api.")
	c.Web.RegisterFlags(fs, "api.")
	c.MCP.RegisterFlags(fs, "api.mcp-")
	c.Audit.RegisterFlags(fs)
}

// Validate reports the first bad value, naming its flag.
func (c *Config) Validate() error {
	for _, a := range []struct{ flag, v string }{
		{"api.http-addr", c.HTTPAddr}, {"api.grpc-addr", c.GRPCAddr},
	} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%s: %q is not host:port: %w", a.flag, a.v, err)
		}
	}
	for _, a := range []struct{ flag, v string }{
		{"api.executor-addr", c.ExecutorAddr}, {"api.retriever-addr", c.RetrieverAddr}, {"api.inference-addr", c.InferenceAddr},
	} {
		if a.v == "" && a.flag != "api.executor-addr" {
			continue
		}
		if err := server.CheckTarget(a.v); err != nil {
			return fmt.Errorf("%s: %q: %w", a.flag, a.v, err)
		}
	}
	if c.CallTimeout <= 0 || c.RPCTimeout <= 0 {
		return errors.New("api.call-timeout and api.rpc-timeout must be positive")
	}
	if c.QueryTimeout <= 0 || c.QueryTimeout > maxTimeoutSeconds*time.Second {
		return fmt.Errorf("api.query-timeout: %s must be above 0 and at most %ds", c.QueryTimeout, maxTimeoutSeconds)
	}
	if c.MaxParallelCalls < 1 || c.MaxParallelCalls > 64 {
		return fmt.Errorf("api.max-parallel-calls: %d must be between 1 and 64", c.MaxParallelCalls)
	}
	if c.MaxToolCalls < 1 || c.MaxToolCalls > maxToolCallsLimit {
		return fmt.Errorf("api.max-tool-calls: %d must be between 1 and %d", c.MaxToolCalls, maxToolCallsLimit)
	}
	if c.MaxStepCalls < 1 || c.MaxStepCalls > maxToolCallsLimit {
		return fmt.Errorf("api.max-step-calls: %d must be between 1 and %d", c.MaxStepCalls, maxToolCallsLimit)
	}
	if c.MaxOutputBytes < 256 {
		return fmt.Errorf("api.max-output-bytes: %d is below the 256-byte minimum", c.MaxOutputBytes)
	}
	if c.StepOutputTokens != 0 && c.StepOutputTokens < minStepOutputTokens {
		return fmt.Errorf("api.step-output-tokens: %d is below the %d-token minimum", c.StepOutputTokens, minStepOutputTokens)
	}
	if c.ReadyServerGrace < 0 {
		return fmt.Errorf("api.ready-server-grace: %s is negative", c.ReadyServerGrace)
	}
	if err := c.Auth.Validate(); err != nil {
		return err
	}
	if err := c.Web.Validate(); err != nil {
		return err
	}
	if c.BodyTimeout <= 0 {
		return fmt.Errorf("api.body-timeout: %s must be positive", c.BodyTimeout)
	}
	if err := c.MCP.Validate("api.mcp-"); err != nil {
		return err
	}
	if err := c.Audit.Validate(); err != nil {
		return err
	}
	if c.JaegerURL != "" {
		// The console puts it in a link, so only a plain http(s) URL will do.
		if u, err := url.Parse(c.JaegerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("api.jaeger-url: %q is not an http(s) URL", c.JaegerURL)
		}
	}
	if c.MaxBodyBytes < 1024 {
		return fmt.Errorf("api.max-body-bytes: %d is below the 1024-byte minimum", c.MaxBodyBytes)
	}
	return nil
}
