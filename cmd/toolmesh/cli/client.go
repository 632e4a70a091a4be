package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/internal/toolid"
)

// client talks to the api's REST endpoints.
type client struct {
	base    string
	token   string
	asJSON  bool
	timeout time.Duration
	http    *http.Client
}

func (c *client) register(fs *flag.FlagSet) {
	def := os.Getenv("TOOLMESH_API")
	if def == "" {
		def = "http://127.0.0.1:7700"
	}
	fs.StringVar(&c.base, "api", def, "api REST URL (env TOOLMESH_API)")
	fs.StringVar(&c.token, "token", "", "API token (env TOOLMESH_TOKEN; prefer the env var, flags show in ps)")
	fs.BoolVar(&c.asJSON, "json", false, "print the api's JSON response")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up after this long")
}

func (c *client) init() {
	if c.token == "" {
		c.token = os.Getenv("TOOLMESH_TOKEN")
	}
	c.base = strings.TrimRight(c.base, "/")
	c.http = &http.Client{Timeout: c.timeout}
}

// maxBody caps how much of one response, or of one stream line, the client reads.
const maxBody = 64 << 20

// apiError is the api's JSON error body, or the error line that ends a failed stream.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	status  int    // HTTP status; 0 for an error that came as a stream line after a 200
}

func (e *apiError) Error() string {
	if e.status == 0 {
		// A stream line has no HTTP status of its own, only the gRPC code.
		return fmt.Sprintf("%s (%s)", e.Message, codes.Code(e.Code))
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.status)
}

// decodeAPIError reads an error body. grpc-gateway sends {"code","message","details"} for a
// unary call, but {"error":{...}} (with the HTTP status set) for a stream that fails before
// its first event, so both shapes are accepted; anything else is shown as text.
func decodeAPIError(status int, data []byte) *apiError {
	var body struct {
		Code    int       `json:"code"`
		Message string    `json:"message"`
		Error   *apiError `json:"error"`
	}
	e := &apiError{status: status}
	switch {
	case json.Unmarshal(data, &body) != nil:
		e.Message = oneLine(string(data), 300)
	case body.Error != nil && body.Error.Message != "":
		e.Code, e.Message = body.Error.Code, body.Error.Message
	case body.Message != "":
		e.Code, e.Message = body.Code, body.Message
	default:
		e.Message = oneLine(string(data), 300)
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// do sends a request and returns the raw body of a 2xx answer.
func (c *client) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	return data, nil
}

// stream sends a request and returns the body of a 2xx answer unread, for streaming
// endpoints; the caller closes it. Cancelling ctx aborts the request.
func (c *client) stream(ctx context.Context, method, path string, body any) (io.ReadCloser, error) {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// send sends a request; a non-2xx answer is read and returned as an *apiError.
func (c *client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("api URL %q: %w", c.base, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the toolmesh api at %s (is `toolmesh up` running? set --api or TOOLMESH_API): %w", c.base, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		if err != nil {
			return nil, fmt.Errorf("read error response (HTTP %d): %w", resp.StatusCode, err)
		}
		return nil, decodeAPIError(resp.StatusCode, data)
	}
	return resp, nil
}

type toolJSON struct {
	ID          string `json:"id"`
	Description string `json:"description"`
	// Pin and Findings say what toolmesh trusts of the definition (toolFlags).
	Pin      string `json:"pin"`
	Findings []struct {
		Kind string `json:"kind"`
	} `json:"findings"`
}

func runTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "search":
			return runToolsSearch(ctx, args[1:], stdout, stderr)
		case "pending":
			return runToolsPending(ctx, args[1:], stdout, stderr)
		case "approve":
			return runToolsApprove(ctx, args[1:], stdout, stderr)
		}
	}
	fs := newFlagSet("tools", stderr, "Usage: toolmesh tools [--server S] [flags]\n       toolmesh tools search \"TEXT\" [-k N] [flags]\n"+
		"       toolmesh tools pending [--server S] [flags]\n       toolmesh tools approve SERVER.TOOL [--hash H] [flags]\n\n"+
		"Lists the tools of the running mesh. A tool flagged for review shows its pin state (changed) and findings.")
	var c client
	c.register(fs)
	server := fs.String("server", "", "only this server's tools")
	if err := parseFlags(fs, func() error { return fs.Parse(args) }); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("toolmesh tools: unexpected argument %q (did you mean `toolmesh tools search`?)", fs.Arg(0))
	}
	c.init()
	path := "/v1/tools"
	if *server != "" {
		path += "?server=" + url.QueryEscape(*server)
	}
	data, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if c.asJSON {
		_, err := stdout.Write(data)
		return err
	}
	var out struct{ Tools []toolJSON }
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("decode tools: %w", err)
	}
	flagged := false
	for _, t := range out.Tools {
		flagged = flagged || toolFlags(t) != ""
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, t := range out.Tools {
		if flagged {
			// The flags get a column only when a tool has any: the common listing stays two.
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, toolFlags(t), firstLine(shown(t.Description), 80))
		} else {
			fmt.Fprintf(tw, "%s\t%s\n", t.ID, firstLine(shown(t.Description), 80))
		}
	}
	return tw.Flush()
}

func runToolsSearch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tools search", stderr, "Usage: toolmesh tools search \"TEXT\" [-k N] [flags]\n\nThe top-k tools of the running mesh for TEXT.")
	var c client
	c.register(fs)
	k := fs.Int("k", 4, "how many tools (1-50)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError(`usage: toolmesh tools search "TEXT" [-k N]`)
	}
	c.init()
	q := url.Values{"q": {pos[0]}, "k": {strconv.Itoa(*k)}}
	data, err := c.do(ctx, http.MethodGet, "/v1/tools:search?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	if c.asJSON {
		_, err := stdout.Write(data)
		return err
	}
	var out struct {
		Results []struct {
			Tool  toolJSON
			Score float64
		}
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("decode search results: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, r := range out.Results {
		fmt.Fprintf(tw, "%.3f\t%s\t%s\n", r.Score, printable(r.Tool.ID), printable(firstLine(r.Tool.Description, 70)))
	}
	return tw.Flush()
}

func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("call", stderr, "Usage: toolmesh call SERVER.TOOL ['{\"arg\":value}' | NAME=VALUE ...] [flags]\n\n"+
		"Calls one tool, named by its id (calculator.add) or by the name the MCP endpoints show (calculator__add). Arguments are one JSON object, or NAME=VALUE words whose VALUE is read as JSON\n"+
		"when it is (2, true, [1]) and as a string otherwise: toolmesh call calculator.add a=2 b=3")
	var c client
	c.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 {
		fs.Usage()
		return usageError("toolmesh call: name the tool, as SERVER.TOOL")
	}
	arguments, err := callArguments(pos[1:])
	if err != nil {
		return usageError("toolmesh call: %v", err)
	}
	c.init()
	server, name, err := c.resolveTool(ctx, "call", pos[0], c.toolIDs)
	if err != nil {
		return err
	}
	path := "/v1/tools/" + url.PathEscape(server) + "/" + url.PathEscape(name) + ":call"
	data, err := c.do(ctx, http.MethodPost, path, map[string]any{"arguments": arguments})
	if err != nil {
		return c.unknownToolHint(ctx, err, toolid.Join(server, name))
	}
	var out struct {
		Content []struct {
			Type, Text string
			MimeType   string `json:"mime_type"`
			Data       []byte
			URI        string
		}
		IsError bool `json:"is_error"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return fmt.Errorf("decode result: %w", err)
	}
	if c.asJSON {
		if _, err := stdout.Write(data); err != nil {
			return err
		}
	} else {
		w := stdout
		if out.IsError {
			w = stderr
		}
		// A tool's result is text from outside: what a terminal would act on is escaped.
		for _, b := range out.Content {
			switch {
			case b.Type == "text":
				fmt.Fprintln(w, printable(b.Text))
			case b.URI != "":
				fmt.Fprintf(w, "[%s %s]\n", printable(b.Type), printable(b.URI))
			default:
				fmt.Fprintf(w, "[%s %s, %d bytes]\n", printable(b.Type), printable(b.MimeType), len(b.Data))
			}
		}
	}
	if out.IsError {
		return exitError{code: 1, msg: "toolmesh call: the tool reported an error"}
	}
	return nil
}

// parseInterspersed parses flags that come before, between or after the positional
// arguments, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, func() error { return fs.Parse(args) }); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func firstLine(s string, max int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}

// oneLine makes s one readable line: whitespace runs, newlines included, become one space,
// and it is cut to max runes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}

// listFlag collects a flag given several times or as a comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// writeJSON writes an api JSON body indented, with a final newline.
func writeJSON(w io.Writer, data []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, "", "  "); err != nil {
		return fmt.Errorf("the api's answer is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// callArguments reads a call's arguments: one JSON object ('{"a":2,"b":3}'), or NAME=VALUE
// words (a=2 b=3), where a VALUE that is JSON (2, true, "x", [1]) is taken as such and anything
// else as a string.
func callArguments(words []string) (map[string]any, error) {
	arguments := map[string]any{}
	if len(words) == 0 {
		return arguments, nil
	}
	if strings.HasPrefix(strings.TrimSpace(words[0]), "{") {
		if len(words) > 1 {
			return nil, fmt.Errorf("give the arguments as one JSON object or as NAME=VALUE words, not both (extra %q)", words[1])
		}
		dec := json.NewDecoder(strings.NewReader(words[0]))
		dec.UseNumber()
		if err := dec.Decode(&arguments); err != nil {
			return nil, fmt.Errorf("arguments must be a JSON object: %v", err)
		}
		return arguments, nil
	}
	for _, w := range words {
		name, raw, ok := strings.Cut(w, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("argument %q is neither a JSON object nor NAME=VALUE (e.g. '{\"a\":2,\"b\":3}' or a=2 b=3)", w)
		}
		if _, dup := arguments[name]; dup {
			return nil, fmt.Errorf("argument %q is given twice", name)
		}
		var v any = raw
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.UseNumber()
		var parsed any
		if err := dec.Decode(&parsed); err == nil && !dec.More() {
			v = parsed
		}
		arguments[name] = v
	}
	return arguments, nil
}
