// Package mcpconfig reads the MCP server declarations operators already have:
// a Claude-Desktop-style "mcpServers" map or VS Code's "servers" map, as JSON or inline YAML.
package mcpconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Transport is how the executor talks to one MCP server.
type Transport string

const (
	TransportSSE            Transport = "sse"
	TransportStreamableHTTP Transport = "streamable-http"
	TransportStdio          Transport = "stdio"
)

// Server is one configured MCP server, with ${ENV} references already expanded.
type Server struct {
	// Name is the map key; it must match [a-z0-9_-]+ because tool ids are SERVER.TOOL. Parse
	// gives an entry whose name does not the name ServedName makes of it.
	Name string
	// ConfigName is the entry's name in the config when it is not Name ("GitHub" served as
	// "github"), for the places a user looks for it: the log, /v1/servers, errors. Empty when
	// the config uses Name itself.
	ConfigName string
	Transport  Transport

	// URL and Headers apply to sse and streamable-http.
	URL     string
	Headers map[string]string
	// Auth and OAuth say how toolmesh signs in to a remote server (oauth.go).
	Auth  Auth
	OAuth OAuth

	// Command, Args and Env apply to stdio; Env is added to a minimal environment.
	Command string
	Args    []string
	Env     map[string]string

	// Timeout bounds one tools/call; zero means the executor's default.
	Timeout time.Duration
	// MaxConcurrency bounds in-flight calls to this server; zero means the executor's default.
	MaxConcurrency int
	// ProtocolVersion pins the MCP protocol version to negotiate; empty means the newest.
	ProtocolVersion string

	// AllowedTools and ExcludedTools are globs ('*', '?') over the server's tool names, under
	// the names mcphost gives them: when AllowedTools is set only the tools it matches exist
	// for toolmesh, and the tools ExcludedTools matches never do (it wins). internal/policy
	// applies them.
	AllowedTools  []string
	ExcludedTools []string
	// AllowedPrompts and ExcludedPrompts are the same for the server's prompts (globs over
	// prompt names); AllowedResources and ExcludedResources for its resources (globs over
	// resource URIs and the URI templates of resource templates).
	AllowedPrompts, ExcludedPrompts     []string
	AllowedResources, ExcludedResources []string
	// AllowDestructive lets the model be offered this server's tools whose annotations do not
	// say they are read-only or non-destructive; without it only apps call them, directly.
	AllowDestructive bool

	// Pinning says what the executor does when one of this server's tools changes its
	// definition after it was first seen; "" is the default (PinningMode).
	Pinning Pinning
	// MaxResultBytes bounds one tool result of this server; zero means the executor's default.
	MaxResultBytes int
	// RateLimit bounds the calls each API token makes of each of this server's tools; nil
	// means none.
	RateLimit *RateLimit
	// Tools holds settings of single tools, by the tool's name on its server; they win over
	// the server's.
	Tools map[string]ToolSettings

	// Warnings are what the entry held that toolmesh did not use: unknown keys, each with the
	// closest known one (a typo like "comand" would otherwise pass silently). The executor
	// logs them at start.
	Warnings []string
}

// Pinning is what happens to a tool whose definition changed since it was first seen (a
// "rug pull": a server that changes an approved tool's description).
type Pinning string

const (
	// PinningOff trusts whatever the server says now.
	PinningOff Pinning = "off"
	// PinningWarn keeps a changed tool callable and flags it until it is approved; the default,
	// so that an existing install keeps working after an upgrade and still hears of changes.
	PinningWarn Pinning = "warn"
	// PinningEnforce quarantines a changed tool (not offered, listed or callable) until it is
	// approved.
	PinningEnforce Pinning = "enforce"
)

// ParsePinning reads a pinning mode; "" is PinningWarn.
func ParsePinning(s string) (Pinning, error) {
	switch p := Pinning(s); p {
	case "":
		return PinningWarn, nil
	case PinningOff, PinningWarn, PinningEnforce:
		return p, nil
	}
	return "", fmt.Errorf("%q is not off, warn or enforce", s)
}

// RateLimit is at most Calls calls every Per.
type RateLimit struct {
	Calls int
	Per   time.Duration
}

// ToolSettings are the settings of one tool that win over its server's.
type ToolSettings struct {
	MaxResultBytes int
	RateLimit      *RateLimit
}

// PinningMode is the server's pinning, PinningWarn when it sets none.
func (s Server) PinningMode() Pinning {
	if s.Pinning == "" {
		return PinningWarn
	}
	return s.Pinning
}

// ResultLimit is the bound on tool's results: the tool's own, else the server's (0: the
// executor's default).
func (s Server) ResultLimit(tool string) int {
	if t, ok := s.Tools[tool]; ok && t.MaxResultBytes > 0 {
		return t.MaxResultBytes
	}
	return s.MaxResultBytes
}

// RateLimitOf is the rate limit of tool: the tool's own, else the server's (nil: none).
func (s Server) RateLimitOf(tool string) *RateLimit {
	if t, ok := s.Tools[tool]; ok && t.RateLimit != nil {
		return t.RateLimit
	}
	return s.RateLimit
}

// IsRemote reports whether t is a network transport (sse or streamable-http).
func (t Transport) IsRemote() bool {
	return t == TransportSSE || t == TransportStreamableHTTP
}

// ParseTransport maps the spellings found in mcp.json files to a Transport:
// "sse"; "http", "streamable-http", "streamableHttp" (any case) → streamable-http; "stdio".
func ParseTransport(s string) (Transport, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "sse":
		return TransportSSE, nil
	case "http", "streamable-http", "streamablehttp", "streamable_http":
		return TransportStreamableHTTP, nil
	case "stdio":
		return TransportStdio, nil
	}
	return "", fmt.Errorf("unknown transport %q; want sse, streamable-http (or http) or stdio", s)
}

// Names returns the keys of m sorted, for deterministic iteration.
func Names(m map[string]Server) []string {
	return slices.Sorted(maps.Keys(m))
}

var (
	protocolVersionPattern = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
)

// Validate reports every problem with s, each as a *FieldError naming the server and field.
// Zero Timeout and MaxConcurrency mean "the executor's default" and are valid here; Parse
// additionally rejects an explicit zero timeout.
func (s Server) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Server: s.NameInConfig(), Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if !toolid.ValidServer(s.Name) {
		add("name", "must match %s (tool ids are SERVER.TOOL and the first dot splits them)", toolid.ServerRule)
	}
	if _, err := ParsePinning(string(s.Pinning)); err != nil {
		add("pinning", "%v", err)
	}
	both := s.URL != "" && s.Command != ""
	if both {
		add("url", "cannot be combined with command: a server is either remote (url) or stdio (command)")
	}
	switch {
	case s.Transport.IsRemote():
		switch {
		case both:
		case s.URL == "":
			add("url", "required for transport %s", s.Transport)
			if s.Command != "" {
				add("command", "not allowed for transport %s, which takes a url", s.Transport)
			}
		default:
			if msg := checkURL(s.URL); msg != "" {
				add("url", "%s", msg)
			}
		}
		if len(s.Args) > 0 {
			add("args", "only applies to stdio servers")
		}
		if len(s.Env) > 0 {
			add("env", "only applies to stdio servers")
		}
		for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
			if msg := checkHeader(k, s.Headers[k]); msg != "" {
				add("headers."+k, "%s", msg)
			}
		}
	case s.Transport == TransportStdio:
		if !both {
			if s.Command == "" {
				add("command", "required for stdio servers")
			}
			if s.URL != "" {
				add("url", "not allowed for stdio servers, which take a command")
			}
		}
		if strings.ContainsRune(s.Command, 0) {
			add("command", "must not contain NUL bytes")
		}
		for i, a := range s.Args {
			if strings.ContainsRune(a, 0) {
				add(fmt.Sprintf("args[%d]", i), "must not contain NUL bytes")
			}
		}
		if len(s.Headers) > 0 {
			add("headers", "only applies to remote (sse, streamable-http) servers")
		}
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			switch {
			case k == "" || strings.ContainsAny(k, "=\x00"):
				add("env", "invalid variable name %q", k)
			case strings.ContainsRune(s.Env[k], 0):
				add("env."+k, "value must not contain NUL bytes")
			}
		}
	case s.Transport == "":
		if !both && s.URL == "" && s.Command == "" {
			add("url", "a server needs a url (sse, streamable-http) or a command (stdio)")
		} else if !both {
			add("transport", "required")
		}
	default:
		add("transport", "unknown %q; want sse, streamable-http or stdio", string(s.Transport))
	}
	s.validateOAuth(add)
	if s.Timeout < 0 {
		add("timeout", "must be > 0")
	}
	if s.MaxConcurrency < 0 {
		add("maxConcurrency", "must be >= 0")
	}
	if s.ProtocolVersion != "" && !protocolVersionPattern.MatchString(s.ProtocolVersion) {
		add("protocolVersion", "must be an MCP protocol version like \"2025-06-18\"")
	}
	for _, l := range []struct {
		key string
		ps  []string
	}{{"allowedTools", s.AllowedTools}, {"excludedTools", s.ExcludedTools},
		{"allowedPrompts", s.AllowedPrompts}, {"excludedPrompts", s.ExcludedPrompts},
		{"allowedResources", s.AllowedResources}, {"excludedResources", s.ExcludedResources}} {
		for i, p := range l.ps {
			if msg := checkToolGlob(p); msg != "" {
				add(fmt.Sprintf("%s[%d]", l.key, i), "%s", msg)
			}
		}
	}
	return errors.Join(errs...)
}

// checkToolGlob returns why p cannot match a tool name (or a prompt name or resource URI), or
// "": names and URIs are non-empty and hold no spaces or control characters.
func checkToolGlob(p string) string {
	if p == "" {
		return "must not be empty"
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] == 0x7f {
			return fmt.Sprintf("%q has a space or control character, which no tool name holds", p)
		}
	}
	return ""
}

// checkURL returns why raw is not an absolute http(s) URL, or "". It never echoes raw:
// after ${VAR} expansion it may carry a secret.
func checkURL(raw string) string {
	const msg = "must be an absolute http or https URL"
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" || u.Hostname() == "" {
		return msg
	}
	return ""
}

// checkHeader returns why a header is unusable, or "". It never echoes the value.
func checkHeader(name, value string) string {
	if name == "" {
		return "header name must not be empty"
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return "header name must be an HTTP token"
		}
	}
	if strings.ContainsAny(value, "\r\n\x00") {
		return "header value must not contain CR, LF or NUL"
	}
	return ""
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Endpoint is what is safe to show users and logs: for remote servers the URL without
// userinfo, query or fragment; for stdio the command's base name. A secret placed in the URL
// path itself (rather than in a header) is still shown.
func (s Server) Endpoint() string {
	if s.Transport == TransportStdio || (s.URL == "" && s.Command != "") {
		c := s.Command
		if i := strings.LastIndexAny(c, `/\`); i >= 0 {
			c = c[i+1:]
		}
		return c
	}
	if s.URL == "" {
		return ""
	}
	u, err := url.Parse(s.URL)
	if err != nil || u.Host == "" {
		return "(invalid url)"
	}
	clean := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return clean.String()
}

// redacted is the printable view of a Server: no header values, env values or args.
type redacted struct {
	Name             string   `json:"name"`
	ConfigName       string   `json:"config_name,omitempty"`
	Transport        string   `json:"transport"`
	Endpoint         string   `json:"endpoint"`
	HeaderNames      []string `json:"header_names,omitempty"`
	Auth             string   `json:"auth,omitempty"`
	EnvKeys          []string `json:"env_keys,omitempty"`
	Args             int      `json:"args,omitempty"`
	Timeout          string   `json:"timeout,omitempty"`
	MaxConcurrency   int      `json:"max_concurrency,omitempty"`
	ProtocolVersion  string   `json:"protocol_version,omitempty"`
	AllowedTools     []string `json:"allowed_tools,omitempty"`
	ExcludedTools    []string `json:"excluded_tools,omitempty"`
	AllowDestructive bool     `json:"allow_destructive,omitempty"`
	// The prompt and resource rules: patterns, no secrets.
	AllowedPrompts    []string `json:"allowed_prompts,omitempty"`
	ExcludedPrompts   []string `json:"excluded_prompts,omitempty"`
	AllowedResources  []string `json:"allowed_resources,omitempty"`
	ExcludedResources []string `json:"excluded_resources,omitempty"`
}

func (s Server) redacted() redacted {
	r := redacted{
		Name:              s.Name,
		ConfigName:        s.ConfigName,
		Transport:         string(s.Transport),
		Endpoint:          s.Endpoint(),
		HeaderNames:       slices.Sorted(maps.Keys(s.Headers)),
		EnvKeys:           slices.Sorted(maps.Keys(s.Env)),
		Args:              len(s.Args),
		MaxConcurrency:    s.MaxConcurrency,
		ProtocolVersion:   s.ProtocolVersion,
		AllowedTools:      s.AllowedTools,
		ExcludedTools:     s.ExcludedTools,
		AllowDestructive:  s.AllowDestructive,
		AllowedPrompts:    s.AllowedPrompts,
		ExcludedPrompts:   s.ExcludedPrompts,
		AllowedResources:  s.AllowedResources,
		ExcludedResources: s.ExcludedResources,
	}
	if s.Timeout != 0 {
		r.Timeout = s.Timeout.String()
	}
	return r
}

// String describes s without header values, env values or args (which may hold secrets).
func (s Server) String() string {
	r := s.redacted()
	var b strings.Builder
	b.WriteString(r.Name)
	if r.ConfigName != "" {
		fmt.Fprintf(&b, " (%q in the config)", r.ConfigName)
	}
	fmt.Fprintf(&b, " %s %s", r.Transport, r.Endpoint)
	if len(r.HeaderNames) > 0 {
		fmt.Fprintf(&b, " headers=%s(values redacted)", strings.Join(r.HeaderNames, ","))
	}
	if r.Auth != "" {
		fmt.Fprintf(&b, " auth=%s", r.Auth)
	}
	if len(r.EnvKeys) > 0 {
		fmt.Fprintf(&b, " env=%s(values redacted)", strings.Join(r.EnvKeys, ","))
	}
	if r.Args > 0 {
		fmt.Fprintf(&b, " args=%d(redacted)", r.Args)
	}
	if r.Timeout != "" {
		fmt.Fprintf(&b, " timeout=%s", r.Timeout)
	}
	if r.MaxConcurrency != 0 {
		fmt.Fprintf(&b, " maxConcurrency=%d", r.MaxConcurrency)
	}
	if r.ProtocolVersion != "" {
		fmt.Fprintf(&b, " protocolVersion=%s", r.ProtocolVersion)
	}
	if len(r.AllowedTools) > 0 {
		fmt.Fprintf(&b, " allowedTools=%s", strings.Join(r.AllowedTools, ","))
	}
	if len(r.ExcludedTools) > 0 {
		fmt.Fprintf(&b, " excludedTools=%s", strings.Join(r.ExcludedTools, ","))
	}
	if r.AllowDestructive {
		b.WriteString(" allowDestructive")
	}
	return b.String()
}

// GoString keeps %#v from printing secrets.
func (s Server) GoString() string { return "mcpconfig.Server{" + s.String() + "}" }

// LogValue implements slog.LogValuer with the same redaction as String.
func (s Server) LogValue() slog.Value {
	r := s.redacted()
	attrs := []slog.Attr{
		slog.String("name", r.Name),
	}
	if r.ConfigName != "" {
		attrs = append(attrs, slog.String("config_name", r.ConfigName))
	}
	attrs = append(attrs,
		slog.String("transport", r.Transport),
		slog.String("endpoint", r.Endpoint),
	)
	if len(r.HeaderNames) > 0 {
		attrs = append(attrs, slog.Any("header_names", r.HeaderNames))
	}
	if r.Auth != "" {
		attrs = append(attrs, slog.String("auth", r.Auth))
	}
	if len(r.EnvKeys) > 0 {
		attrs = append(attrs, slog.Any("env_keys", r.EnvKeys))
	}
	if r.Args > 0 {
		attrs = append(attrs, slog.Int("args", r.Args))
	}
	if s.Timeout != 0 {
		attrs = append(attrs, slog.Duration("timeout", s.Timeout))
	}
	if r.MaxConcurrency != 0 {
		attrs = append(attrs, slog.Int("max_concurrency", r.MaxConcurrency))
	}
	if r.ProtocolVersion != "" {
		attrs = append(attrs, slog.String("protocol_version", r.ProtocolVersion))
	}
	if len(r.AllowedTools) > 0 {
		attrs = append(attrs, slog.Any("allowed_tools", r.AllowedTools))
	}
	if len(r.ExcludedTools) > 0 {
		attrs = append(attrs, slog.Any("excluded_tools", r.ExcludedTools))
	}
	if r.AllowDestructive {
		attrs = append(attrs, slog.Bool("allow_destructive", true))
	}
	return slog.GroupValue(attrs...)
}

// MarshalJSON emits the redacted view, so a Server serialized into an API response or a
// debug dump never carries header values, env values or args.
func (s Server) MarshalJSON() ([]byte, error) { return json.Marshal(s.redacted()) }

// FieldError is one problem with one server's declaration.
type FieldError struct {
	Server string // the server's name as the config gives it (its map key there)
	Field  string // e.g. "url", "headers.Authorization", "args[2]"; empty for the entry as a whole
	Msg    string // never contains an expanded ${VAR} value
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("mcp server %q: %s", e.Server, e.Msg)
	}
	return fmt.Sprintf("mcp server %q: %s: %s", e.Server, e.Field, e.Msg)
}
