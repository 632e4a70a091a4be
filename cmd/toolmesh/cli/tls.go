package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/tlsfiles"
)

const tlsUsage = `Usage:
  toolmesh tls init --dir DIR --names api,retriever,inference,executor [--valid-for D]

Makes DIR hold a private CA (ca.crt, ca.key; made on the first run, kept after) and, for each
name, a folder NAME with tls.crt, tls.key and ca.crt: a certificate for NAME, localhost,
127.0.0.1 and ::1, for server and client use, which the services' --tls.cert-file,
--tls.key-file and --tls.ca-file take. A certificate already there is kept until a third of
--valid-for is left, so running it at every start (compose.mtls.yaml's tls-init) renews them in
time. Mount a service's own folder only: DIR's top holds the CA's key.
`

func runTLS(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, tlsUsage)
		return exitError{code: 2}
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "init":
		return runTLSInit(rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, tlsUsage)
		return nil
	default:
		return usageError("toolmesh tls: unknown command %q; choose init", cmd)
	}
}

func runTLSInit(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tls init", stderr, tlsUsage)
	dir := fs.String("dir", "", "folder of the CA and of one folder per name (required)")
	names := fs.String("names", "", "comma-separated names to issue certificates for: the host names the services are dialled by (required)")
	// Ninety days, as cert-manager's default and the Helm chart's: long enough that a mesh
	// restarted now and then renews in time, short enough that a leaked key expires.
	validFor := fs.Duration("valid-for", 2160*time.Hour, "how long each new certificate is valid")
	if err := parseFlags(fs, func() error { return fs.Parse(args) }); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("toolmesh tls init: unexpected argument %q (see 'toolmesh tls init -h')", fs.Arg(0))
	}
	if *dir == "" {
		return usageError("toolmesh tls init: --dir: required")
	}
	var list []string
	for n := range strings.SplitSeq(*names, ",") {
		if n = strings.TrimSpace(n); n != "" {
			list = append(list, n)
		}
	}
	results, err := tlsfiles.Init(*dir, list, *validFor)
	for _, r := range results {
		what := "kept"
		if r.Issued {
			what = "issued"
		}
		fmt.Fprintf(stdout, "%s %s (valid until %s)\n", what, r.Name, r.NotAfter.UTC().Format(time.RFC3339))
	}
	return err
}
