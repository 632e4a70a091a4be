package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/oauth"
)

const loginUsage = `Usage: toolmesh login SERVER [--config FILE | --mcp-config FILE] [--listen 127.0.0.1:PORT] [flags]

Signs toolmesh in to a remote MCP server that uses OAuth (auth: oauth in mcpServers, or a server
that answered 401 asking for it): finds its authorization server, registers toolmesh there when
no oauth.clientId is configured and the server offers registration, prints the URL to open in a
browser, and waits for the redirect to a loopback address (authorization code with PKCE). With
the browser on another machine, paste the address it ended on. The tokens are kept in
--executor.oauth-dir (one 0600 file per server), where the executor reads and refreshes them;
it connects to the server within half a minute. Run it with the config the executor uses.`

func runLogin(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("login", stderr, loginUsage)
	var cfg app.Config
	cfg.RegisterFlags(fs)
	listen := fs.String("listen", "127.0.0.1:0", "loopback address the redirect comes back to (port 0: any free port)")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for the sign-in in the browser")
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseFlags(fs, func() error { return cfg.Load(fs, args) }); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usageError("toolmesh login: unexpected argument %q", fs.Arg(0))
	}
	if name == "" {
		return usageError("toolmesh login: name the server to sign in to (toolmesh login SERVER)")
	}
	srv, ok := cfg.Executor.Servers[mcpconfig.ServedName(name)]
	if !ok {
		names := mcpconfig.Names(cfg.Executor.Servers)
		if len(names) == 0 {
			return usageError("toolmesh login: no MCP servers are configured: give the config the executor uses (--config or --mcp-config)")
		}
		return usageError("toolmesh login: no server %q in the config%s (servers: %s)", name, commandHint(name, names), strings.Join(names, ", "))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	store := cfg.Executor.OAuthStore()
	rec, err := oauth.Login(ctx, oauth.LoginOptions{Server: srv, Store: store, Listen: *listen, Out: stderr, Paste: stdin})
	if err != nil {
		return err
	}
	where := "the token directory"
	if fsStore, ok := store.(oauth.FileStore); ok {
		where = fsStore.Dir
	}
	fmt.Fprintf(stdout, "Signed in to %s (authorization server %s); tokens kept in %s.\n", srv.Name, rec.Issuer, where)
	return nil
}
