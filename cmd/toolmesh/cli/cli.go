// Package cli is the toolmesh command line: it parses flags into config and runs the app,
// a shipped MCP server, or a client command against the api.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/toolmesh/toolmesh/internal/closest"
	"github.com/toolmesh/toolmesh/internal/redact"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

const usage = `toolmesh: MCP tool calling for open LLMs.

Usage:
  toolmesh up [flags]                         every service in one process, plus the demo MCP servers
  toolmesh serve --target=api,executor [flags] chosen services (microservices mode; "all" for every one)
  toolmesh mcp NAME [--transport T] [--addr A]  run a shipped MCP server (calculator, converter, sqlite)
  toolmesh model pull|ls|rm [NAME]            download (verified), list or delete the models toolmesh runs
  toolmesh tls init --dir D --names N,...     a private CA and a certificate per service, for mutual TLS
  toolmesh tools [--server S]                 list the tools of the running mesh
  toolmesh tools search "TEXT" [-k N]         the top-k tools for TEXT
  toolmesh tools pending [--server S]         tool definitions waiting for approval (changed, or hostile), with a diff
  toolmesh tools approve SERVER.TOOL          pin the definition a tool lists now; releases it from quarantine
  toolmesh call SERVER.TOOL '{"arg":1}'       call one tool (SERVER__TOOL, its name on /mcp, works too)
  toolmesh query "TEXT" [-k N] [--server S]   answer TEXT using the tools: steps on stderr, answer on stdout
  toolmesh connect [--search | --server S]    an MCP client's stdio, relayed to the mesh's MCP endpoint
  toolmesh login SERVER                       sign in to a remote MCP server that uses OAuth (prints the URL to open)
  toolmesh version [--json]                   the version, commit, Go version and protocol versions
  toolmesh audit verify FILE...               check an audit trail (--audit.file): names the first record edited, removed or moved

Client commands read --api (env TOOLMESH_API, default http://127.0.0.1:7700) and --token
(env TOOLMESH_TOKEN). Run "toolmesh COMMAND -h" for a command's flags.
`

// Main runs one command and returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "up":
		err = runUp(ctx, rest, stdout, stderr)
	case "serve":
		err = runServe(ctx, rest, stdout, stderr)
	case "mcp":
		err = runMCP(ctx, rest, stdin, stdout, stderr)
	case "model":
		err = runModel(ctx, rest, stdout, stderr)
	case "tls":
		err = runTLS(rest, stdout, stderr)
	case "tools":
		err = runTools(ctx, rest, stdout, stderr)
	case "call":
		err = runCall(ctx, rest, stdout, stderr)
	case "query":
		err = runQuery(ctx, rest, stdout, stderr)
	case "connect":
		err = runConnect(ctx, rest, stdin, stdout, stderr)
	case "login":
		err = runLogin(ctx, rest, stdin, stdout, stderr)
	case "version", "--version":
		err = runVersion(rest, stdout, stderr)
	case "audit":
		err = runAudit(rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "toolmesh: unknown command %q%s\n\n%s", cmd, commandHint(cmd, commands), usage)
		return 2
	}
	var exit exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintln(stderr, exit.msg)
		}
		return exit.code
	default:
		// An error may quote a URL with its credentials (Go's own errors do).
		fmt.Fprintf(stderr, "toolmesh %s: %s\n", args[0], redact.Text(err.Error()))
		return 1
	}
}

// commands are the commands Main runs, for "did you mean".
var commands = []string{"up", "serve", "mcp", "model", "tls", "tools", "call", "query", "connect", "login", "version", "audit", "help"}

// commandHint is ` (did you mean "NAME"?)` for the command nearest to cmd, or "".
func commandHint(cmd string, known []string) string {
	if near := closest.Name(cmd, known, 2); near != "" {
		return fmt.Sprintf(" (did you mean %q?)", near)
	}
	return ""
}

// exitError ends a command with a given code; usage errors are 2.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

func usageError(format string, a ...any) error {
	return exitError{code: 2, msg: fmt.Sprintf(format, a...)}
}

// newLogger is every command's logger. Lines logged inside a request carry its trace_id and
// span_id, and no line carries a URL's credentials (HF_ENDPOINT's, an MCP server's, a signed
// CDN query): the one redaction, whatever the command.
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if strings.EqualFold(format, "json") {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(redact.Handler(telemetry.LogHandler(h)))
}

// slogLevel parses a level name for flags.
type slogLevel struct{ Level slog.Level }

func (l *slogLevel) Set(s string) error { return l.Level.UnmarshalText([]byte(s)) }

// newFlagSet is a command's flag set; usage is printed, with the flags, for -h.
func newFlagSet(name string, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), strings.TrimRight(usage, "\n")+"\n\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags runs parse (fs.Parse, or a config load that parses fs) so that -h prints the usage
// and a bad flag is one line naming it and where to look, not the flag package's error, its
// "Usage of" and the error again.
func parseFlags(fs *flag.FlagSet, parse func() error) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := parse()
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	}
	return usageError("toolmesh %s: %v%s (see 'toolmesh %s -h')", fs.Name(), err, flagHint(fs, err), fs.Name())
}
