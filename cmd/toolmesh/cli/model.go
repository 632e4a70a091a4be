package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/redact"
)

const modelUsage = `Usage:
  toolmesh model pull [NAME|REF]   download a model (default %s), verify its SHA-256, print its path
  toolmesh model pull --print-pin [NAME|REF]
                                   the same, then print its SHA-256 and size to pin it
  toolmesh model ls                list the models pulled (and what each was checked against),
                                   downloads left unfinished, and the known models not pulled
  toolmesh model rm NAME|REF       delete a pulled model, or an unfinished download of it

NAME is a known model: %s.
REF is hf://OWNER/REPO/FILE@REVISION, optionally followed by #sha256:HEX.
Models live in --models-dir (env %s; default: the user's cache folder + toolmesh/models).
The hub is %s unless %s names another; %s, when set, is sent to it
(never to the CDN it redirects to). Run "toolmesh model COMMAND -h" for a command's flags.
`

func printModelUsage(w io.Writer) {
	fmt.Fprintf(w, modelUsage, modelfetch.Default, strings.Join(modelfetch.Names(), ", "), modelfetch.EnvDir,
		modelfetch.DefaultEndpoint, modelfetch.EnvEndpoint, modelfetch.EnvToken)
}

func runModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printModelUsage(stderr)
		return exitError{code: 2}
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "pull":
		return runModelPull(ctx, rest, stdout, stderr)
	case "ls", "list":
		return runModelList(rest, stdout, stderr)
	case "rm", "remove":
		return runModelRemove(rest, stdout, stderr)
	case "help", "-h", "--help":
		printModelUsage(stdout)
		return nil
	default:
		return usageError("toolmesh model: unknown command %q; choose pull, ls or rm", cmd)
	}
}

// modelFlags are the flags every model command has.
type modelFlags struct {
	dir string
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	def, err := modelfetch.DefaultDir()
	if err != nil {
		def = ""
	}
	fs.StringVar(&m.dir, "models-dir", def, "folder of the model cache (env "+modelfetch.EnvDir+")")
}

func (m *modelFlags) cache() (modelfetch.Cache, error) {
	if m.dir == "" {
		return modelfetch.Cache{}, usageError("toolmesh model: no models folder: set --models-dir or %s", modelfetch.EnvDir)
	}
	return modelfetch.Cache{Dir: m.dir}, nil
}

// isTerminal reports whether w is a terminal, where progress is redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func runModelPull(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("model pull", stderr, "Usage: toolmesh model pull [NAME|REF] [flags]\n\nDownloads a model (default "+modelfetch.Default+
		") into the cache, verifies its SHA-256, and prints its path.")
	var m modelFlags
	m.register(fs)
	every := fs.Duration("progress-every", 10*time.Second, "how often progress is logged when stderr is not a terminal")
	printPin := fs.Bool("print-pin", false, "ask the hub, hash the file again, and print its SHA-256 and size to pin "+
		"(a registry entry's SHA256 and Size, an hf:// reference's #sha256:) instead of its path")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError("toolmesh model pull: one model at a time, got %d", len(pos))
	}
	name := modelfetch.Default
	if len(pos) == 1 {
		name = pos[0]
	}
	ref, err := modelfetch.ParseRef(name)
	if err != nil {
		return usageError("toolmesh model pull: %v", err)
	}
	if ref.Local() {
		return usageError("toolmesh model pull: %s is a local file: nothing to pull (give it to --model as it is)", ref.Path)
	}
	c, err := m.cache()
	if err != nil {
		return err
	}
	logger := newLogger(stderr, slog.LevelInfo, "text")
	f := modelfetch.FetcherFromEnv(logger)
	if isTerminal(stderr) {
		f.Progress = modelfetch.TerminalProgress(stderr)
	} else {
		f.Progress = modelfetch.LogProgress(logger, *every)
	}
	// A pin is taken from what the hub states now, never from the cache's word alone.
	if e, ok, err := c.Lookup(ref, f.Hub()); err == nil && ok && !*printPin {
		logger.Info("model already pulled", "model", ref.String(), "sha256", e.SHA256, "against", e.Verified)
		fmt.Fprintln(stdout, e.Path)
		return nil
	}
	logger.Info("pulling model", "model", ref.String(), "repo", ref.Repo, "file", ref.File, "revision", ref.Revision,
		"hub", f.Hub(), "into", c.Dir)
	e, err := f.Pull(ctx, c, ref)
	if err != nil {
		return pullError(err)
	}
	logger.Info("model verified", "model", ref.String(), "commit", e.Commit, "sha256", e.SHA256, "against", e.Verified, "bytes", e.Size)
	if !*printPin {
		fmt.Fprintln(stdout, e.Path)
		return nil
	}
	logger.Info("hashing the file again for its pin", "path", e.Path)
	if err := c.Verify(e); err != nil {
		return err
	}
	printModelPin(stdout, e)
	return nil
}

// pullError is a failed pull as one line: what failed (the fetcher names the reference, the
// host and the cause) and what to do next, when the error does not say it already.
func pullError(err error) error {
	msg := "toolmesh model pull: " + redact.Text(err.Error())
	switch {
	case errors.Is(err, modelfetch.ErrUnreachable):
		msg += "; check the network (a proxy goes in HTTPS_PROXY), or set " + modelfetch.EnvEndpoint + " to a mirror of the hub"
	case errors.Is(err, context.Canceled):
	case modelfetch.Permanent(err), errors.Is(err, modelfetch.ErrDeadline):
		// Their messages say what to do: a token, a name, the disk, pulling again.
	default:
		msg += "; run it again later (it resumes what was downloaded), or set " + modelfetch.EnvEndpoint + " to a mirror of the hub"
	}
	return exitError{code: 1, msg: msg}
}

// printModelPin prints the pin of a verified file: the lines a maintainer sets on the model's
// entry in the registry (internal/modelfetch/registry.go), and the reference a user can pull it by.
func printModelPin(w io.Writer, e modelfetch.Entry) {
	what := e.Repo + "/" + e.File
	if e.Name != "" {
		what = e.Name + " (" + what + ")"
	}
	already := ""
	if e.Pinned() {
		already = "; it is pinned already in the " + e.Verified
	}
	fmt.Fprintf(w, "# %s at commit %s: %d bytes with sha256 %s, as %s states them, and as the file in the cache hashes%s.\n",
		what, e.Commit, e.Size, e.SHA256, e.Endpoint, already)
	fmt.Fprintf(w, "# To pin it in the registry (internal/modelfetch/registry.go), set on its entry (a pin is taken from %s itself, not from a mirror):\n", modelfetch.DefaultEndpoint)
	fmt.Fprintf(w, "\t\tSHA256: %q,\n\t\tSize:   %d,\n", e.SHA256, e.Size)
	fmt.Fprintf(w, "# To pin it in a reference:\n%s%s/%s@%s#sha256:%s\n", modelfetch.Scheme, e.Repo, e.File, e.Commit, e.SHA256)
}

// checkedAgainst says what a cached file's bytes were checked against, for people.
func checkedAgainst(e modelfetch.Entry) string {
	if e.Pinned() {
		return "pinned sha256 (" + e.Verified + ")"
	}
	return "hub only, not pinned"
}

func runModelList(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("model ls", stderr, "Usage: toolmesh model ls [flags]\n\nLists the models pulled (with what each was checked against and the hub it came from),\n"+
		"downloads left unfinished, and the known models not pulled.")
	var m modelFlags
	m.register(fs)
	asJSON := fs.Bool("json", false, "print the pulled models and unfinished downloads as JSON")
	if err := parseFlags(fs, func() error { return fs.Parse(args) }); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("toolmesh model ls: unexpected argument %q", fs.Arg(0))
	}
	c, err := m.cache()
	if err != nil {
		return err
	}
	entries, err := c.List()
	if err != nil {
		return err
	}
	partials, err := c.Partials()
	if err != nil {
		return err
	}
	if *asJSON {
		// A partial download is a row too (partial: true, size: the bytes so far, path: the
		// .part file, no sha256): it takes disk space like the others.
		type row struct {
			modelfetch.Entry
			Ref     string `json:"ref"`
			Path    string `json:"path"`
			Pinned  bool   `json:"pinned"`
			Partial bool   `json:"partial,omitempty"`
		}
		rows := make([]row, 0, len(entries)+len(partials))
		for _, e := range entries {
			rows = append(rows, row{Entry: e, Ref: e.Ref.String(), Path: e.Path, Pinned: e.Pinned()})
		}
		for _, p := range partials {
			e := modelfetch.Entry{Name: p.Ref.Name, Repo: p.Ref.Repo, File: p.Ref.File, Revision: p.Ref.Revision, Commit: p.Ref.Revision, Size: p.Size}
			rows = append(rows, row{Entry: e, Ref: p.Ref.String(), Path: p.Path, Partial: true})
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	pulled := map[string]bool{}
	if len(entries) > 0 {
		fmt.Fprintln(tw, "MODEL\tSIZE\tSHA256\tCHECKED AGAINST\tFROM\tPATH")
	}
	unpinned := false
	for _, e := range entries {
		name := e.Ref.String()
		if e.Name != "" {
			pulled[e.Name] = true
		}
		unpinned = unpinned || !e.Pinned()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, modelfetch.Bytes(e.Size), e.SHA256[:min(12, len(e.SHA256))], checkedAgainst(e), e.Endpoint, e.Path)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(entries) == 0 {
		fmt.Fprintf(stdout, "No models pulled into %s yet.\n", c.Dir)
	}
	if unpinned {
		fmt.Fprintln(stdout, "Not pinned: checked only against the sha256 the hub stated when pulled, and reused for that hub only. "+
			"To pin one: toolmesh model pull --print-pin NAME|REF")
	}
	for _, p := range partials {
		fmt.Fprintf(stdout, "Unfinished download: %s, %s so far in %s: toolmesh model pull %s resumes it, toolmesh model rm %s deletes it\n",
			p.Ref, modelfetch.Bytes(p.Size), p.Path, p.Ref, p.Ref)
	}
	for _, k := range modelfetch.Registry() {
		if !pulled[k.Name] {
			fmt.Fprintf(stdout, "Not pulled: %s (%s): toolmesh model pull %s\n", k.Name, k.About, k.Name)
		}
	}
	return nil
}

func runModelRemove(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("model rm", stderr, "Usage: toolmesh model rm NAME|REF [flags]\n\nDeletes a pulled model (every commit pulled by that name, for a branch).")
	var m modelFlags
	m.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("usage: toolmesh model rm NAME|REF")
	}
	ref, err := modelfetch.ParseRef(pos[0])
	if err != nil {
		return usageError("toolmesh model rm: %v", err)
	}
	c, err := m.cache()
	if err != nil {
		return err
	}
	removed, err := c.Remove(ref)
	for _, p := range removed {
		fmt.Fprintf(stdout, "removed %s\n", p)
	}
	if err != nil {
		return err
	}
	if len(removed) == 0 {
		return errors.New(ref.String() + " is not pulled in " + c.Dir)
	}
	return nil
}
