package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/mcpservers"
	"github.com/toolmesh/toolmesh/mcpservers/serve"
	"github.com/toolmesh/toolmesh/mcpservers/sqlite"
)

func runMCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	transport := fs.String("transport", "sse", "sse, streamable-http or stdio (HTTP serves both /sse and /mcp)")
	addr := fs.String("addr", "127.0.0.1:7801", "HTTP listen address; loopback unless you say otherwise")
	origins := fs.String("allowed-origins", "", "comma-separated browser origins (scheme://host[:port]) that may call the HTTP transports, instead of the default: loopback origins on any port; * allows any")
	logLevel := fs.String("log.level", "info", "log level: debug, info, warn, error")
	dbPath := fs.String("db", "", "sqlite only: the SQLite database file to serve read-only (never created); default: a built-in demo database")
	var otelCfg telemetry.Config
	otelCfg.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: toolmesh mcp NAME [flags]\n\nRuns a shipped MCP server: %s.\n\nFlags:\n", strings.Join(mcpservers.Names(), ", "))
		fs.PrintDefaults()
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if err := parseFlags(fs, func() error { return fs.Parse(args) }); err != nil {
			return err
		}
		fs.Usage()
		return usageError("toolmesh mcp: name the server to run: %s", strings.Join(mcpservers.Names(), ", "))
	}
	name := args[0]
	if err := parseFlags(fs, func() error { return fs.Parse(args[1:]) }); err != nil {
		return err
	}
	newServer, ok := mcpservers.Lookup(name)
	if !ok {
		return usageError("toolmesh mcp: unknown server %q; choose from %s", name, strings.Join(mcpservers.Names(), ", "))
	}
	if fs.NArg() > 0 {
		// "toolmesh mcp sqlite my.db" must not quietly serve the demo instead.
		return usageError("toolmesh mcp: unexpected argument %q (a database file is given with --db)", fs.Arg(0))
	}
	if *dbPath != "" && name != sqlite.Name {
		return usageError("toolmesh mcp: --db is only for the %s server, not %s", sqlite.Name, name)
	}
	var level slogLevel
	if err := level.Set(*logLevel); err != nil {
		return usageError("toolmesh mcp: --log.level: %v", err)
	}
	// On stdio, stdout carries the protocol: logs go to stderr only.
	logger := newLogger(stderr, level.Level, "text")
	tel, err := telemetry.New(otelCfg)
	if err != nil {
		return usageError("toolmesh mcp: %v", err)
	}
	defer func() {
		// Send the last spans before the process ends.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(fctx)
	}()
	svc, err := tel.Service(ctx, "mcp-"+name)
	if err != nil {
		return err
	}
	opts := serve.Options{
		Telemetry: svc,
		Transport: *transport,
		Addr:      *addr,
		Logger:    logger,
		Stdin:     stdin,
		Stdout:    stdout,
		OnListen: func(a net.Addr) {
			fmt.Fprintf(stderr, "mcp %s: SSE http://%s/sse, streamable HTTP http://%s/mcp\n", name, a, a)
		},
	}
	if *origins != "" {
		opts.AllowedOrigins = strings.Split(*origins, ",")
	}
	srv, err := newServer(mcpservers.Options{DBPath: *dbPath})
	if err != nil {
		return err // it names the server or the database; the caller adds "toolmesh mcp:"
	}
	if name == sqlite.Name {
		db := *dbPath
		if db == "" {
			db = "the built-in demo database"
		}
		logger.Info("serving a SQLite database read-only", "db", db)
	}
	// Close removes the sqlite demo database, so it runs however Run ends.
	return errors.Join(serve.Run(ctx, srv.MCP, opts), srv.Close())
}
