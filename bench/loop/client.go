package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/bench/internal/addscript"
	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// asker asks the standard question once and checks the answer; it returns the loop's iterations.
type asker func(ctx context.Context) (iterations int, err error)

// answer is what the check looks at, from either API.
type answer struct {
	text       string
	calls      []call
	stopReason string
	iterations int
	err        string
}

type call struct {
	tool, output string
	isError      bool
}

// check accepts exactly the scripted run: one add call returning 5, two iterations, answered.
func (a answer) check() error {
	switch {
	case a.err != "":
		return fmt.Errorf("error %q", a.err)
	case a.stopReason != "STOP_REASON_ANSWERED":
		return fmt.Errorf("stop_reason %s", a.stopReason)
	case a.iterations != 2:
		return fmt.Errorf("%d iterations, want 2", a.iterations)
	case len(a.calls) != 1 || a.calls[0].tool != "calculator.add" || a.calls[0].output != "5" || a.calls[0].isError:
		return fmt.Errorf("tool calls %+v, want one calculator.add returning 5", a.calls)
	case a.text != addscript.Answer:
		return fmt.Errorf("answer %q, want %q", a.text, addscript.Answer)
	}
	return nil
}

// newAsker returns an asker for via ("rest" or "grpc") sized for clients concurrent callers,
// and a func that releases its connections.
func newAsker(via string, ms *mesh, clients int, timeout time.Duration) (asker, func(), error) {
	switch via {
	case "rest":
		// One kept-alive connection per client, as a real client would hold.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 2 * clients
		tr.MaxIdleConnsPerHost = 2 * clients
		hc := &http.Client{Transport: tr, Timeout: timeout}
		return restAsker(ms.rest, hc), hc.CloseIdleConnections, nil
	case "grpc":
		creds := insecure.NewCredentials()
		if ms.caFile != "" {
			// An app of a mesh with mutual TLS: it trusts the CA and has no certificate.
			pool := x509.NewCertPool()
			pem, err := os.ReadFile(ms.caFile)
			if err != nil || !pool.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("api CA %s: %v", ms.caFile, err)
			}
			creds = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		}
		conn, err := grpc.NewClient(ms.grpc, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, nil, err
		}
		return grpcAsker(toolmeshv1.NewAgentServiceClient(conn), timeout), func() { _ = conn.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown API %q", via)
}

var restBody = []byte(`{"query":"` + addscript.Question + `"}`)

// restResponse is QueryResponse as its JSON reads (the fields the check needs).
type restResponse struct {
	Answer    string `json:"answer"`
	ToolCalls []struct {
		Tool    string `json:"tool"`
		Output  string `json:"output"`
		IsError bool   `json:"is_error"`
	} `json:"tool_calls"`
	Iterations int    `json:"iterations"`
	StopReason string `json:"stop_reason"`
	Error      string `json:"error"`
}

// restBytes is the size of the last REST answer, for the progress log.
var restBytes atomic.Int64

func restAsker(base string, hc *http.Client) asker {
	url := base + "/v1/query"
	return func(ctx context.Context) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(restBody))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("POST /v1/query: %d %.200s", resp.StatusCode, b)
		}
		restBytes.Store(int64(len(b)))
		var r restResponse
		if err := json.Unmarshal(b, &r); err != nil {
			return 0, fmt.Errorf("POST /v1/query: %v: %.200s", err, b)
		}
		a := answer{text: r.Answer, stopReason: r.StopReason, iterations: r.Iterations, err: r.Error}
		for _, c := range r.ToolCalls {
			a.calls = append(a.calls, call{tool: c.Tool, output: c.Output, isError: c.IsError})
		}
		return a.iterations, a.check()
	}
}

func grpcAsker(c toolmeshv1.AgentServiceClient, timeout time.Duration) asker {
	return func(ctx context.Context) (int, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		r, err := c.Query(ctx, &toolmeshv1.QueryRequest{Query: addscript.Question})
		if err != nil {
			return 0, err
		}
		a := answer{text: r.GetAnswer(), stopReason: r.GetStopReason().String(), iterations: int(r.GetIterations()), err: r.GetError()}
		for _, tc := range r.GetToolCalls() {
			a.calls = append(a.calls, call{tool: tc.GetTool(), output: tc.GetOutput(), isError: tc.GetIsError()})
		}
		return a.iterations, a.check()
	}
}

// sample is one answered query.
type sample struct {
	latency    time.Duration
	model      time.Duration // this query's own model time; only known with one client
	iterations int
}

// driven is what clients concurrent clients did in one phase.
type driven struct {
	clients  int
	samples  []sample
	errors   int
	firstErr string
	elapsed  time.Duration
}

// drive runs clients callers, each asking the standard question after the other, until d has passed
// (a query under way then still finishes and counts).
func drive(ctx context.Context, ask asker, clients int, d time.Duration, m *model) driven {
	out := driven{clients: clients}
	if d <= 0 {
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range clients {
		wg.Go(func() {
			var mine []sample
			errs, first := 0, ""
			for ctx.Err() == nil && time.Now().Before(deadline) {
				// With one client nothing else talks to the double, so the model time that
				// accrues during the query is the query's own.
				before := m.nanos.Load()
				t0 := time.Now()
				iters, err := ask(ctx)
				lat := time.Since(t0)
				if err != nil {
					if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
						break // stopped, not failed
					}
					errs++
					if first == "" {
						first = err.Error()
					}
					continue
				}
				s := sample{latency: lat, iterations: iters}
				if clients == 1 {
					m.settle()
					s.model = time.Duration(m.nanos.Load() - before)
				}
				mine = append(mine, s)
			}
			mu.Lock()
			defer mu.Unlock()
			out.samples = append(out.samples, mine...)
			out.errors += errs
			if out.firstErr == "" {
				out.firstErr = first
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	m.settle()
	return out
}

// result is one row of the table.
type result struct {
	mode, via string
	clients   int
	load      string // /proc/loadavg 1/5/15 min at the start of the timed phase

	queries, errors int
	firstErr        string
	qps             float64
	p50, p99        time.Duration // per query
	// iterP50, iterP99 are the loop's overhead per iteration: (query time − model time) ÷
	// iterations; with several clients the mean model time per query stands in for the
	// query's own.
	iterP50, iterP99 time.Duration
	modelShare       float64 // model time ÷ query time, summed over the phase
	modelPerQuery    time.Duration
	llamaPerQuery    float64 // /completion requests per query
	llamaConnsPerQ   float64 // new connections to the llama-server per query
	cpuPerQuery      time.Duration
	meshCPUPerQuery  time.Duration            // micro: the child processes' part of cpuPerQuery
	childCPU         map[string]time.Duration // micro: CPU of each child process in the phase
	allocPerQuery    float64                  // bytes allocated in this process per query
	switches         map[string]float64       // context switches per query by process ("" is this one)
}

func (r *result) fill(d driven, mc modelCounters, cpu, childCPU time.Duration, micro bool) {
	r.queries, r.errors, r.firstErr = len(d.samples), d.errors, d.firstErr
	if n := r.queries + r.errors; n > 0 {
		r.cpuPerQuery = (cpu + childCPU) / time.Duration(n)
		if micro {
			r.meshCPUPerQuery = childCPU / time.Duration(n)
		}
	}
	if r.queries == 0 {
		return
	}
	r.qps = float64(r.queries) / d.elapsed.Seconds()
	r.modelPerQuery = mc.time / time.Duration(r.queries)
	r.llamaPerQuery = float64(mc.completions) / float64(r.queries)
	r.llamaConnsPerQ = float64(mc.conns) / float64(r.queries)
	lat := make([]time.Duration, 0, r.queries)
	iter := make([]time.Duration, 0, r.queries)
	var total time.Duration
	for _, s := range d.samples {
		lat = append(lat, s.latency)
		total += s.latency
		model := r.modelPerQuery
		if d.clients == 1 {
			model = s.model
		}
		iter = append(iter, (s.latency-model)/time.Duration(max(s.iterations, 1)))
	}
	r.modelShare = float64(mc.time) / float64(total)
	r.p50, r.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	r.iterP50, r.iterP99 = percentile(iter, 0.50), percentile(iter, 0.99)
}

// percentile is the nearest-rank percentile of ds (which it sorts).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(float64(len(ds))*p+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
