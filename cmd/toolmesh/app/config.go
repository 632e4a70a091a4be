package app

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/llamaserver"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/secret"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/services/api"
	"github.com/toolmesh/toolmesh/services/executor"
	"github.com/toolmesh/toolmesh/services/inference"
	"github.com/toolmesh/toolmesh/services/retriever"
)

// Config is everything a toolmesh process needs. Flags set the defaults, the YAML file named by
// --config overlays them, and flags given on the command line overlay that again.
type Config struct {
	Targets      []string
	ConfigFile   string
	MCPConfig    string
	DrainTimeout time.Duration
	LogLevel     slog.Level
	LogFormat    string

	Executor  executor.Config
	Retriever retriever.Config
	Inference inference.Config
	API       api.Config
	Demo      DemoConfig
	Telemetry telemetry.Config
	TLS       TLSConfig
	// MetricsAddr serves GET /metrics on its own listener (the api's REST port always does).
	MetricsAddr string
	// AllowInsecureInternal lets the executor, retriever and inference listen beyond loopback
	// without mutual TLS.
	AllowInsecureInternal bool

	// servers holds mcpServers given inline in the YAML file, as written.
	servers map[string]any
	// serversErr is why the MCP servers did not load when their rules did: the executor,
	// which connects to them, refuses to start with it; the api needs only the rules.
	serversErr error
	// onPurpose holds every flag the command line or the config file set, by name: a value
	// asked for, where any other is a default (given).
	onPurpose map[string]bool
}

// DemoConfig is the shipped demo MCP servers that `up` runs on loopback.
type DemoConfig struct {
	Enabled        bool
	CalculatorAddr string
	ConverterAddr  string
	SQLiteAddr     string
}

// RegisterFlags sets every default. Each flag's name is also its key in the YAML file:
// "executor.call-timeout" is `executor: {call-timeout: 30s}`.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ConfigFile, "config", "", "YAML config file; its keys are these flags' names (nested maps join with dots) plus mcpServers and policy")
	fs.StringVar(&c.MCPConfig, "mcp-config", "", "an mcp.json file with an mcpServers (or VS Code servers) map: the executor's MCP servers (the api reads none: it has their rules from the executor)")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 10*time.Second, "how long a stop waits for in-flight requests before cutting them off")
	fs.TextVar(&c.LogLevel, "log.level", slog.LevelInfo, "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log.format", "text", "log format: text or json")
	c.Executor.RegisterFlags(fs)
	c.Retriever.RegisterFlags(fs)
	c.Inference.RegisterFlags(fs)
	c.API.RegisterFlags(fs)
	c.Telemetry.RegisterFlags(fs)
	c.TLS.RegisterFlags(fs)
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "also serve Prometheus metrics at http://ADDR/metrics (for targets without the api's REST port); empty: off")
	fs.BoolVar(&c.AllowInsecureInternal, "allow-insecure-internal", false, "let the executor, retriever and inference listen beyond loopback without mutual TLS (--tls.*), so that anyone who reaches the executor can call every tool past the api's tokens and scopes (without it, such a start is refused)")
}

// RegisterDemoFlags adds the flags of the demo MCP servers that only `up` runs.
func (c *Config) RegisterDemoFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Inference.LLM.URL, "llm-url", c.Inference.LLM.URL, "llama-server running Gorilla OpenFunctions v2 (same as --inference.llm.url)")
	fs.StringVar(&c.Inference.Model, "model", c.Inference.Model, "model to run with llama-server: a known name, hf://OWNER/REPO/FILE@REVISION or a .gguf file, pulled if missing (same as --inference.llm.model)")
	fs.BoolVar(&c.Demo.Enabled, "demo", true, "run the shipped calculator, converter and sqlite (demo database) MCP servers and connect them")
	fs.StringVar(&c.Demo.CalculatorAddr, "demo.calculator-addr", "127.0.0.1:7801", "calculator MCP server address (SSE at /sse, streamable HTTP at /mcp)")
	fs.StringVar(&c.Demo.ConverterAddr, "demo.converter-addr", "127.0.0.1:7802", "converter MCP server address (SSE at /sse, streamable HTTP at /mcp)")
	fs.StringVar(&c.Demo.SQLiteAddr, "demo.sqlite-addr", "127.0.0.1:7803", "sqlite MCP server address, serving its demo database read-only (SSE at /sse, streamable HTTP at /mcp)")
}

// flagAliases maps short flags to the flag they set, so a file never overrides either.
var flagAliases = map[string]string{"llm-url": "inference.llm.url", "model": "inference.llm.model"}

// Load parses args into fs and overlays the YAML file, keeping command-line flags on top.
func (c *Config) Load(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.ConfigFile != "" {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		for alias, name := range flagAliases {
			given[name] = given[name] || given[alias]
		}
		if err := c.overlayFile(fs, given); err != nil {
			return err
		}
	}
	// Visit sees the flags the file set too: fs.Set marks a flag set as fs.Parse does.
	c.onPurpose = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.onPurpose[f.Name] = true })
	for alias, name := range flagAliases {
		c.onPurpose[name] = c.onPurpose[name] || c.onPurpose[alias]
	}
	var mcpData []byte
	if c.MCPConfig != "" {
		var err error
		if mcpData, err = mcpconfig.ReadFile(c.MCPConfig); err != nil {
			return fmt.Errorf("mcp config: %w", err)
		}
	}
	servers, err := c.mcpServers(mcpData, false)
	if err != nil {
		// A process without the executor (the api's pod in microservices mode) has none of the
		// executor's secrets, which ${VAR}s in headers, env or url name, and reads none of the
		// servers: a file that reads without them loads, and only the executor refuses to
		// start (Validate).
		if _, rerr := c.mcpServers(mcpData, true); rerr != nil {
			return err
		}
		c.serversErr = err
	}
	// Only the executor reads the servers: the api's policy has their rules from it.
	c.Executor.Servers = servers
	secret.Read(c.Secrets(), os.LookupEnv)
	c.modelEnv()
	return nil
}

// modelEnv gives the llama-servers toolmesh runs (inference's model, the retriever's embedding
// model) the hub (HF_ENDPOINT, HF_TOKEN) and, where no flag named one, the models folder
// ($TOOLMESH_MODELS_DIR, else the user's cache folder): the environment is read here, once,
// and the services get it as config.
func (c *Config) modelEnv() {
	hub := modelfetch.HubFromEnv()
	for _, f := range []*llamaserver.Flags{&c.Inference.Server, &c.Retriever.EmbedServer} {
		f.Hub = hub
		if f.ModelsDir == "" {
			// Without a folder it stays empty, and a service that needs one says so.
			f.ModelsDir, _ = modelfetch.DefaultDir()
		}
	}
}

// given reports whether the flag name was set on the command line or in the config file,
// rather than left at its default.
func (c *Config) given(name string) bool { return c.onPurpose[name] }

// checkExecutor is the executor target's check: its servers loaded, and its config.
func (c *Config) checkExecutor() error {
	if c.serversErr != nil {
		return c.serversErr
	}
	return c.Executor.Validate()
}

// Secrets lists every value a deployment provides in the environment, each declared by the
// component whose config field it fills; Load reads them.
func (c *Config) Secrets() []secret.Var {
	return slices.Concat(c.API.Secrets(), c.Retriever.Secrets(), c.Inference.Secrets())
}

func (c *Config) overlayFile(fs *flag.FlagSet, given map[string]bool) error {
	data, err := mcpconfig.ReadFile(c.ConfigFile)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	f, err := readYAML(c.ConfigFile, data)
	if err != nil {
		return err
	}
	if c.servers, err = f.servers(); err != nil {
		return err
	}
	doc := f.doc
	if raw, ok := doc["policy"]; ok {
		p, err := policy.ParseYAML(raw)
		if err != nil {
			return f.pathErrors(err)
		}
		c.API.Policy.Tokens, c.API.Policy.Default = p.Tokens, p.Default
		delete(doc, "policy")
	}
	flat := map[string]string{}
	if err := flatten("", doc, flat); err != nil {
		return f.pathErrors(err)
	}
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "config" {
			return f.keyError(k, false, errors.New("config: a config file cannot name another"))
		}
		if fs.Lookup(k) == nil {
			return f.keyError(k, false, fmt.Errorf("unknown key %q (keys are flag names; see --help)", k))
		}
		if given[k] {
			continue
		}
		if err := fs.Set(k, flat[k]); err != nil {
			// The value is not quoted: the position points at it, and a value is never echoed
			// where it could be a secret put in the wrong key.
			return f.keyError(k, true, fmt.Errorf("%s: %w: expected %s", k, err, flagValueKind(fs.Lookup(k))))
		}
	}
	return nil
}

// flagValueKind says what value f takes, for an error about a value it refused.
func flagValueKind(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "true or false"
	}
	switch kind, _ := flag.UnquoteUsage(f); kind {
	case "duration":
		return `a duration like "30s" or "2m"`
	case "int", "uint":
		return "a whole number"
	case "float":
		return "a number"
	case "", "value":
		return "a value as --help describes it"
	default:
		return "a " + kind
	}
}

// flatten turns nested maps into dotted keys; lists become comma-joined values.
func flatten(prefix string, v any, out map[string]string) error {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			if err := flatten(key, child, out); err != nil {
				return err
			}
		}
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			if _, nested := e.(map[string]any); nested {
				return fmt.Errorf("%s: a list of maps is not a flag value", prefix)
			}
			parts[i] = fmt.Sprint(e)
		}
		out[prefix] = strings.Join(parts, ",")
	case nil:
		return fmt.Errorf("%s: empty value", prefix)
	default:
		out[prefix] = fmt.Sprint(t)
	}
	return nil
}

// mcpServers merges the --mcp-config file's contents (mcpData, nil without one) with inline
// mcpServers; a name in both is an error. With rulesOnly the servers have their rules alone,
// read without the servers' secrets (mcpconfig.ParseRules).
func (c *Config) mcpServers(mcpData []byte, rulesOnly bool) (map[string]mcpconfig.Server, error) {
	fromYAML, parse := mcpconfig.FromYAML, mcpconfig.Parse
	if rulesOnly {
		fromYAML, parse = mcpconfig.RulesFromYAML, mcpconfig.ParseRules
	}
	out, err := fromYAML(c.servers, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", c.ConfigFile, err)
	}
	if c.MCPConfig != "" {
		fromFile, err := parse(mcpData, os.LookupEnv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.MCPConfig, err)
		}
		for _, name := range mcpconfig.Names(fromFile) {
			s := fromFile[name]
			if prev, dup := out[name]; dup {
				if prev.ConfigName == "" && s.ConfigName == "" {
					return nil, fmt.Errorf("mcp server %q is declared both in %s and in %s", name, c.ConfigFile, c.MCPConfig)
				}
				return nil, fmt.Errorf("mcp servers %q in %s and %q in %s are both served as %q: rename one of them",
					prev.NameInConfig(), c.ConfigFile, s.NameInConfig(), c.MCPConfig, name)
			}
			out[name] = s
		}
	}
	return out, nil
}

// Validate checks every component's config.
func (c *Config) Validate() error {
	if c.DrainTimeout <= 0 {
		return errors.New("drain-timeout: must be positive")
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("log.format: %q is not text or json", c.LogFormat)
	}
	if err := c.Telemetry.Validate(); err != nil {
		return err
	}
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	for _, t := range c.Targets {
		if check := targets[t].check; check != nil {
			if err := check(c); err != nil {
				return err
			}
		}
		if p := targets[t].internal; p != nil {
			if err := c.checkOpen(p, p.addr(c)); err != nil {
				return err
			}
		}
	}
	return nil
}

// internalPort is the gRPC port of a target only other toolmesh services call (the executor,
// the retriever, inference), which has no tokens of its own: the api checks those.
type internalPort struct {
	// flag is its listen address's flag, and addr reads it.
	flag string
	addr func(c *Config) string
	// gives is what anyone who reaches the port can do, for the refusal.
	gives string
}

// checkOpen refuses an internal port that anyone on the network could use, as the api's
// checkExposure does for an api without tokens: addr, its listen address, beyond loopback
// without mutual TLS, unless --allow-insecure-internal says that is meant.
func (c *Config) checkOpen(p *internalPort, addr string) error {
	if c.TLS.Mutual() || c.AllowInsecureInternal || server.Loopback(addr) {
		return nil
	}
	return fmt.Errorf("%s: %s listens beyond loopback without mutual TLS, so anyone who reaches it could %s: "+
		"set --tls.cert-file, --tls.key-file and --tls.ca-file, listen on 127.0.0.1, or pass --allow-insecure-internal to run it open on purpose",
		p.flag, addr, p.gives)
}
