package main

import (
	"context"
	"net/http"
	"testing"
)

// The Go benchmarks measure one sequential call, for `go test -bench . -benchmem`; the
// program (go run ./bench/executor) is the full, interleaved comparison.

func benchSetup(b *testing.B) (mcpURL string, o options) {
	b.Helper()
	u, stop, err := serveCalculator()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return u, options{concurrency: 64, warmup: 100}
}

var benchTransports = []struct{ name, path string }{{"sse", "/sse"}, {"streamable-http", "/mcp"}}

func runCalls(b *testing.B, call func(context.Context) error) {
	ctx := b.Context()
	for range 100 { // warm up
		if err := call(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := call(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDirectCall(b *testing.B) {
	for _, tr := range benchTransports {
		b.Run(tr.name, func(b *testing.B) {
			u, o := benchSetup(b)
			hc := &http.Client{Transport: pooledTransport(128)}
			b.Cleanup(hc.CloseIdleConnections)
			d, err := newDirect(b.Context(), tr.name, u+tr.path, hc, o)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(d.close)
			runCalls(b, d.scenario.call)
		})
	}
}

func BenchmarkExecutorCall(b *testing.B) {
	for _, tr := range benchTransports {
		b.Run(tr.name, func(b *testing.B) {
			u, o := benchSetup(b)
			ex, err := newExecutorScenario(b.Context(), tr.name, u+tr.path, o)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(ex.close)
			runCalls(b, ex.scenario.call)
		})
	}
}
