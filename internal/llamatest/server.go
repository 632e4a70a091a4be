package llamatest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// ServerBin is the llama-server scripts/llamaserver installed (testbackend.Llama), for tests
// that start it themselves: it skips the test with -short, and when none is installed (fails it
// when TOOLMESH_LLAMA_REQUIRED=1).
func ServerBin(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts llama-server; skipped with -short")
	}
	return testbackend.Llama.Need(t)[0]
}

// ServerOptions configures a real llama-server started by StartServer.
type ServerOptions struct {
	// CtxSize is -c (default 4096).
	CtxSize int
	// Parallel is -np (default 1).
	Parallel int
	// Threads is -t (default 1: on a busy shared machine more threads wait on each other).
	Threads int
	// APIKey, when set, is --api-key.
	APIKey string
	// Model is the tiny model written and loaded (zero value: the defaults).
	Model TinyModel
	// Args are more command-line arguments.
	Args []string
	// ReadyTimeout bounds the wait for /health to answer 200 (default 30s).
	ReadyTimeout time.Duration
	// NoWait returns as soon as the process has started, to watch it load.
	NoWait bool
}

// Server is a running llama-server on a loopback port.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT.
	URL string
	// ModelPath is the GGUF file it loaded.
	ModelPath string
	// Started is how long it took from start to the first 200 from /health (0 with NoWait).
	Started time.Duration

	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

// Log is what the server has printed so far.
func (s *Server) Log() string { return s.log.String() }

// StartServer writes the tiny model and starts the llama-server scripts/llamaserver installed
// (testbackend.Llama: TOOLMESH_LLAMA_SERVER) on a free
// loopback port with explicit --host/--port/-c/-np, and waits until /health answers 200. It
// skips the test when it is not installed (fails it when TOOLMESH_LLAMA_REQUIRED=1) and stops the server when the test ends (printing
// its log if the test failed).
func StartServer(t testing.TB, opts ServerOptions) *Server {
	t.Helper()
	bin := testbackend.Llama.Need(t)[0]
	s, err := Run(bin, t.TempDir(), opts)
	if err != nil {
		t.Fatalf("starting llama-server: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("llama-server log:\n%s", tail(s.Log(), 60))
		}
	})
	return s
}

// Run is StartServer for a program rather than a test (bench/calls decodes the BFCL cases on a
// real llama-server): it writes the tiny model into dir, starts the llama-server bin the same
// way and waits until it is ready. The caller stops it with Stop.
func Run(bin, dir string, opts ServerOptions) (*Server, error) {
	if opts.CtxSize == 0 {
		opts.CtxSize = 4096
	}
	if opts.Parallel == 0 {
		opts.Parallel = 1
	}
	if opts.Threads == 0 {
		opts.Threads = 1
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	model := filepath.Join(dir, "tiny.gguf")
	if err := WriteTinyModelFile(model, opts.Model); err != nil {
		return nil, fmt.Errorf("writing the tiny model: %w", err)
	}
	var err error
	for range 3 { // a port picked free can be taken before the server binds it
		var s *Server
		if s, err = startServer(bin, model, opts); err == nil {
			return s, nil
		}
		if !strings.Contains(err.Error(), "bind") && !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func startServer(bin, model string, opts ServerOptions) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"-c", strconv.Itoa(opts.CtxSize), "-np", strconv.Itoa(opts.Parallel),
		"-t", strconv.Itoa(opts.Threads), "--offline",
	}
	if opts.APIKey != "" {
		args = append(args, "--api-key", opts.APIKey)
	}
	args = append(args, opts.Args...)
	s := &Server{
		URL:       "http://127.0.0.1:" + strconv.Itoa(port),
		ModelPath: model,
		log:       &syncBuffer{},
		done:      make(chan struct{}),
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if opts.NoWait {
		return s, nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), opts.ReadyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer hc.CloseIdleConnections()
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("llama-server exited (%v) before it was ready; log:\n%s", s.cmd.ProcessState, tail(s.Log(), 40))
		case <-ctx.Done():
			s.Stop()
			return nil, fmt.Errorf("llama-server not ready after %v; log:\n%s", opts.ReadyTimeout, tail(s.Log(), 40))
		case <-time.After(20 * time.Millisecond):
		}
		resp, err := hc.Get(s.URL + "/health")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			s.Started = time.Since(start)
			return s, nil
		}
	}
}

// Stop ends the server: SIGTERM, then SIGKILL after 5 s. StartServer's servers stop when
// their test ends.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
