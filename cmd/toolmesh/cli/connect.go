package cli

import (
	"context"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/mcpbridge"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

const connectUsage = `Usage: toolmesh connect [--search | --server S] [--api URL]

Bridges an MCP client that launches a local command (Claude Desktop, VS Code, Cursor) to the
mesh's MCP endpoint: MCP over stdin and stdout, relayed to the api's /mcp (every tool the token
may call), /mcp/search (--search: search_tools and call_tool only) or /mcp/servers/S (--server:
one server's tools under their own names). The token comes from TOOLMESH_TOKEN. Logs go to
stderr; stdout carries only the protocol.`

func runConnect(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("connect", stderr, connectUsage)
	api := os.Getenv("TOOLMESH_API")
	if api == "" {
		api = "http://127.0.0.1:7700"
	}
	fs.StringVar(&api, "api", api, "api REST URL (env TOOLMESH_API)")
	search := fs.Bool("search", false, "relay to /mcp/search: two tools, search_tools and call_tool, for clients that must not see every tool")
	server := fs.String("server", "", "relay to /mcp/servers/S: one server's tools under their own names")
	callTimeout := fs.Duration("call-timeout", 10*time.Minute, "give up on one request after this long")
	logLevel := fs.String("log.level", "warn", "log level on stderr: debug, info, warn, error")
	if err := parseFlags(fs, func() error { return fs.Parse(args) }); err != nil {
		return err
	}
	var level slogLevel
	if err := level.Set(*logLevel); err != nil {
		return usageError("toolmesh connect: --log.level: %v", err)
	}
	if fs.NArg() > 0 {
		return usageError("toolmesh connect: unexpected argument %q", fs.Arg(0))
	}
	if *search && *server != "" {
		return usageError("toolmesh connect: --search and --server are two different endpoints: give one")
	}
	if *server != "" && !toolid.ValidServer(*server) {
		return usageError("toolmesh connect: --server %q: a server name matches %s", *server, toolid.ServerRule)
	}
	u, err := url.Parse(strings.TrimRight(api, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError("toolmesh connect: --api %q: want the api's REST URL, e.g. http://127.0.0.1:7700", api)
	}
	if *callTimeout <= 0 {
		return usageError("toolmesh connect: --call-timeout must be positive")
	}
	path := "/mcp"
	switch {
	case *search:
		path = "/mcp/search"
	case *server != "":
		path = "/mcp/servers/" + *server
	}
	logger := newLogger(stderr, level.Level, "text")
	b := mcpbridge.New(mcpbridge.Config{URL: u.String() + path, Token: os.Getenv("TOOLMESH_TOKEN"), CallTimeout: *callTimeout,
		Unreachable: "is `toolmesh up` running? (--api or TOOLMESH_API names the mesh when it runs elsewhere)"}, logger)
	return b.Run(ctx, stdin, stdout)
}
