// Command report regenerates bench/RESULTS.md: it runs every benchmark of the earlier issues,
// one after another, each side by side with its baseline in the same run, and writes one
// summary table (toolmesh, baseline, ratio, target, met) followed by each program's own tables.
//
//	go run ./bench/report [-o bench/RESULTS.md] [-quick] [-only executor,retrieval,...]
//	make bench
//
// Each program is built once into a temporary folder first, so compile time is not measured,
// and run from the repository root; each writes its headline figures with -json, which is what
// the summary is made of (never its text tables). Nothing runs concurrently with a benchmark
// except what that benchmark measures: the machine has 2 cores.
//
// A benchmark that fails does not lose the others: its section says "failed: <error>", the
// summary has a failed row, the file is written, and the command exits 1. A run of many minutes
// is worth keeping when one of eight programs breaks (or does not build: each package is built
// on its own, so work in progress elsewhere fails only the benchmarks that need it), and the
// failure stays visible in the file and to make. An interrupt, or a failure before any
// benchmark could run (not in the repository root, an unknown -only name), leaves the old file
// as it was.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/bench/internal/loadavg"
)

type options struct {
	out   string
	quick bool
	only  []string
}

func main() {
	var o options
	var only string
	flag.StringVar(&o.out, "o", filepath.Join("bench", "RESULTS.md"), "file to write (atomically: a temporary file, then a rename)")
	flag.BoolVar(&o.quick, "quick", false, "smoke run: tiny durations and sizes (about a minute); the file says the figures are not measurements")
	flag.StringVar(&only, "only", "", "comma-separated benchmarks to run (default all): "+strings.Join(names(), ","))
	flag.Parse()
	o.only = splitList(only)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failedN, err := run(ctx, o, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		stop()
		os.Exit(1)
	}
	if failedN > 0 {
		fmt.Fprintf(os.Stderr, "report: %d benchmark(s) failed; %s says why in their sections\n", failedN, o.out)
		stop()
		os.Exit(1)
	}
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// benchmark is one section of the report.
type benchmark struct {
	name  string
	issue string
	title string
	// builds are the main packages it runs; tests the packages whose test binary it runs.
	builds, tests []string
	run           func(ctx context.Context, r *runner, s *section)
}

func names() []string {
	var out []string
	for _, b := range benchmarks {
		out = append(out, b.name)
	}
	return out
}

// run builds the programs, runs the chosen benchmarks and writes the file; it returns how many
// benchmarks failed.
func run(ctx context.Context, o options, progress io.Writer) (int, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(progress, "report: "+format+"\n", args...) }
	root, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	if mod, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.Contains(mod, []byte("module github.com/toolmesh/toolmesh\n")) {
		return 0, fmt.Errorf("run me from the repository root (%s has no toolmesh go.mod)", root)
	}
	chosen := benchmarks
	if len(o.only) > 0 {
		chosen = nil
		for _, b := range benchmarks {
			if slices.Contains(o.only, b.name) {
				chosen = append(chosen, b)
			}
		}
		for _, n := range o.only {
			if !slices.Contains(names(), n) {
				return 0, fmt.Errorf("-only: unknown benchmark %q; want some of %s", n, strings.Join(names(), ","))
			}
		}
	}

	start := time.Now()
	doc := &document{Generated: start, Quick: o.quick, Machine: describe(ctx)}
	if len(o.only) > 0 {
		doc.Only = o.only
	}
	doc.Machine.LoadBefore = loadavg.Now()
	out := o.out
	if !filepath.IsAbs(out) {
		out = filepath.Join(root, out)
	}
	rel, _ := filepath.Rel(root, out)
	if strings.HasPrefix(rel, "..") {
		rel = ""
	}
	doc.Commit = commit(ctx, filepath.ToSlash(rel))

	tmp, err := os.MkdirTemp("", "toolmesh-bench-report-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	doc.Tmp = tmp
	r := &runner{root: root, tmp: tmp, quick: o.quick, progress: progress}
	r.chromium = chromiumWrapper(root)
	r.llama = llamaServer(root)

	// Build everything first, so no benchmark measures a compiler running beside it.
	buildStart := time.Now()
	buildFailed := r.build(ctx, chosen, logf)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	doc.Build = time.Since(buildStart)
	logf("built in %s", duration(doc.Build))

	for i, b := range chosen {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		logf("[%d/%d] %s", i+1, len(chosen), b.name)
		s := section{Name: b.name, Title: b.title, Issue: b.issue}
		t0 := time.Now()
		if err := buildErr(b, buildFailed); err != nil {
			s.Err = "build: " + err.Error()
		} else {
			b.run(ctx, r, &s)
		}
		s.Elapsed = time.Since(t0)
		s.Err = strings.ReplaceAll(s.Err, tmp, "$TMP")
		if err := ctx.Err(); err != nil {
			return 0, err // interrupted: the old file stays
		}
		switch {
		case s.Err != "":
			logf("%s FAILED after %s: %s", b.name, duration(s.Elapsed), firstLine(s.Err))
		case s.Skip != "":
			logf("%s skipped: %s", b.name, s.Skip)
		default:
			logf("%s done in %s", b.name, duration(s.Elapsed))
		}
		doc.Sections = append(doc.Sections, s)
	}
	doc.Machine.LoadAfter = loadavg.Now()
	doc.Elapsed = time.Since(start)
	doc.Machine.Environments = []string{"OTEL_* variables removed from the programs' environment (a collector set in the shell must not turn tracing on where it is meant to be off); the tracing benchmark sets its own"}

	var buf bytes.Buffer
	if err := render(&buf, doc); err != nil {
		return 0, err
	}
	if err := writeAtomic(out, buf.Bytes()); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range doc.Sections {
		if s.Err != "" {
			n++
		}
	}
	logf("wrote %s (%s in all)", o.out, duration(doc.Elapsed))
	return n, nil
}

// writeAtomic replaces path with b through a temporary file in the same folder and a rename,
// so a reader (or a failed run) never sees half a file.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	if werr == nil {
		werr = f.Chmod(0o644)
	}
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// runner runs the built programs.
type runner struct {
	root, tmp string
	quick     bool
	progress  io.Writer
	chromium  string // the chromium wrapper for the console's browser test, "" when there is none
	llama     string // the llama-server wrapper for the live calls, "" when there is none
}

// build compiles the chosen benchmarks' programs and test binaries into r.tmp, one package at
// a time, and returns why each package that did not build failed: a package broken by work in
// progress elsewhere in the tree then fails only the benchmarks that need it.
func (r *runner) build(ctx context.Context, chosen []benchmark, logf func(string, ...any)) map[string]error {
	failed := map[string]error{}
	done := map[string]bool{}
	goCmd := func(pkg string, args ...string) {
		if done[pkg] {
			return
		}
		done[pkg] = true
		logf("go %s", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = r.root
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Run(); err != nil {
			failed[pkg] = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
	}
	for _, b := range chosen {
		for _, p := range b.builds {
			goCmd(p, "build", "-o", r.program(p), p)
		}
		if b.name == "console" && r.chromium == "" {
			continue // skipped: nothing to build
		}
		for _, p := range b.tests {
			goCmd(p+" (tests)", "test", "-c", "-o", r.testBinary(p), p)
		}
	}
	return failed
}

// buildErr is why b cannot run for want of a program, or nil.
func buildErr(b benchmark, failed map[string]error) error {
	for _, p := range b.builds {
		if err := failed[p]; err != nil {
			return err
		}
	}
	for _, p := range b.tests {
		if err := failed[p+" (tests)"]; err != nil {
			return err
		}
	}
	return nil
}

// program is where the main package ./bench/NAME or ./cmd/NAME was built.
func (r *runner) program(pkg string) string { return filepath.Join(r.tmp, filepath.Base(pkg)) }

// testBinary is where `go test -c` put pkg's tests.
func (r *runner) testBinary(pkg string) string {
	return filepath.Join(r.tmp, filepath.Base(pkg)+".test")
}

// spec is one program run.
type spec struct {
	shown    string   // how a user runs it, e.g. "go run ./bench/executor"
	bin      string   // what runs
	args     []string // its arguments
	shownArg []string // the arguments as shown, when they differ (test binaries)
	dir      string   // working folder relative to the root ("" = the root)
	env      []string // KEY=VALUE added to the environment (and shown)
	markdown bool
	timeout  time.Duration
}

// line is the command as typed from the repository root, with the build folder as $TMP.
func (r *runner) line(s spec) string {
	var parts []string
	parts = append(parts, s.env...)
	parts = append(parts, s.shown)
	args := s.args
	if s.shownArg != nil {
		args = s.shownArg
	}
	for _, a := range args {
		parts = append(parts, quote(a))
	}
	return strings.ReplaceAll(strings.Join(parts, " "), r.tmp, "$TMP")
}

func quote(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t'\"$^*?()[]{}|&;<>\\`") {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// exec runs s, with stdout kept for the report and stderr passed through as progress.
func (r *runner) exec(ctx context.Context, s spec) command {
	c := command{Line: r.line(s), Markdown: s.markdown, LoadBefore: loadavg.Now()}
	fmt.Fprintf(r.progress, "report: $ %s\n", c.Line)
	timeout := s.timeout
	if timeout == 0 {
		timeout = 15 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, s.args...)
	cmd.Dir = filepath.Join(r.root, s.dir)
	cmd.Env = append(withoutOTEL(os.Environ()), s.env...)
	// Interrupt first so a program stops its own children (bench/loop's mesh processes).
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(&stderr, r.progress)
	t0 := time.Now()
	err := cmd.Run()
	c.Elapsed = time.Since(t0)
	c.LoadAfter = loadavg.Now()
	c.Output = stdout.String()
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("%w: still running after %s", err, timeout)
		}
		c.Err = err.Error()
		c.StderrTail = tail(stderr.String(), 25)
	}
	return c
}

func withoutOTEL(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") })
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// runJSON runs s with -json FILE appended and reads FILE into v. It returns the command and
// an error when the figures cannot be had.
func (r *runner) runJSON(ctx context.Context, s spec, file string, v any) (command, error) {
	path := filepath.Join(r.tmp, file)
	s.args = append(s.args, "-json", path)
	c := r.exec(ctx, s)
	if err := figures.Read(path, v); err != nil {
		if c.Err != "" {
			return c, fmt.Errorf("%s: %s", s.shown, c.Err)
		}
		return c, fmt.Errorf("%s wrote no figures: %w", s.shown, err)
	}
	return c, nil
}

// installed is a program one of the scripts installs: $env when set, else the file at path
// under the scripts' cache folder ($TOOLMESH_CACHE, else .cache in the root), "" when there is
// none.
func installed(root, env string, path ...string) string {
	if b := os.Getenv(env); b != "" {
		return b
	}
	cache := os.Getenv("TOOLMESH_CACHE")
	if cache == "" {
		cache = filepath.Join(root, ".cache")
	}
	b := filepath.Join(append([]string{cache}, path...)...)
	if st, err := os.Stat(b); err == nil && st.Mode().IsRegular() {
		return b
	}
	return ""
}

// chromiumWrapper is the browser scripts/chromium installs.
func chromiumWrapper(root string) string {
	return installed(root, "TOOLMESH_CHROMIUM", "chromium", "chromium")
}

// llamaServer is the llama-server wrapper scripts/llamaserver installs.
func llamaServer(root string) string {
	return installed(root, "TOOLMESH_LLAMA_SERVER", "llama", "llama-server")
}
