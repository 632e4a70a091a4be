package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// collector receives the spans of the tracing-on runs: a real Jaeger v2 when one is built (as
// issue 6 measured it), else an OTLP/gRPC sink in this process that reads and drops them.
type collector struct {
	endpoint string // host:port of the OTLP/gRPC receiver
	what     string // for the report
	requests atomic.Int64
	bytes    atomic.Int64
	stop     func()
}

// stats says what reached a sink.
func (c *collector) stats() string {
	if c.requests.Load() == 0 && c.bytes.Load() == 0 {
		return ""
	}
	return fmt.Sprintf("the sink received %d export requests, %.1f MB of spans", c.requests.Load(), float64(c.bytes.Load())/1e6)
}

// startSink serves OTLP/gRPC's Export on loopback and drops what it receives. It needs no OTLP
// types: every method is answered by one handler that reads the request as an empty message
// (the spans stay in its unknown fields, which are counted) and replies with an empty message,
// which is a valid ExportTraceServiceResponse.
func startSink() (*collector, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &collector{endpoint: lis.Addr().String(), what: "an OTLP/gRPC sink in the report process that reads and drops the spans"}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var req emptypb.Empty
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		c.requests.Add(1)
		c.bytes.Add(int64(len(req.ProtoReflect().GetUnknown())))
		return stream.SendMsg(&emptypb.Empty{})
	}))
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(done) }()
	c.stop = func() { srv.Stop(); <-done }
	return c, nil
}

// jaegerBinary is the Jaeger v2 built by scripts/jaeger: $TOOLMESH_JAEGER, else the script's
// cache folder.
func jaegerBinary(root string) string {
	if b := os.Getenv("TOOLMESH_JAEGER"); b != "" {
		return b
	}
	cache := os.Getenv("TOOLMESH_CACHE")
	if cache == "" {
		cache = filepath.Join(root, ".cache")
	}
	b := filepath.Join(cache, "jaeger", "jaeger")
	if st, err := os.Stat(b); err == nil && st.Mode().IsRegular() {
		return b
	}
	return ""
}

// startJaeger runs Jaeger v2 all-in-one (in-memory storage) on free loopback ports, configured
// as internal/telemetry/jaegertest configures it, and waits until it is healthy.
func startJaeger(ctx context.Context, bin, logPath string) (*collector, error) {
	ports := make([]int, 0, 6)
	var held []net.Listener
	for range 6 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, h := range held {
				h.Close()
			}
			return nil, err
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, h := range held {
		h.Close()
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	args := []string{
		"--set", "service.extensions=[jaeger_storage, jaeger_query, healthcheckv2]",
		"--set", "service.pipelines.traces.receivers=[otlp]",
		"--set", "service.telemetry.metrics.level=none",
		"--set", "receivers.otlp.protocols.grpc.endpoint=" + addr(0),
		"--set", "receivers.otlp.protocols.http.endpoint=" + addr(1),
		"--set", "extensions.jaeger_query.http.endpoint=" + addr(2),
		"--set", "extensions.jaeger_query.grpc.endpoint=" + addr(3),
		"--set", "extensions.jaeger_query.enable_tracing=false",
		"--set", "extensions.healthcheckv2.http.endpoint=" + addr(4),
		"--set", "extensions.healthcheckv2.grpc.endpoint=" + addr(5),
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "JAEGER_LISTEN_HOST=127.0.0.1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr(4)+"/status", nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("jaeger (%s) exited before it was ready; its log is %s", bin, logPath)
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New("jaeger not ready within 60s; its log is " + logPath)
		}
	}
	return &collector{endpoint: addr(0), what: "Jaeger v2 all-in-one (" + bin + ", in-memory storage) on loopback, sharing the CPUs", stop: stop}, nil
}
