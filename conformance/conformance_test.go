package conformance

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/mcpservers"
)

// versions are the protocol versions toolmesh speaks that the suite tests
// on the wire. Each scenario runs at every one of them it applies to: the
// dated versions use the initialize handshake, 2026-07-28 is stateless, and
// passing on one says nothing about the other.
var versions = []string{"2025-06-18", "2025-11-25", "2026-07-28"}

// scope says why scenarios (or checks) toolmesh does not claim are not run
// against it. pattern is matched with path.Match against the scenario name,
// or against "SCENARIO#CHECK-ID" for a check.
type scope struct {
	pattern string
	reason  string
}

func lookup(scopes []scope, name string) (string, bool) {
	for _, s := range scopes {
		if ok, _ := path.Match(s.pattern, name); ok {
			return s.reason, true
		}
	}
	return "", false
}

// clientNotClaimed: toolmesh's MCP client (the executor) calls tools; it
// declares no client capabilities and authenticates with the static headers
// of the server's configuration.
var clientNotClaimed = []scope{
	{"auth/*", "OAuth: the executor sends the static headers configured for a server (mcp.json \"headers\") and runs no OAuth flow"},
	{"elicitation-*", "elicitation: the executor is a tools-only client and declares no elicitation capability"},
	{"sep-2322-client-request-state", "MRTR input requests (SEP-2322) carry elicitation answers; the executor declares no elicitation, sampling or roots capability"},
	{"sep-2640-*", "skills extension (SEP-2640): not a tools feature"},
}

// fixtureTools: scenarios that call tools only the suite's reference server
// has (test_simple_text, test_image_content, ...), so they test that server's
// fixtures, not a tools server in general.
const fixtureTools = "calls the suite's fixture tools (test_*), which only its reference server has"

// serverNotClaimed: the shipped servers serve tools and nothing else, and
// never ask the client for input.
var serverNotClaimed = []scope{
	{"resources-*", "resources: the shipped servers are tools-only"},
	{"sep-2164-resource-not-found", "resources: the shipped servers are tools-only"},
	{"prompts-*", "prompts: the shipped servers are tools-only"},
	{"completion-complete", "completions: the shipped servers are tools-only"},
	{"logging-set-level", "logging: the shipped servers declare no logging capability"},
	{"tools-call-*", fixtureTools},
	{"json-schema-2020-12", fixtureTools},
	{"elicitation-*", "elicitation: the shipped servers never ask the client for input; " + fixtureTools},
	{"input-required-result-*", "input requests (elicitation, sampling, roots): the shipped servers never ask the client for input; " + fixtureTools},
	{"tasks-*", "tasks extension: the shipped servers run calls synchronously"},
	{"sep-2640-*", "skills extension (SEP-2640): not a tools feature"},
}

// serverChecksNotApplicable: single checks of claimed scenarios that are
// about what a tools-only server does not have. Checks the suite itself marks
// untestable (a fixture tool is missing) are skipped without being listed.
var serverChecksNotApplicable = []scope{
	{"caching#sep-2549-prompts-*", "prompts: the shipped servers are tools-only"},
	{"caching#sep-2549-resources-*", "resources: the shipped servers are tools-only"},
}

func TestConformance(t *testing.T) {
	s := findSuite(t)
	xf, err := loadExpectations(expectedFailuresFile)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Runs once every subtest below, parallel ones included, has finished.
	t.Cleanup(func() {
		t.Logf("conformance suite: %s", time.Since(start).Round(10*time.Millisecond))
		checkUnused(t, xf)
	})

	// The client and the servers are tested side by side: much of the time
	// is the suite waiting on sockets and timers.
	t.Run("client", func(t *testing.T) {
		t.Parallel()
		// The suite runs this test binary as the client command; TestMain
		// turns it into conformance.Main.
		env := []string{envRole + "=client"}
		command := clientCommand(os.Args[0], clientNotClaimed)
		scenarios := s.list(t, "client")
		for _, v := range versions {
			t.Run(v, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				results := s.run(ctx, t, env, v, "client", "--command", command)
				for _, name := range scenarios[v] {
					t.Run(name, func(t *testing.T) {
						res, ok := results[name]
						judge(t, xf, "client/"+v+"/"+name, name, res, ok, clientNotClaimed, nil)
					})
				}
			})
		}
	})

	t.Run("server", func(t *testing.T) {
		t.Parallel()
		scenarios := s.list(t, "server")
		for _, name := range append(mcpservers.Names(), meshServer) {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var url string
				if name == meshServer {
					url = startMesh(t)
				} else {
					url = startServer(t, name)
				}
				for _, v := range versions {
					t.Run(v, func(t *testing.T) {
						ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
						defer cancel()
						results := s.run(ctx, t, nil, v, "server", "--url", url)
						for _, sc := range scenarios[v] {
							t.Run(sc, func(t *testing.T) {
								res, ok := results[sc]
								judge(t, xf, "server/"+name+"/"+v+"/"+sc, sc, res, ok, serverNotClaimed, serverChecksNotApplicable)
							})
						}
					})
				}
				t.Run("sse", func(t *testing.T) {
					if name == meshServer {
						t.Skip("the suite drives servers over streamable HTTP only (its server runner connects with the SDK's StreamableHTTPClientTransport); " +
							"the mesh's legacy SSE endpoint (/sse) serves the same catalog and is covered by services/api/mcpface's tests (TestSSE)")
					}
					t.Skip("the suite drives servers over streamable HTTP only (its server runner connects with the SDK's StreamableHTTPClientTransport); " +
						"the SSE endpoint is the same mcp-go server behind mcpservers/serve and is covered by that package's tests")
				})
			})
		}
	})
}

// checkUnused fails on entries of expected-failures.txt that matched no
// scenario: a scenario that no longer exists, or a misspelt key. It can only
// tell when every subtest ran.
func checkUnused(t *testing.T, xf expectations) {
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return
	}
	if t.Skipped() || t.Failed() {
		return
	}
	for _, x := range xf {
		if x.matched == 0 {
			t.Errorf("%s matches no scenario that ran: remove or correct the entry", x)
		}
	}
}

// judge decides one scenario's subtest from the suite's checks. It is
// skipped when toolmesh does not claim what the scenario tests. Otherwise
// every check must pass, except those expected-failures.txt expects to fail;
// an expected failure that no longer fails is itself a failure, so the file
// only shrinks (a flaky entry may also pass).
//
// id is the subtest path below TestConformance (the key of
// expected-failures.txt), name the scenario's name in the suite.
func judge(t *testing.T, xf expectations, id, name string, res result, ok bool, notClaimed, checksNA []scope) {
	t.Helper()
	if reason, skip := lookup(notClaimed, name); skip {
		t.Skipf("not claimed: %s (suite: %s)", reason, summary(res.checks))
	}
	entries := xf.forScenario(id)
	if !ok {
		t.Fatalf("the suite listed %s at this version but left no result for it", name)
	}

	var unexpected, expected, flaky, na []string
	failedFor := map[*expectation]bool{}
	counted := 0
	for _, c := range res.checks {
		switch c.Status {
		case "INFO", "SKIPPED":
			continue
		}
		if reason, skip := lookup(checksNA, name+"#"+c.ID); skip {
			na = append(na, fmt.Sprintf("%s (%s)", c.ID, reason))
			continue
		}
		if c.Status == "FAILURE" && c.Details["untestable"] == true {
			na = append(na, fmt.Sprintf("%s (%s)", c.ID, c.ErrorMessage))
			continue
		}
		// The suite adds wire-schema checks to every scenario; alone they
		// do not make a scenario tested, but they must pass.
		if !strings.HasPrefix(c.ID, "wire-schema-") {
			counted++
		}
		switch c.Status {
		case "SUCCESS":
		case "WARNING":
			t.Logf("warning: %s", describe(c))
		default:
			x := covering(entries, c.ID)
			switch {
			case x == nil:
				unexpected = append(unexpected, describe(c))
			case x.flaky:
				flaky = append(flaky, fmt.Sprintf("%s\n    known flaky (%s): %s", describe(c), x, x.reason))
			default:
				failedFor[x] = true
				expected = append(expected, fmt.Sprintf("%s\n    expected (%s): %s", describe(c), x, x.reason))
			}
		}
	}
	for _, n := range na {
		t.Logf("not applicable: %s", n)
	}

	var stale []string
	for _, x := range entries {
		if !x.flaky && !failedFor[x] {
			stale = append(stale, x.String())
		}
	}
	if len(unexpected) > 0 || len(stale) > 0 {
		var b strings.Builder
		if len(unexpected) > 0 {
			fmt.Fprintf(&b, "%d checks failed:\n  %s\n(fix it, or list it in %s with the reason)\n", len(unexpected), strings.Join(unexpected, "\n  "), expectedFailuresFile)
			if out := res.tail("stderr.txt", 3000); out != "" {
				b.WriteString("client stderr:\n" + out + "\n")
			}
		}
		if len(stale) > 0 {
			fmt.Fprintf(&b, "no longer fails, so remove the entry: %s\n", strings.Join(stale, ", "))
		}
		if len(expected)+len(flaky) > 0 {
			fmt.Fprintf(&b, "expected failures:\n  %s\n", strings.Join(append(expected, flaky...), "\n  "))
		}
		t.Error(b.String())
		return
	}
	switch {
	case len(expected) > 0:
		t.Skipf("expected failure:\n  %s", strings.Join(append(expected, flaky...), "\n  "))
	case len(flaky) > 0:
		t.Skipf("known flaky check failed this time:\n  %s", strings.Join(flaky, "\n  "))
	case counted == 0:
		t.Skipf("no check applies (%d not applicable); suite: %s%s", len(na), summary(res.checks), infoNotes(res.checks))
	default:
		t.Logf("%d checks passed", counted)
	}
}

func describe(c check) string {
	s := c.Status + " " + c.ID
	if c.Description != "" {
		s += ": " + c.Description
	}
	if c.ErrorMessage != "" {
		s += " — " + c.ErrorMessage
	}
	return s
}

func summary(checks []check) string {
	n := map[string]int{}
	for _, c := range checks {
		n[c.Status]++
	}
	return fmt.Sprintf("%d passed, %d failed, %d warnings", n["SUCCESS"], n["FAILURE"], n["WARNING"])
}

// infoNotes returns the explanations the suite attached to its INFO checks
// (e.g. why it could not exercise anything).
func infoNotes(checks []check) string {
	var b strings.Builder
	for _, c := range checks {
		if msg, ok := c.Details["message"].(string); ok && c.Status == "INFO" {
			b.WriteString("; " + msg)
		}
	}
	return b.String()
}

// clientCommand is the --command given to the suite, which runs it with sh
// and the scenario's URL appended. Scenarios toolmesh does not claim end at
// once instead of starting a client, so they cost the suite nothing but their
// (skipped) result: the suite runs every scenario of a version at the same
// time, and a few dozen clients starting together on a small machine slow the
// scenarios that count.
func clientCommand(bin string, notClaimed []scope) string {
	patterns := make([]string, 0, len(notClaimed))
	for _, s := range notClaimed {
		patterns = append(patterns, s.pattern)
	}
	return fmt.Sprintf(`case "$%s" in %s) echo "not claimed by toolmesh's client" >&2; exit 1;; esac; exec %s`,
		EnvScenario, strings.Join(patterns, "|"), shellQuote(bin))
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// startServer runs `toolmesh mcp NAME --transport streamable-http` on a
// loopback port chosen by the system (this test binary acting as toolmesh)
// and returns its streamable HTTP URL; the server is interrupted, as Ctrl-C
// would, when the test ends.
func startServer(t *testing.T, name string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "mcp", name, "--transport", "streamable-http", "--addr", "127.0.0.1:0", "--log.level", "warn")
	cmd.Env = append(os.Environ(), envRole+"=toolmesh")
	w := &urlWatcher{found: make(chan string, 1)}
	cmd.Stdout = w
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("toolmesh mcp %s: %v\n%s", name, err, w.output())
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("toolmesh mcp %s did not stop within 10 s of an interrupt\n%s", name, w.output())
		}
	}
	t.Cleanup(stop)
	select {
	case url := <-w.found:
		return url
	case err := <-exited:
		stopped = true
		t.Fatalf("toolmesh mcp %s exited before listening: %v\n%s", name, err, w.output())
	case <-time.After(30 * time.Second):
		stop()
		t.Fatalf("toolmesh mcp %s did not say where it listens within 30 s\n%s", name, w.output())
	}
	return ""
}

// meshServer names, among the servers the suite tests, toolmesh's own MCP face: the catalog
// endpoint /mcp of `toolmesh up`, serving the tools of the shipped demo servers through the
// executor.
const meshServer = "mesh"

// startMesh runs `toolmesh up` (no model: the catalog needs none) on free loopback ports until
// the test ends and returns the URL of its catalog endpoint once /readyz says the demo servers'
// tools are in the catalog.
func startMesh(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "up", "--log.level", "warn",
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0")
	// A model pulled on this machine must not make this `up` start one.
	cmd.Env = append(os.Environ(), envRole+"=toolmesh", modelfetch.EnvDir+"="+t.TempDir())
	w := &urlWatcher{found: make(chan string, 1), pattern: restLine}
	cmd.Stdout = w
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("toolmesh up did not stop within 10 s of an interrupt\n%s", w.output())
		}
	})
	var base string
	select {
	case base = <-w.found:
	case err := <-exited:
		t.Fatalf("toolmesh up exited before listening: %v\n%s", err, w.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("toolmesh up did not print its REST endpoint within 60 s\n%s", w.output())
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base + "/mcp"
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("toolmesh up: /readyz not 200 within 60 s (%v)\n%s", err, w.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// listening is the line `toolmesh mcp` prints once it listens; restLine the one of `toolmesh up`.
var (
	listening = regexp.MustCompile(`streamable HTTP (http://\S+/mcp)`)
	restLine  = regexp.MustCompile(`REST\s+(http://\S+)`)
)

// urlWatcher collects a server's output and reports the URL it listens on.
type urlWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	found chan string
	sent  bool
	// pattern finds the URL; listening when nil.
	pattern *regexp.Regexp
}

func (w *urlWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		pat := w.pattern
		if pat == nil {
			pat = listening
		}
		if m := pat.FindSubmatch(w.buf.Bytes()); m != nil {
			w.sent = true
			w.found <- string(m[1])
		}
	}
	return len(p), nil
}

func (w *urlWatcher) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
