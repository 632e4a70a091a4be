package executor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// inheritedEnv lists the variables a stdio server gets from our environment;
// everything else must be configured in the server's env. This follows the
// MCP SDKs' default environment for spawned servers.
var inheritedEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ"}

// childEnv is the minimal environment plus the configured env (which wins).
func childEnv(configured map[string]string) []string {
	env := make(map[string]string, len(inheritedEnv)+len(configured))
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	for k, v := range configured {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// childProcess is a stdio MCP server we spawned. We own its pipes and reap it
// ourselves (mcp-go's transport only sees the pipes), so we learn at once when
// it dies, and it never lingers as a zombie.
type childProcess struct {
	cmd    *exec.Cmd
	stdin  *os.File // our write end
	stdout *os.File // our read end
	stderr *os.File // our read end
	tail   *tailBuffer

	done    chan struct{} // closed once the process has been reaped
	waitErr error
	drained sync.WaitGroup
}

const (
	gracefulStop = 2 * time.Second
	termStop     = 2 * time.Second
)

func startChild(srv mcpconfig.Server) (*childProcess, error) {
	cmd := exec.Command(srv.Command, srv.Args...)
	cmd.Env = childEnv(srv.Env)
	if runtime.GOOS != "windows" {
		// Own process group: on stop we signal the whole group, so helpers a
		// launcher like npx or uvx starts go away with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW, errR, errW} {
			f.Close()
		}
		return nil, fmt.Errorf("start %s: %w", srv.Command, err)
	}
	// The child holds its own copies now.
	inR.Close()
	outW.Close()
	errW.Close()

	p := &childProcess{cmd: cmd, stdin: inW, stdout: outR, stderr: errR, tail: &tailBuffer{max: 2048}, done: make(chan struct{})}
	p.drained.Add(1)
	go func() {
		defer p.drained.Done()
		_, _ = io.Copy(p.tail, errR)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exitError describes how the process ended, with the last line of its stderr.
func (p *childProcess) exitError() error {
	<-p.done
	msg := "process exited"
	if p.waitErr != nil {
		msg = "process exited: " + p.waitErr.Error()
	}
	if line := p.tail.lastLine(); line != "" {
		msg += " (stderr: " + line + ")"
	}
	return errors.New(msg)
}

// stop ends the process: close its stdin and wait, then SIGTERM, then SIGKILL
// its process group. It returns once the process is reaped and our pipe
// readers are done.
func (p *childProcess) stop() {
	_ = p.stdin.Close()
	if !p.waitFor(gracefulStop) {
		p.signal(syscall.SIGTERM)
		if !p.waitFor(termStop) {
			p.signal(syscall.SIGKILL)
			<-p.done
		}
	}
	// Leftover group members would keep the pipes open.
	p.signal(syscall.SIGKILL)
	_ = p.stdout.Close()
	_ = p.stderr.Close()
	p.drained.Wait()
}

func (p *childProcess) waitFor(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

func (p *childProcess) signal(sig syscall.Signal) {
	if p.cmd.Process == nil {
		return
	}
	if runtime.GOOS == "windows" {
		_ = p.cmd.Process.Kill()
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
