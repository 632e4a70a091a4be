package main

import (
	"fmt"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/toolmesh/toolmesh/internal/telemetry/jaegertest"
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

// jaegerBinary is the optimized Jaeger v2 scripts/jaeger builds for make bench
// (TOOLMESH_JAEGER_BUILD=release), not the tests' unoptimized one: it shares the CPUs with what
// is measured.
func jaegerBinary(root string) string {
	return installed(root, "TOOLMESH_JAEGER", "jaeger-release", "jaeger")
}

// startJaeger runs Jaeger v2 all-in-one (in-memory storage) on free loopback ports, as the
// trace tests run it (internal/telemetry/jaegertest), its log in dir.
func startJaeger(bin, dir string) (*collector, error) {
	j, err := jaegertest.Run(bin, dir)
	if err != nil {
		return nil, err
	}
	return &collector{endpoint: j.OTLPEndpoint, what: "Jaeger v2 all-in-one (" + bin + ", in-memory storage) on loopback, sharing the CPUs", stop: j.Stop}, nil
}
