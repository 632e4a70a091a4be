package llamaserver_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamaserver"
)

// syncBuffer is a log sink safe for the supervisor's goroutines.
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

// running is a supervisor under test, stopped when the test ends.
type running struct {
	*llamaserver.Supervisor
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

// supervise runs a supervisor of the llama-server double (this test binary) in mode.
func supervise(t *testing.T, mode string, cfg llamaserver.Config, model llamaserver.ModelFunc) *running {
	t.Helper()
	t.Setenv(envDouble, mode)
	if cfg.Bin == "" {
		cfg.Bin = os.Args[0]
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin, cfg.BackoffMax = 20*time.Millisecond, 200*time.Millisecond
	}
	if model == nil {
		model = func(context.Context, func(string)) (string, error) { return "/models/tiny.gguf", nil }
	}
	logs := &syncBuffer{}
	s, err := llamaserver.New(cfg, model, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Supervisor: s, logs: logs, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		if err := s.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs.String())
		}
	})
	return r
}

func waitState(t *testing.T, s *llamaserver.Supervisor, want llamaserver.State) llamaserver.Status {
	t.Helper()
	var st llamaserver.Status
	eventually.Check(t, 20*time.Second, "state "+want.String(), func() string {
		st = s.Status()
		if st.State != want {
			return "state " + st.State.String() + ": " + st.Message
		}
		return ""
	})
	return st
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// alive reports whether pid is a process that has not been reaped.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestSupervisorStartsAndForwards(t *testing.T) {
	argsFile := filepath.Join(t.TempDir(), "args")
	t.Setenv(envArgs, argsFile)
	t.Setenv(envLoadMS, "700")
	r := supervise(t, "serve", llamaserver.Config{CtxSize: 8192, Parallel: 2, GPULayers: "auto", Metrics: true, Alias: "tiny"}, nil)

	// While it loads, the stable URL answers as llama-server does, saying for how long.
	eventually.True(t, 10*time.Second, "loading", func() bool { return r.Status().State == llamaserver.Loading })
	code, body := get(t, r.URL()+"/health")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"message":"Loading model, `) || !strings.Contains(body, "unavailable_error") {
		t.Errorf("GET /health while loading = %d %s, want 503 Loading model, N s", code, body)
	}

	st := waitState(t, r.Supervisor, llamaserver.Ready)
	if st.PID == 0 || st.ChildURL == "" || st.ModelPath != "/models/tiny.gguf" {
		t.Errorf("status %+v, want a pid, the child's URL and the model path", st)
	}
	code, body = get(t, r.URL()+"/completion")
	if code != http.StatusOK || !strings.Contains(body, "pid "+strconv.Itoa(st.PID)) {
		t.Errorf("GET /completion through the supervisor = %d %s, want the child's answer", code, body)
	}
	data, _ := os.ReadFile(argsFile)
	args := strings.Fields(string(data))
	for _, want := range [][]string{{"-m", "/models/tiny.gguf"}, {"--host", "127.0.0.1"}, {"-c", "8192"}, {"-np", "2"}, {"--alias", "tiny"}, {"--metrics"}} {
		if !containsSeq(args, want) {
			t.Errorf("llama-server args %v lack %v", args, want)
		}
	}
	if slices.Contains(args, "-ngl") {
		t.Errorf("args %v offload to a GPU, but --list-devices listed none", args)
	}
	logs := r.logs.String()
	for _, want := range []string{`level=DEBUG msg="main: loading model" component=llama-server pid=` + strconv.Itoa(st.PID),
		`level=WARN msg="main: this is a warning"`, "llama-server ready"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

func containsSeq(s, seq []string) bool {
	for i := range s {
		if i+len(seq) <= len(s) && slices.Equal(s[i:i+len(seq)], seq) {
			return true
		}
	}
	return false
}

func TestSupervisorGPU(t *testing.T) {
	argsFile := filepath.Join(t.TempDir(), "args")
	t.Setenv(envArgs, argsFile)
	t.Setenv(envGPU, "1")
	r := supervise(t, "serve", llamaserver.Config{GPULayers: "auto", Embedding: true}, nil)
	waitState(t, r.Supervisor, llamaserver.Ready)
	data, _ := os.ReadFile(argsFile)
	args := strings.Fields(string(data))
	if !containsSeq(args, []string{"-ngl", "999"}) || !containsSeq(args, []string{"--embedding", "--pooling", "mean"}) {
		t.Errorf("args %v, want -ngl 999 (a GPU is listed) and --embedding --pooling mean", args)
	}
}

func TestSupervisorRestartsAfterKill(t *testing.T) {
	r := supervise(t, "serve", llamaserver.Config{}, nil)
	first := waitState(t, r.Supervisor, llamaserver.Ready)
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var st llamaserver.Status
	eventually.Check(t, 20*time.Second, "a new child", func() string {
		st = r.Status()
		if st.State != llamaserver.Ready || st.PID == first.PID {
			return st.State.String() + " pid " + strconv.Itoa(st.PID) + ": " + st.Message
		}
		return ""
	})
	if st.Restarts != 1 {
		t.Errorf("restarts = %d, want 1", st.Restarts)
	}
	if code, body := get(t, r.URL()+"/completion"); code != http.StatusOK || !strings.Contains(body, "pid "+strconv.Itoa(st.PID)) {
		t.Errorf("after the restart: %d %s, want the new child's answer", code, body)
	}
	if logs := r.logs.String(); !strings.Contains(logs, "signal: killed") {
		t.Errorf("the log does not say how the child died:\n%s", logs)
	}
}

func TestSupervisorStopEndsTheChild(t *testing.T) {
	r := supervise(t, "serve", llamaserver.Config{}, nil)
	pid := waitState(t, r.Supervisor, llamaserver.Ready).PID
	r.stop()
	if alive(pid) {
		t.Errorf("child %d still runs after Run returned", pid)
	}
	if st := r.Status(); st.State != llamaserver.Stopped {
		t.Errorf("state after stop = %s", st.State)
	}
}

func TestSupervisorCrashLoop(t *testing.T) {
	r := supervise(t, "crash", llamaserver.Config{BackoffMin: 400 * time.Millisecond, BackoffMax: 2 * time.Second}, nil)
	var st llamaserver.Status
	eventually.Check(t, 20*time.Second, "a restart pending after the second crash", func() string {
		if st = r.Status(); st.Restarts < 1 || st.State != llamaserver.Restarting {
			return st.State.String() + ": " + st.Message
		}
		return ""
	})
	if !strings.Contains(st.Message, "exit status 1") || !strings.Contains(st.Message, "failed to load model") ||
		!strings.Contains(st.Message, "restarting in") {
		t.Errorf("status %s: %q; want the exit status, the last log line and the restart", st.State, st.Message)
	}
	eventually.Check(t, 10*time.Second, "a 503 saying why", func() string {
		code, body := get(t, r.URL()+"/completion")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "failed to load model") {
			return strconv.Itoa(code) + " " + body
		}
		return ""
	})
}

func TestSupervisorNotReadyInTime(t *testing.T) {
	r := supervise(t, "hang", llamaserver.Config{ReadyTimeout: 300 * time.Millisecond, StopTimeout: time.Second}, nil)
	eventually.Check(t, 20*time.Second, "a restart", func() string {
		if st := r.Status(); st.Restarts < 1 || !strings.Contains(st.Err.Error(), "not ready after 300ms") {
			return st.Message
		}
		return ""
	})
}

func TestSupervisorModel(t *testing.T) {
	t.Run("permanent failure", func(t *testing.T) {
		r := supervise(t, "serve", llamaserver.Config{}, func(context.Context, func(string)) (string, error) {
			return "", llamaserver.Permanent(errors.New("sha256 mismatch"))
		})
		st := waitState(t, r.Supervisor, llamaserver.Failed)
		if !strings.Contains(st.Message, "sha256 mismatch") || st.PID != 0 {
			t.Errorf("status %+v", st)
		}
		if code, body := get(t, r.URL()+"/health"); code != http.StatusServiceUnavailable || !strings.Contains(body, "sha256 mismatch") {
			t.Errorf("GET /health = %d %s", code, body)
		}
	})
	t.Run("progress, then a retry that works", func(t *testing.T) {
		var mu sync.Mutex
		calls := 0
		release := make(chan struct{})
		r := supervise(t, "serve", llamaserver.Config{}, func(ctx context.Context, report func(string)) (string, error) {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n == 1 {
				return "", errors.New("connection reset")
			}
			report("downloading tiny.gguf: 1.0 MB of 2.0 MB (50%)")
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			return "/models/tiny.gguf", nil
		})
		eventually.Check(t, 10*time.Second, "download reported", func() string {
			if st := r.Status(); st.Message != "Loading model: downloading tiny.gguf: 1.0 MB of 2.0 MB (50%)" {
				return st.Message
			}
			return ""
		})
		if code, body := get(t, r.URL()+"/health"); code != http.StatusServiceUnavailable || !strings.Contains(body, "downloading tiny.gguf") {
			t.Errorf("GET /health while downloading = %d %s", code, body)
		}
		close(release)
		waitState(t, r.Supervisor, llamaserver.Ready)
	})
}

func TestNotFound(t *testing.T) {
	_, err := llamaserver.New(llamaserver.Config{Bin: "/nonexistent/llama-server"}, func(context.Context, func(string)) (string, error) { return "", nil }, nil)
	if !errors.Is(err, llamaserver.ErrNotFound) || !strings.Contains(err.Error(), "brew install llama.cpp") {
		t.Errorf("New with a missing binary: %v", err)
	}
}

// TestNoOrphanWhenParentDies kills -9 a process that supervises a child: the kernel ends the
// child too (Linux's parent-death signal), so no llama-server is left behind.
func TestNoOrphanWhenParentDies(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envParent+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil || perr != nil {
		t.Fatalf("parent printed %q (%v)", line, err)
	}
	if !alive(pid) {
		t.Fatalf("child %d is not running", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The orphan is reparented to init (or a subreaper), which reaps it once it dies.
	eventually.True(t, 10*time.Second, "child "+strconv.Itoa(pid)+" gone", func() bool { return !alive(pid) || zombie(pid) })
}

// zombie reports whether pid has exited but is not reaped yet.
func zombie(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

func TestParseDevices(t *testing.T) {
	tests := []struct {
		out  string
		want []string
	}{
		{"Available devices:\n  (none)\n", nil},
		{"load_backend: loaded CPU backend\nAvailable devices:\n  CUDA0: NVIDIA L4 (22478 MiB, 22161 MiB free)\n", []string{"CUDA0: NVIDIA L4 (22478 MiB, 22161 MiB free)"}},
		{"Available devices:\n  Metal: Apple M2 (10922 MiB, 10922 MiB free)\n  CPU: Apple M2\n", []string{"Metal: Apple M2 (10922 MiB, 10922 MiB free)"}},
		{"error: unknown argument: --list-devices\n", nil},
	}
	for _, tc := range tests {
		if got := llamaserver.ParseDevices([]byte(tc.out)); !slices.Equal(got, tc.want) {
			t.Errorf("ParseDevices(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}
