// Package llamaserver runs llama.cpp's llama-server as a supervised child process: it gets
// the model file first (a download can take a while), starts the server on a free loopback
// port with explicit --host/--port, waits for it to load, restarts it with backoff when it
// dies, forwards its log lines to the logger, and stops it (and everything it started) when
// the context ends. On Linux the kernel kills the child if toolmesh itself dies.
//
// Clients talk to a stable loopback URL (URL) that forwards to the current child: the child's
// port can change across restarts, and while there is no ready child the URL answers 503 in
// llama-server's own error shape, saying what is happening ("Loading model, 12 s").
package llamaserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultBin is the executable looked up on PATH when Config.Bin is empty.
const DefaultBin = "llama-server"

// Config says how to run llama-server. Zero durations take the defaults noted.
type Config struct {
	// Bin is the llama-server executable: a path, or a name looked up on PATH (default
	// llama-server).
	Bin string
	// CtxSize is -c, the context of all slots together; 0 leaves it to the model.
	CtxSize int
	// Parallel is -np, the slots (requests decoded at once); 0 leaves it to llama-server.
	Parallel int
	// Threads is -t; 0 leaves it to llama-server.
	Threads int
	// GPULayers is -ngl: "auto" offloads every layer (-ngl 999) when llama-server lists a GPU
	// device (--list-devices) and passes nothing otherwise; "" passes nothing; anything else
	// is passed as it is.
	GPULayers string
	// Embedding serves embeddings only (--embedding), pooled with Pooling (default mean).
	Embedding bool
	Pooling   string
	// Alias is --alias, the model's name in llama-server's answers.
	Alias string
	// Metrics turns on llama-server's Prometheus /metrics.
	Metrics bool
	// Args are more arguments, appended last.
	Args []string
	// ReadyTimeout bounds one start, from launch to /health answering 200 (default 5 m);
	// a child not ready by then is killed and started again.
	ReadyTimeout time.Duration
	// StopTimeout is how long a stop waits after SIGTERM before SIGKILL (default 10 s).
	StopTimeout time.Duration
	// BackoffMin and BackoffMax shape the waits before a restart (1 s doubling to 1 m; back
	// to 1 s after a child that ran a minute).
	BackoffMin, BackoffMax time.Duration
	// ModelBackoffMax bounds the wait between two tries to get the model (from BackoffMin,
	// doubling; default 5 m). A hub that cannot be reached is most often a machine offline
	// for a while: asking it every minute only fills the log.
	ModelBackoffMax time.Duration
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ReadyTimeout, 5*time.Minute)
	def(&c.StopTimeout, 10*time.Second)
	def(&c.BackoffMin, time.Second)
	def(&c.BackoffMax, time.Minute)
	def(&c.ModelBackoffMax, 5*time.Minute)
	if c.Bin == "" {
		c.Bin = DefaultBin
	}
	if c.Embedding && c.Pooling == "" {
		c.Pooling = "mean"
	}
	return c
}

// ErrNotFound: the llama-server executable is not there.
var ErrNotFound = errors.New("llama-server not found")

// InstallHint says how to get llama-server.
const InstallHint = "install llama.cpp's llama-server (macOS/Linux: brew install llama.cpp; Debian testing: apt install llama.cpp-tools; " +
	"or a release from https://github.com/ggml-org/llama.cpp/releases)"

// LookPath resolves bin (default llama-server) as exec.LookPath does; the error matches
// ErrNotFound and says how to install it.
func LookPath(bin string) (string, error) {
	if bin == "" {
		bin = DefaultBin
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		where := "on PATH"
		if strings.ContainsRune(bin, filepath.Separator) {
			where = "at " + bin
		}
		return "", fmt.Errorf("%w %s (%v): %s", ErrNotFound, where, err, InstallHint)
	}
	return p, nil
}

// ModelFunc returns the path of the model file, fetching it if it must; report tells what it
// is doing ("downloading ..."), for Status. An error wrapped with Permanent is not retried.
type ModelFunc func(ctx context.Context, report func(status string)) (path string, err error)

type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// Permanent marks a ModelFunc error that retrying will not fix (a checksum mismatch, a
// revision that does not exist): the supervisor then waits, reporting it, until stopped.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// State is where the supervisor is.
type State int

// States, in the order a start goes through them.
const (
	// Preparing: getting the model file (downloading it when it is missing).
	Preparing State = iota
	// Loading: llama-server is running and loading the model.
	Loading
	// Ready: llama-server answers /health with 200.
	Ready
	// Restarting: llama-server exited or did not get ready; it is started again after a wait.
	Restarting
	// Failed: the model could not be had and retrying will not help (see Status.Err).
	Failed
	// Stopped: Run has returned.
	Stopped
)

var stateNames = []string{"preparing", "loading", "ready", "restarting", "failed", "stopped"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Status is what the supervisor is doing.
type Status struct {
	State State
	// Message says it for people: "Loading model, 12 s", "downloading …", "llama-server
	// exited (signal: killed) after 3m2s; restarting in 2s".
	Message string
	// Err is the last failure (model, start or exit), if any.
	Err error
	// PID is the running child's process id (0 when none).
	PID int
	// Restarts counts the children started after the first.
	Restarts int
	// Command is the last command line started.
	Command []string
	// ModelPath is the model file, once known.
	ModelPath string
	// ChildURL is the running child's own base URL ("" when none).
	ChildURL string
}

// Supervisor runs one llama-server. Create it with New, run it with Run.
type Supervisor struct {
	cfg   Config
	bin   string
	model ModelFunc
	log   *slog.Logger

	ln     net.Listener
	url    string
	client *http.Client

	mu       sync.Mutex
	state    State
	since    time.Time // when state was entered
	detail   string    // what Preparing reports, or why Restarting
	retryAt  time.Time // when Restarting ends (zero: not waiting)
	retry    string    // what happens then: "restarting", "trying again"
	lastErr  error
	pid      int
	restarts int
	command  []string
	path     string
	child    *url.URL // the ready child, nil otherwise
	childURL string
	gpu      *bool // --list-devices result, asked once

	ran sync.Once
}

// New checks that llama-server exists and binds the loopback listener clients will use;
// nothing is started until Run.
func New(cfg Config, model ModelFunc, logger *slog.Logger) (*Supervisor, error) {
	cfg = cfg.withDefaults()
	bin, err := LookPath(cfg.Bin)
	if err != nil {
		return nil, err
	}
	if model == nil {
		return nil, errors.New("llamaserver: no model")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("llamaserver: listen: %w", err)
	}
	s := &Supervisor{
		cfg: cfg, bin: bin, model: model, log: logger.With("component", "llama-server"),
		ln: ln, url: "http://" + ln.Addr().String(),
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		state:  Preparing, since: time.Now(),
	}
	return s, nil
}

// URL is the stable base URL that forwards to the running llama-server.
func (s *Supervisor) URL() string { return s.url }

// Bin is the llama-server executable that is run.
func (s *Supervisor) Bin() string { return s.bin }

// Status says what the supervisor is doing.
func (s *Supervisor) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{State: s.state, Err: s.lastErr, PID: s.pid, Restarts: s.restarts,
		Command: append([]string(nil), s.command...), ModelPath: s.path, ChildURL: s.childURL}
	el := time.Since(s.since).Round(time.Second)
	switch s.state {
	case Preparing:
		st.Message = "Loading model: preparing the model file"
		if s.detail != "" {
			st.Message = "Loading model: " + s.detail
		}
	case Loading:
		st.Message = fmt.Sprintf("Loading model, %d s", int(el.Seconds()))
	case Ready:
		st.Message = "ready"
	case Restarting, Failed:
		st.Message = s.detail
		if !s.retryAt.IsZero() {
			// Counted down when asked: a wait of minutes read a minute later is shorter.
			st.Message += fmt.Sprintf("; %s in %s", s.retry, roundDur(max(0, time.Until(s.retryAt))))
		}
	case Stopped:
		st.Message = "stopped"
	}
	return st
}

func (s *Supervisor) set(state State, detail string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != state {
		s.since = time.Now()
	}
	s.state, s.detail, s.retryAt = state, detail, time.Time{}
	if err != nil {
		s.lastErr = err
	}
}

// waitRetry reports Restarting for detail (err), says what happens after wait, and waits; it
// returns false when ctx ended first.
func (s *Supervisor) waitRetry(ctx context.Context, detail string, err error, what string, wait time.Duration) bool {
	s.set(Restarting, detail, err)
	s.mu.Lock()
	s.retryAt, s.retry = time.Now().Add(wait), what
	s.mu.Unlock()
	select {
	case <-ctx.Done():
		return false
	case <-time.After(wait):
		return true
	}
}

// Close releases the listener when Run was never called; Run releases it itself.
func (s *Supervisor) Close() error {
	closed := false
	s.ran.Do(func() { closed = true })
	if closed {
		return s.ln.Close()
	}
	return nil
}

// Run gets the model, then keeps llama-server running until ctx ends, and stops it. It
// returns nil when ctx ends: failures are reported by Status and the log, and retried.
func (s *Supervisor) Run(ctx context.Context) error {
	first := false
	s.ran.Do(func() { first = true })
	if !first {
		return errors.New("llamaserver: Run called twice, or after Close")
	}
	srv := &http.Server{Handler: s.proxy(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(s.ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
		<-served
		s.set(Stopped, "", nil)
		s.client.CloseIdleConnections()
	}()

	path, ok := s.prepare(ctx)
	if !ok {
		<-ctx.Done()
		return nil
	}
	backoff := s.cfg.BackoffMin
	for ctx.Err() == nil {
		ranFor, err := s.runOnce(ctx, path)
		if ctx.Err() != nil {
			return nil
		}
		if ranFor > time.Minute {
			backoff = s.cfg.BackoffMin
		}
		wait := jitter(backoff)
		s.log.Error("llama-server is down; restarting it", "err", err, "restart_in", roundDur(wait))
		if !s.waitRetry(ctx, err.Error(), err, "restarting", wait) {
			return nil
		}
		backoff = min(2*backoff, s.cfg.BackoffMax)
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
	}
	return nil
}

// prepare gets the model file, retrying what may pass; ok is false when ctx ended or the
// failure is permanent (then reported as Failed).
func (s *Supervisor) prepare(ctx context.Context) (string, bool) {
	backoff := s.cfg.BackoffMin
	for {
		s.set(Preparing, "", nil)
		path, err := s.model(ctx, func(detail string) { s.set(Preparing, detail, nil) })
		if err == nil {
			s.mu.Lock()
			s.path = path
			s.mu.Unlock()
			return path, true
		}
		if ctx.Err() != nil {
			return "", false
		}
		var perm permanentError
		if errors.As(err, &perm) {
			s.set(Failed, "no model: "+err.Error(), err)
			s.log.Error("cannot get the model; llama-server is not started", "err", err)
			return "", false
		}
		wait := jitter(backoff)
		// One line a try, the waits doubling up to ModelBackoffMax: a hub that cannot be
		// reached for an hour is a dozen lines, not hundreds.
		s.log.Warn("cannot get the model yet; trying again", "err", err, "retry_in", roundDur(wait))
		if !s.waitRetry(ctx, "no model yet: "+err.Error(), err, "trying again", wait) {
			return "", false
		}
		backoff = min(2*backoff, s.cfg.ModelBackoffMax)
	}
}

// jitter spreads a wait over ±20%, so that replicas started together do not retry together.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// args is the command line for a child on port.
func (s *Supervisor) args(ctx context.Context, model string, port int) []string {
	a := []string{"-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port)}
	if s.cfg.CtxSize > 0 {
		a = append(a, "-c", strconv.Itoa(s.cfg.CtxSize))
	}
	if s.cfg.Parallel > 0 {
		a = append(a, "-np", strconv.Itoa(s.cfg.Parallel))
	}
	if s.cfg.Threads > 0 {
		a = append(a, "-t", strconv.Itoa(s.cfg.Threads))
	}
	switch s.cfg.GPULayers {
	case "":
	case "auto":
		if s.hasGPU(ctx) {
			a = append(a, "-ngl", "999")
		}
	default:
		a = append(a, "-ngl", s.cfg.GPULayers)
	}
	if s.cfg.Embedding {
		a = append(a, "--embedding", "--pooling", s.cfg.Pooling)
	}
	if s.cfg.Alias != "" {
		a = append(a, "--alias", s.cfg.Alias)
	}
	if s.cfg.Metrics {
		a = append(a, "--metrics")
	}
	return append(a, s.cfg.Args...)
}

// hasGPU asks llama-server once which devices it can use (--list-devices): any device
// listed is a GPU backend (the CPU is not listed).
func (s *Supervisor) hasGPU(ctx context.Context) bool {
	s.mu.Lock()
	known := s.gpu
	s.mu.Unlock()
	if known != nil {
		return *known
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, s.bin, "--list-devices").CombinedOutput()
	found := false
	if err == nil {
		found = len(ParseDevices(out)) > 0
	} else {
		s.log.Warn("llama-server --list-devices failed; not offloading layers to a GPU", "err", err)
	}
	s.log.Info("llama-server devices", "gpu", found)
	s.mu.Lock()
	s.gpu = &found
	s.mu.Unlock()
	return found
}

// ParseDevices reads --list-devices output: the lines after "Available devices:", without
// "(none)" and the CPU.
func ParseDevices(out []byte) []string {
	var devs []string
	listing := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "Available devices:"):
			listing = true
		case !listing || line == "" || line == "(none)" || strings.HasPrefix(strings.ToUpper(line), "CPU"):
		default:
			devs = append(devs, line)
		}
	}
	return devs
}

// runOnce starts one child and returns when it exits or ctx ends (then it stops it). The
// error says why the child is gone.
func (s *Supervisor) runOnce(ctx context.Context, model string) (time.Duration, error) {
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	args := s.args(ctx, model, port)
	c, err := start(s.bin, args, s.log)
	if err != nil {
		return 0, fmt.Errorf("starting %s: %w", s.bin, err)
	}
	started := time.Now()
	childURL := "http://127.0.0.1:" + strconv.Itoa(port)
	s.mu.Lock()
	s.pid, s.command, s.childURL = c.pid, append([]string{s.bin}, args...), childURL
	s.mu.Unlock()
	s.set(Loading, "", nil)
	s.log.Info("llama-server started", "pid", c.pid, "url", childURL, "args", strings.Join(args, " "))
	defer func() {
		s.mu.Lock()
		s.pid, s.child, s.childURL = 0, nil, ""
		s.mu.Unlock()
	}()

	if err := s.waitReady(ctx, c, childURL); err != nil {
		c.stop(s.cfg.StopTimeout)
		return time.Since(started), err
	}
	u, _ := url.Parse(childURL)
	s.mu.Lock()
	s.child = u
	s.mu.Unlock()
	s.set(Ready, "", nil)
	s.log.Info("llama-server ready", "pid", c.pid, "after", time.Since(started).Round(time.Millisecond))

	select {
	case <-ctx.Done():
		s.mu.Lock()
		s.child = nil
		s.mu.Unlock()
		c.stop(s.cfg.StopTimeout)
		s.log.Info("llama-server stopped", "pid", c.pid)
		return time.Since(started), ctx.Err()
	case <-c.done:
		return time.Since(started), c.exitError(time.Since(started))
	}
}

// waitReady polls /health until 200, the child exits, ReadyTimeout passes or ctx ends.
func (s *Supervisor) waitReady(ctx context.Context, c *child, base string) error {
	deadline := time.NewTimer(s.cfg.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return c.exitError(0)
		case <-deadline.C:
			return fmt.Errorf("llama-server (pid %d) not ready after %s; last log: %s", c.pid, s.cfg.ReadyTimeout, c.tail.last())
		case <-tick.C:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
		resp, err := s.client.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
	}
}

// proxy forwards to the ready child, and answers for it otherwise.
func (s *Supervisor) proxy() http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			s.mu.Lock()
			u := s.child
			s.mu.Unlock()
			if u != nil {
				pr.SetURL(u)
			}
		},
		FlushInterval: -1, // streamed completions go out event by event
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			writeError(w, http.StatusBadGateway, "llama-server did not answer: "+err.Error())
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		ready := s.child != nil
		s.mu.Unlock()
		if !ready {
			writeError(w, http.StatusServiceUnavailable, s.Status().Message)
			return
		}
		rp.ServeHTTP(w, r)
	})
}

// writeError answers in llama-server's error shape, so its clients read it as they would
// read the server's own (a 503 whose message starts "Loading model" means "retry soon").
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "type": "unavailable_error"}})
}

// roundDur rounds a wait for messages: to 100 ms from a second up, to 1 ms below.
func roundDur(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("picking a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// child is one running llama-server process.
type child struct {
	cmd  *exec.Cmd
	pid  int
	tail *logLines
	done chan struct{}
	err  error // Wait's error, set before done closes
}

// start launches bin. The process gets its own process group (stopped as a whole) and, on
// Linux, dies with the thread that started it: that thread is kept locked to the goroutine
// that waits for the child, so it lives exactly as long as the child needs it.
func start(bin string, args []string, logger *slog.Logger) (*child, error) {
	c := &child{tail: &logLines{}, done: make(chan struct{})}
	out := &lineWriter{log: logger, tail: c.tail}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(bin, args...)
		cmd.Env = os.Environ()
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = sysProcAttr()
		// A grandchild holding the output pipes must not keep Wait from returning.
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.cmd, c.pid = cmd, cmd.Process.Pid
		out.setPID(c.pid)
		started <- nil
		c.err = cmd.Wait()
		out.flush()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// stop ends the child's process group: SIGTERM, then SIGKILL after grace.
func (c *child) stop(grace time.Duration) {
	select {
	case <-c.done:
		return
	default:
	}
	signalGroup(c.pid, false)
	select {
	case <-c.done:
		return
	case <-time.After(grace):
	}
	signalGroup(c.pid, true)
	<-c.done
}

// exitError says how the child ended, with its last log lines.
func (c *child) exitError(ranFor time.Duration) error {
	<-c.done
	how := "exited"
	if c.err != nil {
		how = "exited (" + c.err.Error() + ")"
	}
	if ranFor > 0 {
		how += " after " + ranFor.Round(time.Millisecond).String()
	}
	return fmt.Errorf("llama-server (pid %d) %s; last log: %s", c.pid, how, c.tail.last())
}
