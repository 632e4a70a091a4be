package executor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/oauth"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Defaults for Config; RegisterFlags installs them.
const (
	DefaultCallTimeout         = 60 * time.Second
	DefaultMaxConcurrency      = 16
	DefaultListChangedDebounce = 200 * time.Millisecond
	DefaultConnectTimeout      = 10 * time.Second
	// DefaultMaxResultBytes keeps a tools/call result 4x under gRPC's default
	// 4 MiB receive limit (the api's and any other client's), and bounds what
	// one call may make the executor buffer. A megabyte of text is already
	// more than any model's context; the api keeps only api.max-output-bytes.
	DefaultMaxResultBytes = 1 << 20

	// Listing limits; docs/operations/README.md gives the measurements behind them.
	DefaultMaxToolsPerServer = 10_000
	DefaultMaxListBytes      = 16 << 20
	DefaultRelistInterval    = 5 * time.Minute

	// Input schema limits; docs/operations/README.md gives the measurements behind them.
	DefaultSchemaMaxBytes          = 64 << 10
	DefaultSchemaMaxDepth          = 64
	DefaultSchemaMaxEvaluations    = 1000
	DefaultSchemaValidationSteps   = 100_000
	DefaultSchemaValidationTimeout = time.Second

	// DefaultPinPoll: an approval made on one replica reaches the others within it. A stat
	// of one file is all a poll costs.
	DefaultPinPoll = 2 * time.Second
)

// Config configures the executor.
type Config struct {
	// GRPCAddr is where the executor's gRPC server listens (host:port).
	GRPCAddr string
	// Servers is set by the app from the config files; the key is the server name.
	Servers map[string]mcpconfig.Server
	// CallTimeout bounds one tools/call; a server's Timeout overrides it.
	CallTimeout time.Duration
	// MaxConcurrency bounds in-flight calls per server; a server's MaxConcurrency overrides it.
	MaxConcurrency int
	// ListChangedDebounce coalesces bursts of notifications/tools/list_changed.
	ListChangedDebounce time.Duration
	// ConnectTimeout bounds connect + initialize + the first tools/list's answers of one attempt.
	ConnectTimeout time.Duration
	// MaxResultBytes bounds one tools/call result of a tool whose server sets no
	// maxResultBytes: the JSON-RPC response as read from the server, and the gRPC
	// response made of it. A larger result is cut to it and ends with a marker
	// block saying so (cut.go); reading stops at the limit.
	MaxResultBytes int
	// MaxToolsPerServer and MaxListBytes bound one server's tools/list (all
	// its pages). A listing over either stops there: the server is DEGRADED,
	// saying why, and the catalog keeps its last good tools, or none.
	MaxToolsPerServer int
	MaxListBytes      int
	// RelistInterval is how often each server's tools are listed again, with
	// jitter, to keep the catalog true when notifications are lost.
	RelistInterval time.Duration
	// SchemaMaxBytes, SchemaMaxDepth and SchemaMaxEvaluations bound a tool's
	// input schema: its size as listed, the nesting of its objects and arrays,
	// and the most subschema evaluations validating one argument value may
	// take (schemacost.go). A tool over any of them is refused: listed in
	// ListServers with the reason, never indexed or called.
	SchemaMaxBytes       int
	SchemaMaxDepth       int
	SchemaMaxEvaluations int
	// SchemaValidationSteps and SchemaValidationTimeout bound validating one
	// call's arguments; over either, the call fails with InvalidArgument.
	SchemaValidationSteps   int
	SchemaValidationTimeout time.Duration
	// PinFile is the pin file: the trusted definition of each tool of the servers whose
	// pinning is warn or enforce (internal/pinfile). Every replica reads the same one. Empty
	// keeps the pins in memory: each start trusts what it sees first.
	PinFile string
	// PinPoll is how often the pin file is checked for changes another replica, or an
	// operator, made.
	PinPoll time.Duration
	// OAuthDir holds the OAuth tokens of the servers signed in to (toolmesh login), one
	// 0600 file per server; empty is oauth.DefaultDir().
	OAuthDir string
	// OAuthSecret, when set, keeps them in this Kubernetes Secret of the pod's namespace
	// instead, shared by every replica.
	OAuthSecret string
}

// OAuthStore is where the tokens of OAuth servers are kept.
func (c *Config) OAuthStore() oauth.Store {
	if c.OAuthSecret != "" {
		s, err := oauth.InClusterSecretStore(c.OAuthSecret)
		if err != nil {
			return brokenStore{err}
		}
		return s
	}
	if c.OAuthDir == "" {
		return oauth.FileStore{Dir: oauth.DefaultDir()}
	}
	return oauth.FileStore{Dir: c.OAuthDir}
}

// brokenStore answers every request with why the store could not be made (Validate says it
// at start; this keeps a store that stopped working from being mistaken for an empty one).
type brokenStore struct{ err error }

func (b brokenStore) Load(context.Context, string) (*oauth.Record, error) { return nil, b.err }
func (b brokenStore) Save(context.Context, *oauth.Record) error           { return b.err }
func (b brokenStore) Delete(context.Context, string) error                { return b.err }

// RegisterFlags registers the executor flags on fs and sets the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "executor.grpc-addr", "127.0.0.1:7704", "executor gRPC listen address (host:port)")
	fs.DurationVar(&c.CallTimeout, "executor.call-timeout", DefaultCallTimeout,
		"default timeout of one MCP tool call; a server's timeout overrides it")
	fs.IntVar(&c.MaxConcurrency, "executor.max-concurrency", DefaultMaxConcurrency,
		"default limit of in-flight tool calls per MCP server")
	fs.DurationVar(&c.ListChangedDebounce, "executor.list-changed-debounce", DefaultListChangedDebounce,
		"how long to coalesce tools/list_changed notifications before listing a server's tools again")
	fs.DurationVar(&c.ConnectTimeout, "executor.connect-timeout", DefaultConnectTimeout,
		"bound of one connection attempt to an MCP server: connect, initialize and the server's answers to the first tools/list (not the checks of the listed tools that follow)")
	fs.IntVar(&c.MaxResultBytes, "executor.max-result-bytes", DefaultMaxResultBytes,
		"largest tool call result, in bytes, as read from the MCP server and as returned over gRPC, for servers that set no maxResultBytes; a larger result is cut to it, ends with a block saying so and carries the toolmesh-result-cut trailer (reading stops at the limit)")
	fs.IntVar(&c.MaxToolsPerServer, "executor.max-tools-per-server", DefaultMaxToolsPerServer,
		"most tools one MCP server may list; past it the listing stops, the server is marked degraded with the reason and keeps its last good tool list (or none)")
	fs.IntVar(&c.MaxListBytes, "executor.max-list-bytes", DefaultMaxListBytes,
		"largest tool list, in bytes, one MCP server may send (all pages of one tools/list); past it as --executor.max-tools-per-server")
	fs.DurationVar(&c.RelistInterval, "executor.relist-interval", DefaultRelistInterval,
		"how often each MCP server's tools are listed again (with ±20% jitter), so the catalog stays true when change notifications are lost")
	fs.IntVar(&c.SchemaMaxBytes, "executor.schema-max-bytes", DefaultSchemaMaxBytes,
		"largest tool input schema, in bytes as listed; a tool with a larger one is refused (listed in /v1/servers with the reason, never indexed or callable)")
	fs.IntVar(&c.SchemaMaxDepth, "executor.schema-max-depth", DefaultSchemaMaxDepth,
		"deepest nesting of objects and arrays in a tool input schema; a tool with a deeper one is refused")
	fs.IntVar(&c.SchemaMaxEvaluations, "executor.schema-max-evaluations", DefaultSchemaMaxEvaluations,
		"most subschema evaluations validating one argument value may take, measured from the input schema when the tool is listed ($ref, anyOf, allOf, ... counted as the validator runs them); a tool over it is refused")
	fs.IntVar(&c.SchemaValidationSteps, "executor.schema-validation-steps", DefaultSchemaValidationSteps,
		"most subschema evaluations validating one call's arguments may take; a call over it fails (InvalidArgument) before or while validating")
	fs.DurationVar(&c.SchemaValidationTimeout, "executor.schema-validation-timeout", DefaultSchemaValidationTimeout,
		"longest validation of one call's arguments; a call over it fails (InvalidArgument)")
	fs.StringVar(&c.PinFile, "executor.pin-file", "",
		"the pin file: the trusted definition of every tool of a server with pinning warn or enforce, shared by all replicas (default: toolmesh.pins.json beside --config, or beside --mcp-config; without either, pins are kept in memory and each start trusts what it sees first)")
	fs.DurationVar(&c.PinPoll, "executor.pin-poll", DefaultPinPoll,
		"how often the pin file is checked for pins and approvals written by another replica or an operator (a ConfigMap update)")
	fs.StringVar(&c.OAuthSecret, "executor.oauth-secret", "",
		"keep the OAuth tokens of remote MCP servers in this Kubernetes Secret of the pod's namespace (key SERVER.json, shared by every replica) instead of --executor.oauth-dir; the pod's service account must be allowed to get and patch it (the Helm chart's executor.oauth.enabled does that)")
	fs.StringVar(&c.OAuthDir, "executor.oauth-dir", "",
		"where the OAuth tokens of remote MCP servers are kept (toolmesh login SERVER writes them, the executor refreshes them), one 0600 file per server (default: $XDG_STATE_HOME/toolmesh/oauth, else ~/.local/state/toolmesh/oauth)")
}

// Validate checks the configuration. Zero durations and limits are valid and mean the default.
func (c *Config) Validate() error {
	var errs []error
	// Empty only where the service is used without its gRPC server (tests, benchmarks).
	if _, _, err := net.SplitHostPort(c.GRPCAddr); c.GRPCAddr != "" && err != nil {
		errs = append(errs, fmt.Errorf("executor.grpc-addr: %q is not host:port: %w", c.GRPCAddr, err))
	}
	if c.CallTimeout < 0 {
		errs = append(errs, fmt.Errorf("executor.call-timeout: must not be negative, got %s", c.CallTimeout))
	}
	if c.MaxConcurrency < 0 {
		errs = append(errs, fmt.Errorf("executor.max-concurrency: must not be negative, got %d", c.MaxConcurrency))
	}
	if c.ListChangedDebounce < 0 {
		errs = append(errs, fmt.Errorf("executor.list-changed-debounce: must not be negative, got %s", c.ListChangedDebounce))
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, fmt.Errorf("executor.connect-timeout: must not be negative, got %s", c.ConnectTimeout))
	}
	if c.MaxResultBytes < 0 {
		errs = append(errs, fmt.Errorf("executor.max-result-bytes: must not be negative, got %d", c.MaxResultBytes))
	}
	for _, l := range []struct {
		flag string
		v    int64
	}{
		{"executor.max-tools-per-server", int64(c.MaxToolsPerServer)},
		{"executor.max-list-bytes", int64(c.MaxListBytes)},
		{"executor.schema-max-bytes", int64(c.SchemaMaxBytes)},
		{"executor.schema-max-depth", int64(c.SchemaMaxDepth)},
		{"executor.schema-max-evaluations", int64(c.SchemaMaxEvaluations)},
		{"executor.schema-validation-steps", int64(c.SchemaValidationSteps)},
	} {
		if l.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %d", l.flag, l.v))
		}
	}
	if c.RelistInterval < 0 {
		errs = append(errs, fmt.Errorf("executor.relist-interval: must not be negative, got %s", c.RelistInterval))
	}
	if c.SchemaValidationTimeout < 0 {
		errs = append(errs, fmt.Errorf("executor.schema-validation-timeout: must not be negative, got %s", c.SchemaValidationTimeout))
	}
	if c.PinPoll < 0 {
		errs = append(errs, fmt.Errorf("executor.pin-poll: must not be negative, got %s", c.PinPoll))
	}
	if c.OAuthSecret != "" {
		if _, err := oauth.InClusterSecretStore(c.OAuthSecret); err != nil {
			errs = append(errs, err)
		}
	}
	for key, srv := range c.Servers {
		if err := validateServer(key, srv); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func validateServer(key string, srv mcpconfig.Server) error {
	name := srv.Name
	if name == "" {
		name = key
	}
	if name != key {
		return fmt.Errorf("server %q: name %q differs from its key", key, srv.Name)
	}
	if !toolid.ValidServer(name) {
		return fmt.Errorf("server %q: name must match %s", key, toolid.ServerRule)
	}
	switch srv.Transport {
	case mcpconfig.TransportSSE, mcpconfig.TransportStreamableHTTP:
		if srv.URL == "" {
			return fmt.Errorf("server %q: transport %s needs a url", key, srv.Transport)
		}
	case mcpconfig.TransportStdio:
		if srv.Command == "" {
			return fmt.Errorf("server %q: transport stdio needs a command", key)
		}
	default:
		return fmt.Errorf("server %q: unknown transport %q", key, srv.Transport)
	}
	if srv.ProtocolVersion != "" && !mcp.IsValidProtocolVersion(srv.ProtocolVersion) {
		return fmt.Errorf("server %q: unknown protocol version %q (known: %v)", key, srv.ProtocolVersion, mcp.ValidProtocolVersions)
	}
	if srv.Timeout < 0 {
		return fmt.Errorf("server %q: timeout must not be negative", key)
	}
	if srv.MaxConcurrency < 0 {
		return fmt.Errorf("server %q: max concurrency must not be negative", key)
	}
	return nil
}

// withDefaults returns c with zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = DefaultMaxConcurrency
	}
	if c.ListChangedDebounce == 0 {
		c.ListChangedDebounce = DefaultListChangedDebounce
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.MaxToolsPerServer == 0 {
		c.MaxToolsPerServer = DefaultMaxToolsPerServer
	}
	if c.MaxListBytes == 0 {
		c.MaxListBytes = DefaultMaxListBytes
	}
	if c.RelistInterval == 0 {
		c.RelistInterval = DefaultRelistInterval
	}
	if c.SchemaMaxBytes == 0 {
		c.SchemaMaxBytes = DefaultSchemaMaxBytes
	}
	if c.SchemaMaxDepth == 0 {
		c.SchemaMaxDepth = DefaultSchemaMaxDepth
	}
	if c.SchemaMaxEvaluations == 0 {
		c.SchemaMaxEvaluations = DefaultSchemaMaxEvaluations
	}
	if c.SchemaValidationSteps == 0 {
		c.SchemaValidationSteps = DefaultSchemaValidationSteps
	}
	if c.SchemaValidationTimeout == 0 {
		c.SchemaValidationTimeout = DefaultSchemaValidationTimeout
	}
	if c.PinPoll == 0 {
		c.PinPoll = DefaultPinPoll
	}
	return c
}

// schemaLimits are the executor.schema-* limits; c has its defaults.
func (c Config) schemaLimits() schemaLimits {
	return schemaLimits{
		maxBytes:    c.SchemaMaxBytes,
		maxDepth:    c.SchemaMaxDepth,
		maxPerValue: int64(c.SchemaMaxEvaluations),
		maxSteps:    int64(c.SchemaValidationSteps),
		maxTime:     c.SchemaValidationTimeout,
	}
}
