package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/cmd/toolmesh/app"
	"github.com/toolmesh/toolmesh/internal/gobuild"
	"github.com/toolmesh/toolmesh/internal/tlsfiles"
)

// mesh is a running toolmesh: every target in this process (inproc) or one process per
// target and MCP server (micro).
type mesh struct {
	rest string // REST base URL, http://host:port
	grpc string // api gRPC address, host:port
	// caFile is the CA of the api's gRPC certificate when the mesh runs mutual TLS; "" when not.
	caFile string

	// children are the processes of micro mode, in start order.
	children []*child
	stop     func() error
}

// childCPU is the CPU time each of the mesh's child processes has used so far (none in
// inproc mode).
func (m *mesh) childCPU() (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, c := range m.children {
		t, err := processCPU(c.cmd.Process.Pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		out[c.name] = t
	}
	return out, nil
}

// switches is the context switches of this process and of each child so far ("" is this
// process).
func (m *mesh) switches() map[string]int64 {
	out := map[string]int64{}
	if n, err := ctxSwitches(0); err == nil {
		out[""] = n
	}
	for _, c := range m.children {
		if n, err := ctxSwitches(c.cmd.Process.Pid); err == nil {
			out[c.name] = n
		}
	}
	return out
}

// exited names the first child that is no longer running, and how it ended.
func (m *mesh) exited() error {
	for _, c := range m.children {
		select {
		case <-c.done:
			return fmt.Errorf("%s exited: %v; its log:\n%s", c.name, c.err, tail(c.logPath, 20))
		default:
		}
	}
	return nil
}

// startInproc runs every target in this process, as `toolmesh up` does, with the demo MCP
// servers (calculator, converter, sqlite) over SSE on loopback and the api on :0 ports. The
// api calls the executor, retriever and inference in the process (no listener); with sockets
// (mode inproc-grpc) their addresses are given, so they talk gRPC over Unix sockets in dir, as
// `up` did before issue 28.
func startInproc(modelURL, logPath, dir string, sockets bool) (*mesh, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=" + modelURL,
	}
	if sockets {
		for _, t := range []string{"executor", "retriever", "inference"} {
			args = append(args, "--"+t+".grpc-addr=unix:"+filepath.Join(dir, t+".sock"))
		}
		// A given address that is not loopback needs mutual TLS or this; dir is the run's own.
		args = append(args, "--allow-insecure-internal")
	}
	fs := flag.NewFlagSet("inproc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg app.Config
	cfg.RegisterFlags(fs)
	cfg.RegisterDemoFlags(fs)
	if err := cfg.Load(fs, args); err != nil {
		logFile.Close()
		return nil, err
	}
	cfg.Targets = []string{"demo", "executor", "retriever", "inference", "api"}
	if err := cfg.Validate(); err != nil {
		logFile.Close()
		return nil, err
	}
	// The level `toolmesh up` logs at, to a file: the same logging work as a user's mesh.
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := app.New(cfg, logger)
	if err != nil {
		logFile.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() { done <- a.Run(ctx, func() { close(started) }) }()
	stop := func() error {
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(15 * time.Second):
			err = errors.New("inproc mesh did not stop within 15s")
		}
		return errors.Join(err, logFile.Close())
	}
	select {
	case <-started:
	case err := <-done:
		cancel()
		logFile.Close()
		return nil, fmt.Errorf("inproc mesh: %w", err)
	}
	m := &mesh{stop: stop}
	for _, e := range a.Endpoints {
		switch e.Name {
		case "REST":
			m.rest = e.Addr
		case "api gRPC":
			m.grpc = e.Addr
		}
	}
	if m.rest == "" || m.grpc == "" {
		_ = stop()
		return nil, fmt.Errorf("inproc mesh: no REST or api gRPC endpoint in %v", a.Endpoints)
	}
	return m, nil
}

// child is one process of the micro mesh.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	profile string        // where it writes its CPU profile on SIGUSR1/SIGUSR2 (bench/loop/profiled); "" when not
	done    chan struct{} // closed when the process has exited
	err     error         // how it exited, once done is closed
}

// startChild starts bin with args and env added to this process's environment, its output
// in dir/name.log. With profiled, bin is bench/loop/profiled and the child is told where to
// write its CPU profile.
func startChild(dir, name, bin string, profiled bool, env []string, args ...string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	c := &child{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	if len(env) > 0 || profiled {
		cmd.Env = append(os.Environ(), env...)
	}
	if profiled {
		c.profile = filepath.Join(dir, name+".cpu.pprof")
		cmd.Env = append(cmd.Env, "TOOLMESH_BENCH_PROFILE="+c.profile)
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

// stopChild asks c to stop (SIGINT, as Ctrl-C does, so it drains) and kills it after 5s.
func stopChild(c *child) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	_ = c.cmd.Process.Kill()
	<-c.done
	return fmt.Errorf("%s did not stop within 5s of SIGINT; killed", c.name)
}

// buildBinary builds cmd/toolmesh into dir, or with profiled bench/loop/profiled (the same
// program, able to profile itself on a signal).
func buildBinary(ctx context.Context, dir string, profiled bool) (string, error) {
	bin := filepath.Join(dir, "toolmesh")
	pkg := "github.com/toolmesh/toolmesh/cmd/toolmesh"
	if profiled {
		pkg = "github.com/toolmesh/toolmesh/bench/loop/profiled"
	}
	if err := gobuild.Build(ctx, "", bin, pkg); err != nil {
		return "", err
	}
	return bin, nil
}

// startProfiles asks every child that can to start its CPU profile.
func (m *mesh) startProfiles() error {
	for _, c := range m.children {
		if c.profile == "" {
			continue
		}
		_ = os.Remove(c.profile + ".done")
		if err := signalProfile(c.cmd.Process, true); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// stopProfiles stops the children's CPU profiles and moves each to prefix-CHILD.pprof.
func (m *mesh) stopProfiles(prefix string) error {
	for _, c := range m.children {
		if c.profile == "" {
			continue
		}
		if err := signalProfile(c.cmd.Process, false); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	for _, c := range m.children {
		if c.profile == "" {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(c.profile + ".done"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: no CPU profile within 10s", c.name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := os.Rename(c.profile, prefix+"-"+c.name+".pprof"); err != nil {
			return err
		}
	}
	return nil
}

// freeAddrs returns n loopback addresses that were free a moment ago. Another process could
// take one before the child binds it; the child then fails to start and the bench says so.
func freeAddrs(n int) ([]string, error) {
	var out []string
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lis = append(lis, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// startMicro runs the mesh as `toolmesh serve` processes, one per target, and the demo MCP
// servers (calculator, converter, sqlite) as `toolmesh mcp` processes, on free loopback ports; the executor finds the MCP
// servers in an mcp.json. With mtls, each service gets a certificate of a CA made in dir and
// the --tls.* flags. On any failure every child started so far is stopped.
func startMicro(ctx context.Context, bin, dir, modelURL string, profiled bool, env []string, mtls bool) (m *mesh, err error) {
	addrs, err := freeAddrs(8)
	if err != nil {
		return nil, err
	}
	calc, conv, sqlite, executor, retriever, inference, apiGRPC, apiHTTP := addrs[0], addrs[1], addrs[2], addrs[3], addrs[4], addrs[5], addrs[6], addrs[7]
	// The MCP servers `toolmesh up` runs as its demo, so both modes index the same tools.
	mcpJSON := filepath.Join(dir, "mcp.json")
	conf := fmt.Sprintf(`{"mcpServers": {
  "calculator": {"url": "http://%s/sse", "transport": "sse"},
  "converter": {"url": "http://%s/sse", "transport": "sse"},
  "sqlite": {"url": "http://%s/sse", "transport": "sse"}
}}
`, calc, conv, sqlite)
	if err := os.WriteFile(mcpJSON, []byte(conf), 0o644); err != nil {
		return nil, err
	}

	m = &mesh{rest: "http://" + apiHTTP, grpc: apiGRPC}
	m.stop = func() error {
		var errs []error
		for i := len(m.children) - 1; i >= 0; i-- {
			errs = append(errs, stopChild(m.children[i]))
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.stop())
		}
	}()
	start := func(name string, args ...string) error {
		c, err := startChild(dir, name, bin, profiled, env, args...)
		if err != nil {
			return err
		}
		m.children = append(m.children, c)
		return nil
	}

	// The MCP servers first: the executor connects to them when it starts.
	if err := start("calculator", "mcp", "calculator", "--transport", "sse", "--addr", calc); err != nil {
		return m, err
	}
	if err := start("converter", "mcp", "converter", "--transport", "sse", "--addr", conv); err != nil {
		return m, err
	}
	if err := start("sqlite", "mcp", "sqlite", "--transport", "sse", "--addr", sqlite); err != nil {
		return m, err
	}
	for _, a := range []string{calc, conv, sqlite} {
		if err := waitListening(ctx, m, a, 30*time.Second); err != nil {
			return m, err
		}
	}
	common := func(target string) []string {
		args := []string{"--drain-timeout=2s"}
		if mtls {
			// Every certificate names 127.0.0.1, the address each service is dialled at.
			d := filepath.Join(dir, "tls", target)
			args = append(args, "--tls.cert-file="+filepath.Join(d, tlsfiles.CertFile),
				"--tls.key-file="+filepath.Join(d, tlsfiles.KeyFile), "--tls.ca-file="+filepath.Join(d, tlsfiles.CACertFile))
		}
		return args
	}
	if mtls {
		if _, err := tlsfiles.Init(filepath.Join(dir, "tls"), []string{"executor", "retriever", "inference", "api"}, 24*time.Hour); err != nil {
			return m, fmt.Errorf("tls init: %w", err)
		}
		m.caFile = filepath.Join(dir, "tls", "api", tlsfiles.CACertFile)
	}
	if err := start("executor", append([]string{"serve", "--target=executor",
		"--executor.grpc-addr=" + executor, "--mcp-config=" + mcpJSON}, common("executor")...)...); err != nil {
		return m, err
	}
	if err := start("retriever", append([]string{"serve", "--target=retriever",
		"--retriever.grpc-addr=" + retriever, "--retriever.executor-addr=" + executor}, common("retriever")...)...); err != nil {
		return m, err
	}
	if err := start("inference", append([]string{"serve", "--target=inference",
		"--inference.grpc-addr=" + inference, "--inference.llm.url=" + modelURL}, common("inference")...)...); err != nil {
		return m, err
	}
	// Ready means the inference process answers too: it may listen later than the api, whose
	// questions would get 503 meanwhile (the bench counts them as errors).
	if err := start("api", append([]string{"serve", "--target=api",
		"--api.http-addr=" + apiHTTP, "--api.grpc-addr=" + apiGRPC, "--api.executor-addr=" + executor,
		"--api.retriever-addr=" + retriever, "--api.inference-addr=" + inference, "--api.ready-needs-inference"}, common("api")...)...); err != nil {
		return m, err
	}
	return m, nil
}

// waitListening waits until addr accepts TCP connections.
func waitListening(ctx context.Context, m *mesh, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if err := m.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening within %s: %w", addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady polls GET /readyz until it answers 200: every MCP server is past its first
// connection (the demo servers already listen, so they are connected) and the retriever's index
// holds their tools (and, in micro mode, the model answers).
func waitReady(ctx context.Context, m *mesh, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	last := ""
	for {
		resp, err := hc.Get(m.rest + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		if err := m.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz not ready within %s: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tail is the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
