package mcpconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/closest"
)

// maxFileSize bounds what Load reads; real mcp.json files are a few kilobytes.
const maxFileSize = 8 << 20

// Load reads an mcp.json file and parses it with os.LookupEnv. Errors name the file.
func Load(path string) (map[string]Server, error) {
	return load(path, false)
}

// LoadRules reads an mcp.json file as Load does, for the servers' rules alone: each server
// it returns has only Name, AllowedTools, ExcludedTools, AllowDestructive, RateLimit and Tools
// set (the api enforces the rate limits: it knows the tokens). ${VAR}
// references anywhere else (url, headers, command, args, env: where a server's secrets go)
// are neither resolved nor required, so a process that only enforces the rules (the api in
// microservices mode) needs none of the secrets and never holds them. Connection settings
// are not validated: the executor, which uses them, does that.
func LoadRules(path string) (map[string]Server, error) {
	return load(path, true)
}

func load(path string, rulesOnly bool) (map[string]Server, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	servers, err := parse(data, os.LookupEnv, rulesOnly)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return servers, nil
}

// ReadFile reads a configuration file: a regular file (through symlinks, as Kubernetes mounts
// a ConfigMap) of at most maxFileSize bytes. A FIFO, a device or a directory is refused before
// a byte is read: a FIFO would block the reader until someone writes to it, a device could feed
// it without end. The check is made again on the opened file, so a swap between the two cannot
// slip one in.
func ReadFile(path string) ([]byte, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// ParseRules is Parse for the servers' rules alone, as LoadRules reads them.
func ParseRules(data []byte, lookupEnv func(string) (string, bool)) (map[string]Server, error) {
	return parse(data, lookupEnv, true)
}

// Parse reads an mcp.json document: a top-level "mcpServers" map (Claude Desktop, Cursor,
// Claude Code) or "servers" map (VS Code; also accepted nested as "mcp": {"servers": …} in
// VS Code's settings.json). Comments and trailing commas (JSONC, as VS Code writes) are
// allowed. ${VAR} references are expanded with lookupEnv (os.LookupEnv in production; nil
// means no variables are set). Disabled entries are left out. Every entry is validated and
// all problems are returned together, joined, in server-name order.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (map[string]Server, error) {
	return parse(data, lookupEnv, false)
}

func parse(data []byte, lookupEnv func(string) (string, bool), rulesOnly bool) (map[string]Server, error) {
	clean, err := stripJSONC(data)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(clean))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("mcp config: %w", jsonError(data, clean, err))
	}
	end := int(dec.InputOffset())
	if _, err := dec.Token(); err != io.EOF {
		i := skipBlank(clean, end, " \t\r\n")
		r, _ := utf8.DecodeRune(clean[i:])
		return nil, fmt.Errorf("mcp config: %w", at(data, i, "%q after the end of the top-level object: expected the end of the file", r))
	}
	first := skipBlank(clean, 0, " \t\r\n")
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("mcp config: %w", at(data, first, `the top level is %s: expected a JSON object like {"mcpServers": {...}}`, TypeName(doc)))
	}
	keys := objectKeys(clean, first)
	a, hasA := top["mcpServers"]
	b, hasB := top["servers"]
	var key string
	var raw any
	var valueAt int
	switch {
	case hasA && hasB:
		return nil, fmt.Errorf("mcp config: %w", at(data, keys["servers"].key, `both "mcpServers" and "servers" are present; use one`))
	case hasA:
		key, raw, valueAt = "mcpServers", a, keys["mcpServers"].value
	case hasB:
		key, raw, valueAt = "servers", b, keys["servers"].value
	default:
		if mcp, ok := top["mcp"].(map[string]any); ok {
			if s, ok := mcp["servers"]; ok {
				key, raw, valueAt = "mcp.servers", s, objectKeys(clean, keys["mcp"].value)["servers"].value
				break
			}
		}
		return nil, fmt.Errorf("mcp config: %w", noServersKey(data, first, keys))
	}
	entries, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("mcp config: %w", at(data, valueAt, "%q is %s: expected an object mapping server names to servers", key, TypeName(raw)))
	}
	return parseEntries(entries, lookupEnv, rulesOnly)
}

// noServersKey is the error for a document without a servers map: at a key that looks like one
// misspelt, else at the top-level object.
func noServersKey(data []byte, first int, keys map[string]keyAt) error {
	const msg = `no "mcpServers" (Claude Desktop, Cursor) or "servers" (VS Code) key`
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if near := nearKey(k, []string{"mcpServers", "servers"}); near != "" {
			return at(data, keys[k].key, "%s: found %q (did you mean %q?)", msg, k, near)
		}
	}
	return at(data, first, "%s: expected an object like {\"mcpServers\": {\"NAME\": {\"url\": ...}}}", msg)
}

// FromYAML takes the value of an "mcpServers:" map inline in toolmesh's YAML config, as
// yaml.v3 decodes it into a map[string]any field, and treats it exactly as Parse treats a
// JSON "mcpServers" map. A nil map yields no servers.
func FromYAML(mcpServers map[string]any, lookupEnv func(string) (string, bool)) (map[string]Server, error) {
	return parseEntries(mcpServers, lookupEnv, false)
}

// RulesFromYAML is FromYAML for the servers' rules alone, as LoadRules reads them.
func RulesFromYAML(mcpServers map[string]any, lookupEnv func(string) (string, bool)) (map[string]Server, error) {
	return parseEntries(mcpServers, lookupEnv, true)
}

func parseEntries(entries map[string]any, lookupEnv func(string) (string, bool), rulesOnly bool) (map[string]Server, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	out := make(map[string]Server, len(entries))
	served := servedNames{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		s, keep, err := parseEntry(name, entries[name], lookupEnv, rulesOnly)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !keep {
			continue // a disabled entry is served as nothing, so it clashes with nothing
		}
		if err := served.add(s); err != nil {
			errs = append(errs, err)
			continue
		}
		if s.ConfigName != "" {
			s.Warnings = append(s.Warnings, servedNote(s.ConfigName, s.Name))
		}
		out[s.Name] = s
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// entry decodes the known keys of one server object, collecting one error per bad field.
type entry struct {
	server string
	obj    map[string]any
	lookup func(string) (string, bool)
	// rulesOnly expands ${VAR} in the rules alone (allowedTools, excludedTools).
	rulesOnly bool
	errs      []error
}

func (e *entry) fail(field, format string, args ...any) {
	e.errs = append(e.errs, &FieldError{Server: e.server, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// parseEntry returns the server, whether to keep it (false when disabled), and its errors.
// A disabled entry is skipped after its "disabled" key is checked: nothing else in it is
// decoded, expanded or validated.
func parseEntry(name string, raw any, lookup func(string) (string, bool), rulesOnly bool) (Server, bool, error) {
	obj, ok := asObject(raw)
	if !ok {
		return Server{}, false, &FieldError{Server: name, Msg: "must be an object"}
	}
	e := &entry{server: name, obj: obj, lookup: lookup, rulesOnly: rulesOnly}
	if e.boolean("disabled") {
		return Server{}, false, nil
	}
	if len(e.errs) > 0 {
		return Server{}, false, errors.Join(e.errs...)
	}

	// Errors name the entry as the config does (e.server); the server is served as ServedName
	// makes of it.
	s := Server{Name: ServedName(name)}
	if s.Name != name {
		s.ConfigName = name
	}
	if s.Name == "" {
		e.fail("name", "leaves nothing to serve it as: a server name needs a letter a-z or A-Z, a digit, '_' or '-' "+
			"(tool ids are SERVER.TOOL with SERVER of lower-case letters, digits, '_' and '-')")
	}
	var explicit Transport
	for _, k := range []string{"transport", "type", "transportType"} {
		v, ok := e.str(k, false)
		if !ok {
			continue
		}
		t, err := ParseTransport(v)
		if err != nil {
			e.fail(k, "unknown transport %q; want sse, streamable-http (or http) or stdio", v)
			continue
		}
		if explicit != "" && t != explicit {
			e.fail(k, "%s conflicts with transport %s given by another key", t, explicit)
			continue
		}
		explicit = t
	}
	s.URL, _ = e.str("url", true)
	if alt, ok := e.str("serverUrl", true); ok { // Windsurf's spelling
		if s.URL != "" {
			e.fail("serverUrl", `cannot be combined with "url"`)
		}
		s.URL = alt
	}
	s.Headers = e.strMap("headers")
	s.Auth, s.OAuth = e.auth()
	s.Command, _ = e.str("command", true)
	s.Args = e.strSlice("args")
	s.Env = e.strMap("env")
	s.Timeout = e.duration("timeout")
	s.MaxConcurrency = e.integer("maxConcurrency")
	s.ProtocolVersion, _ = e.str("protocolVersion", false)
	// A rule present with no value is a file cut short or a slip, never "no rule": read as no
	// rule, "excludedTools:" would make every excluded tool callable.
	for _, k := range []string{"allowedTools", "excludedTools", "allowDestructive", "allowedPrompts", "excludedPrompts", "allowedResources", "excludedResources"} {
		if raw, ok := e.obj[k]; ok && raw == nil {
			e.fail(k, "has no value: give the rule (a list of tool name patterns, or true/false), or leave the key out")
		}
	}
	s.AllowedTools = e.strSlice("allowedTools")
	s.ExcludedTools = e.strSlice("excludedTools")
	s.AllowDestructive = e.boolean("allowDestructive")
	s.AllowedPrompts, s.ExcludedPrompts = e.strSlice("allowedPrompts"), e.strSlice("excludedPrompts")
	s.AllowedResources, s.ExcludedResources = e.strSlice("allowedResources"), e.strSlice("excludedResources")
	if raw, ok := e.obj["pinning"]; ok && raw == nil {
		e.fail("pinning", "has no value: give off, warn or enforce, or leave the key out (warn)")
	}
	if pinning, ok := e.str("pinning", false); ok {
		if _, err := ParsePinning(pinning); err != nil {
			e.fail("pinning", "%v", err)
		}
		s.Pinning = Pinning(pinning)
	}
	s.MaxResultBytes = e.resultBytes("maxResultBytes", e.obj)
	s.RateLimit = e.rateLimit("rateLimit", e.obj)
	s.Tools = e.toolSettings("tools")
	s.Warnings = unknownKeys(obj)
	if len(e.errs) > 0 {
		return Server{}, false, errors.Join(append(e.errs, hints(name, s.Warnings)...)...)
	}
	if rulesOnly {
		return Server{Name: s.Name, ConfigName: s.ConfigName, AllowedTools: s.AllowedTools, ExcludedTools: s.ExcludedTools,
			AllowDestructive: s.AllowDestructive, RateLimit: s.RateLimit, Tools: s.Tools,
			AllowedPrompts: s.AllowedPrompts, ExcludedPrompts: s.ExcludedPrompts, AllowedResources: s.AllowedResources, ExcludedResources: s.ExcludedResources}, true, nil
	}

	switch {
	case explicit != "":
		s.Transport = explicit
	case s.URL != "":
		s.Transport = inferTransport(s.URL)
	case s.Command != "":
		s.Transport = TransportStdio
	}
	if err := s.Validate(); err != nil {
		// "needs a url or a command" alone hides that the command was there, misspelt.
		return Server{}, false, errors.Join(append([]error{err}, hints(name, s.Warnings)...)...)
	}
	return s, true, nil
}

// inferTransport picks sse for a URL whose path ends in /sse, else streamable-http.
func inferTransport(raw string) Transport {
	if u, err := parseURLPath(raw); err == nil && (u == "/sse" || hasSuffixFold(u, "/sse")) {
		return TransportSSE
	}
	return TransportStreamableHTTP
}

func (e *entry) expand(field, v string) string {
	if e.rulesOnly && !strings.HasPrefix(field, "allowedTools[") && !strings.HasPrefix(field, "excludedTools[") {
		return v // a server's secrets are the executor's: not resolved, and not kept
	}
	out, err := expand(v, e.lookup)
	if err != nil {
		e.fail(field, "%s", err.Error())
		return ""
	}
	return out
}

func (e *entry) str(key string, expandVars bool) (string, bool) {
	raw, ok := e.obj[key]
	if !ok || raw == nil {
		return "", false
	}
	v, ok := raw.(string)
	if !ok {
		e.fail(key, "must be a string, not %s", TypeName(raw))
		return "", false
	}
	if expandVars {
		v = e.expand(key, v)
	}
	return v, true
}

func (e *entry) boolean(key string) bool {
	raw, ok := e.obj[key]
	if !ok || raw == nil {
		return false
	}
	v, ok := raw.(bool)
	if !ok {
		e.fail(key, "must be true or false, not %s", TypeName(raw))
	}
	return v
}

func (e *entry) strSlice(key string) []string {
	raw, ok := e.obj[key]
	if !ok || raw == nil {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		e.fail(key, "must be a list of strings, not %s", TypeName(raw))
		return nil
	}
	out := make([]string, 0, len(list))
	for i, item := range list {
		field := fmt.Sprintf("%s[%d]", key, i)
		v, ok := item.(string)
		if !ok {
			e.fail(field, "must be a string, not %s", TypeName(item))
			continue
		}
		out = append(out, e.expand(field, v))
	}
	return out
}

// strMap decodes a map of strings, expanding values (never keys).
func (e *entry) strMap(key string) map[string]string {
	raw, ok := e.obj[key]
	if !ok || raw == nil {
		return nil
	}
	m, ok := asObject(raw)
	if !ok {
		e.fail(key, "must be an object of strings, not %s", TypeName(raw))
		return nil
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		field := key + "." + k
		v, ok := m[k].(string)
		if !ok {
			e.fail(field, "must be a string, not %s", TypeName(m[k]))
			continue
		}
		out[k] = e.expand(field, v)
	}
	return out
}

// maxResultBytesLimit bounds maxResultBytes: a result is held whole before it is cut, so a
// bound past this is no bound.
const maxResultBytesLimit = 256 << 20

// resultBytes reads a maxResultBytes of obj (the server's, or one tool's under field's name).
func (e *entry) resultBytes(field string, obj map[string]any) int {
	raw, ok := obj[lastKey(field)]
	if !ok || raw == nil {
		if ok {
			e.fail(field, "has no value: give a number of bytes, or leave the key out")
		}
		return 0
	}
	n, ok := number(raw)
	if !ok || n != math.Trunc(n) || n < 1 || n > maxResultBytesLimit {
		e.fail(field, "must be a whole number of bytes between 1 and %d", maxResultBytesLimit)
		return 0
	}
	return int(n)
}

// rateLimit reads {"calls": N, "per": DURATION} of obj.
func (e *entry) rateLimit(field string, obj map[string]any) *RateLimit {
	raw, ok := obj[lastKey(field)]
	if !ok {
		return nil
	}
	m, isObj := asObject(raw)
	if !isObj {
		e.fail(field, `must be {"calls": N, "per": "1m"}, not %s`, TypeName(raw))
		return nil
	}
	sub := &entry{server: e.server, obj: m, lookup: e.lookup}
	calls, per := sub.integer("calls"), sub.duration("per")
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "calls" && k != "per" {
			e.fail(field+"."+k, `unknown key; a rate limit is {"calls": N, "per": "1m"}`)
		}
	}
	for _, err := range sub.errs {
		var fe *FieldError
		if errors.As(err, &fe) {
			e.fail(field+"."+fe.Field, "%s", fe.Msg)
		}
	}
	switch {
	case calls < 1:
		e.fail(field+".calls", "must be at least 1")
	case per <= 0:
		e.fail(field+".per", `must be a duration above 0, like "1m"`)
	default:
		return &RateLimit{Calls: calls, Per: per}
	}
	return nil
}

// toolSettings reads {"TOOL": {"maxResultBytes": N, "rateLimit": {...}}}.
func (e *entry) toolSettings(key string) map[string]ToolSettings {
	raw, ok := e.obj[key]
	if !ok || raw == nil {
		return nil
	}
	m, isObj := asObject(raw)
	if !isObj {
		e.fail(key, "must be an object of tool names to settings, not %s", TypeName(raw))
		return nil
	}
	out := make(map[string]ToolSettings, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		field := key + "." + name
		obj, isObj := asObject(m[name])
		if !isObj {
			e.fail(field, "must be an object like {\"maxResultBytes\": 65536}, not %s", TypeName(m[name]))
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if k != "maxResultBytes" && k != "rateLimit" {
				e.fail(field+"."+k, "unknown key; a tool's settings are maxResultBytes and rateLimit")
			}
		}
		out[name] = ToolSettings{MaxResultBytes: e.resultBytes(field+".maxResultBytes", obj), RateLimit: e.rateLimit(field+".rateLimit", obj)}
	}
	return out
}

// lastKey is the key a dotted field name ends in.
func lastKey(field string) string {
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		return field[i+1:]
	}
	return field
}

// duration accepts a Go duration string ("30s", "1m30s") or a number of seconds.
func (e *entry) duration(key string) time.Duration {
	raw, ok := e.obj[key]
	if !ok || raw == nil {
		return 0
	}
	var d time.Duration
	if s, ok := raw.(string); ok {
		v, err := time.ParseDuration(s)
		if err != nil {
			e.fail(key, `must be a duration like "30s" or a number of seconds, not %q`, s)
			return 0
		}
		d = v
	} else {
		f, ok := number(raw)
		if !ok {
			e.fail(key, `must be a duration like "30s" or a number of seconds, not %s`, TypeName(raw))
			return 0
		}
		if math.IsNaN(f) || f > float64(math.MaxInt64)/float64(time.Second) {
			e.fail(key, "must be a reasonable number of seconds")
			return 0
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		e.fail(key, "must be > 0")
		return 0
	}
	return d
}

func (e *entry) integer(key string) int {
	raw, ok := e.obj[key]
	if !ok || raw == nil {
		return 0
	}
	f, ok := number(raw)
	if !ok || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
		e.fail(key, "must be an integer, not %s", TypeName(raw))
		return 0
	}
	return int(f)
}

// number converts the numeric types encoding/json (with UseNumber) and yaml.v3 produce.
func number(raw any) (float64, bool) {
	switch v := raw.(type) {
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	case float64:
		return v, true
	case float32:
		return float64(v), true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case int32:
		return float64(v), true
	case uint64:
		return float64(v), true
	case uint:
		return float64(v), true
	}
	return 0, false
}

// asObject accepts the map shapes JSON and yaml.v3 decoding produce.
func asObject(raw any) (map[string]any, bool) {
	switch m := raw.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[fmt.Sprint(k)] = v
		}
		return out, true
	}
	return nil, false
}

// TypeName names the type of a value decoded from JSON or YAML, for errors ("must be a list of
// strings, not a string").
func TypeName(raw any) string {
	switch raw.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "an object"
	}
	if _, ok := number(raw); ok {
		return "a number"
	}
	return fmt.Sprintf("%T", raw)
}

func parseURLPath(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(u.Path, "/"), nil
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

// knownKeys are the keys parseEntry reads.
var knownKeys = []string{
	"disabled", "transport", "type", "transportType", "url", "serverUrl", "headers", "command", "args", "env",
	"timeout", "maxConcurrency", "protocolVersion", "allowedTools", "excludedTools", "allowDestructive",
	"pinning", "maxResultBytes", "rateLimit", "tools", "auth", "oauth",
	"allowedPrompts", "excludedPrompts", "allowedResources", "excludedResources",
}

// otherHostsKeys are keys other MCP hosts write into the same map (Cline, Roo, VS Code's
// gallery) that mean nothing to toolmesh: accepted without a word, so a shared file stays quiet.
var otherHostsKeys = []string{"autoApprove", "alwaysAllow", "description", "gallery", "version", "icon", "notes", "name"}

// unsupportedKeys are keys other hosts give a meaning toolmesh does not have, with what to do.
var unsupportedKeys = map[string]string{
	"cwd":           "toolmesh starts stdio servers in its own working directory",
	"envFile":       "put the variables in env (with ${VAR} references) instead",
	"disabledTools": "use excludedTools",
}

// unknownKeys lists, sorted, a warning for each key of obj that toolmesh does not read.
func unknownKeys(obj map[string]any) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if slices.Contains(knownKeys, k) || slices.Contains(otherHostsKeys, k) {
			continue
		}
		if why, ok := unsupportedKeys[k]; ok {
			out = append(out, fmt.Sprintf("key %q is not used by toolmesh: %s", k, why))
			continue
		}
		msg := fmt.Sprintf("unknown key %q", k)
		if near := nearKey(k, knownKeys); near != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", near)
		}
		out = append(out, msg+" is ignored")
	}
	return out
}

// hints turns an entry's warnings into errors that go with its real errors.
func hints(server string, warnings []string) []error {
	out := make([]error, len(warnings))
	for i, w := range warnings {
		out[i] = &FieldError{Server: server, Msg: w}
	}
	return out
}

// nearKey is the known key nearest to k: the same but for case, or at most two edits away.
func nearKey(k string, known []string) string { return closest.Name(k, known, 2) }
