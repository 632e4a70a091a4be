// Package jaegertest runs a real Jaeger v2 (the all-in-one binary, in-memory storage) for tests
// that assert on traces, and reads traces back through Jaeger's /api/v3 query API.
//
// scripts/jaeger builds the binary and prints TOOLMESH_JAEGER; without it Start skips the test
// (fails it when TOOLMESH_JAEGER_REQUIRED=1, as scripts/test sets).
// Each Start is its own Jaeger on free loopback ports, so tests may run several at once and
// never touch a developer's Jaeger on the default ports (4317, 16686, ...).
package jaegertest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// readyTimeout bounds the wait for the health endpoint; Jaeger is ready in about a second,
// the rest is room for a machine busy with `go test -race ./...`.
const readyTimeout = 60 * time.Second

// Jaeger is a running Jaeger v2 all-in-one on loopback ports.
type Jaeger struct {
	// OTLPEndpoint is host:port of the OTLP gRPC receiver (no TLS), for
	// otlptracegrpc.WithEndpoint together with otlptracegrpc.WithInsecure.
	OTLPEndpoint string
	// OTLPHTTPEndpoint is host:port of the OTLP HTTP receiver (no TLS, POST /v1/traces).
	OTLPHTTPEndpoint string
	// QueryURL is the base URL of the query service, http://127.0.0.1:PORT: the UI and /api/v3.
	QueryURL string

	healthURL string
	logPath   string
	cmd       *exec.Cmd
	done      chan struct{}
	client    *http.Client
}

// errPortTaken marks a start that failed because a port picked free was taken before Jaeger
// bound it; Start then tries again with new ports.
var errPortTaken = errors.New("a port was taken before jaeger bound it")

// Start starts the jaeger binary scripts/jaeger built (testbackend.Jaeger) with its embedded all-in-one configuration
// (in-memory storage), every listener moved to a free loopback port or switched off, and waits
// until its health endpoint reports ready. It skips the test when it is not built (see the package doc), and
// stops Jaeger when the test ends, printing Jaeger's log if the test failed.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := testbackend.Jaeger.Need(t)[0]
	dir := t.TempDir() // before Cleanup below, so the log is still there when it is printed
	j, err := Run(bin, dir)
	if err != nil {
		t.Fatalf("starting jaeger (%s): %v", bin, err)
	}
	t.Cleanup(func() {
		j.Stop()
		if t.Failed() {
			t.Logf("jaeger log (%s):\n%s", j.QueryURL, tail(j.Log(), 80))
		}
	})
	return j
}

// Run is Start for a program rather than a test (bench/report measures tracing into a real
// Jaeger): it runs the jaeger binary bin, logging into a file in dir, and waits until it is
// ready. The caller stops it with Stop.
func Run(bin, dir string) (*Jaeger, error) {
	var err error
	for attempt := range 3 {
		var j *Jaeger
		j, err = start(bin, filepath.Join(dir, "jaeger-"+strconv.Itoa(attempt)+".log"))
		if err == nil {
			return j, nil
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, err
}

// Log is what Jaeger has printed so far.
func (j *Jaeger) Log() string {
	b, err := os.ReadFile(j.logPath)
	if err != nil {
		return "(reading the jaeger log: " + err.Error() + ")"
	}
	return string(b)
}

func start(bin, logPath string) (*Jaeger, error) {
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	j := &Jaeger{
		OTLPEndpoint:     addr(0),
		OTLPHTTPEndpoint: addr(1),
		QueryURL:         "http://" + addr(2),
		healthURL:        "http://" + addr(4) + "/status",
		logPath:          logPath,
		done:             make(chan struct{}),
		client:           &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}},
	}
	// The keys are those of cmd/jaeger/internal/all-in-one.yaml (Jaeger v2.13.0) plus the query
	// extension's own defaults (16686/16685). Without --config Jaeger still loads that embedded
	// file; --set overrides single keys in it.
	args := []string{
		// Only the extensions a trace test needs: remote_sampling (5778/5779), expvar (27777)
		// and zpages (27778) are dropped rather than moved.
		"--set", "service.extensions=[jaeger_storage, jaeger_query, healthcheckv2]",
		// Only OTLP in: the Jaeger (14250, 14268, 6831/udp, 6832/udp) and Zipkin (9411)
		// receivers are configured but unused, so they do not listen.
		"--set", "service.pipelines.traces.receivers=[otlp]",
		// Jaeger's own Prometheus metrics (8888) are off.
		"--set", "service.telemetry.metrics.level=none",
		"--set", "receivers.otlp.protocols.grpc.endpoint=" + addr(0),
		"--set", "receivers.otlp.protocols.http.endpoint=" + addr(1),
		"--set", "extensions.jaeger_query.http.endpoint=" + addr(2),
		"--set", "extensions.jaeger_query.grpc.endpoint=" + addr(3),
		// The query service traces its own requests once Jaeger's own telemetry has a tracer
		// (none in this configuration today); off, so that can never add a "jaeger" service
		// to what the tests see.
		"--set", "extensions.jaeger_query.enable_tracing=false",
		"--set", "extensions.healthcheckv2.http.endpoint=" + addr(4),
		"--set", "extensions.healthcheckv2.grpc.endpoint=" + addr(5),
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own copy of the descriptor
	j.cmd = exec.Command(bin, args...)
	// Anything a later Jaeger adds and the flags above miss still binds loopback only.
	j.cmd.Env = append(os.Environ(), "JAEGER_LISTEN_HOST=127.0.0.1")
	j.cmd.Stdout, j.cmd.Stderr = logFile, logFile
	j.cmd.SysProcAttr = sysProcAttr()
	if err := j.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = j.cmd.Wait(); close(j.done) }()

	if err := j.waitReady(); err != nil {
		j.Stop()
		if strings.Contains(j.Log(), "address already in use") {
			return nil, fmt.Errorf("%w: %v", errPortTaken, err)
		}
		return nil, err
	}
	return j, nil
}

// waitReady polls the health endpoint until it answers 200, Jaeger exits or readyTimeout passes.
func (j *Jaeger) waitReady() error {
	deadline := time.After(readyTimeout)
	for {
		req, err := http.NewRequest(http.MethodGet, j.healthURL, nil)
		if err != nil {
			return err
		}
		if resp, err := j.client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-j.done:
			return fmt.Errorf("jaeger exited (%v) before it was ready; log:\n%s", j.cmd.ProcessState, tail(j.Log(), 40))
		case <-deadline:
			return fmt.Errorf("jaeger not ready after %v; log:\n%s", readyTimeout, tail(j.Log(), 40))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends Jaeger: SIGTERM (it shuts down cleanly in well under a second), SIGKILL after 10 s.
func (j *Jaeger) Stop() {
	defer j.client.CloseIdleConnections()
	select {
	case <-j.done:
		return
	default:
	}
	_ = j.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-j.done:
	case <-time.After(10 * time.Second):
		_ = j.cmd.Process.Kill()
		<-j.done
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago. All n listeners are
// held open together so the same port is not handed out twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
