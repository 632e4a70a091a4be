package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/addscript"
	"github.com/toolmesh/toolmesh/internal/llamatest"
)

// question is the standard question; the double answers nothing else.
// model is the llama-server the mesh talks to: a llamatest.Double behind a small forwarding
// proxy in this process that times every request.
//
// Model time is the time a request to the llama-server spends inside the proxy's handler:
// from the moment its headers have been read until the double's answer has been read to its
// end and handed on to the inference service's connection. It covers the double's own work
// (the JSON body, tokenizing the prompt for the context check, the script, the answer and
// its stream events) and the proxy's extra loopback hop to the double. Neither exists in
// front of a real llama-server (whose model time is prompt processing and generation), so
// both are subtracted from the query's time. What stays in the loop's overhead is everything
// toolmesh does, including its own HTTP request to the llama-server and reading the answer.
// /health is neither timed nor counted (readiness probes, not the loop).
//
// Why a proxy: the double does not expose its handler to wrap, and the bench must not change
// llamatest. The proxy's cost lands inside model time for latency, but not for CPU: CPU per
// query (and so queries/s) includes the proxy's work in this process (-no-model-time shows
// how much).
//
// Each measurement gets a fresh double (swap): the double keeps every request it received,
// which would otherwise grow the heap of this process for the whole run.
type model struct {
	URL string // what the mesh is pointed at: the proxy

	srv      *http.Server
	upstream atomic.Pointer[string] // the double's base URL
	hc       *http.Client

	mu     sync.Mutex
	double *llamatest.Double

	nanos       atomic.Int64 // summed model time
	requests    atomic.Int64 // timed requests
	completions atomic.Int64 // /completion requests among them
	conns       atomic.Int64 // connections the mesh opened to the proxy
	inflight    atomic.Int64 // timed requests under way
}

// startModel starts the double; with timed false the mesh talks to it directly (no model time,
// one double for the whole run), to see what the proxy itself costs.
func startModel(timed bool) (*model, error) {
	if !timed {
		d := llamatest.StartDouble(llamatest.DoubleOptions{})
		d.ScriptFunc(addscript.Reply)
		return &model{URL: d.URL, double: d}, nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &model{URL: "http://" + lis.Addr().String()}
	// Room for every concurrent request: with the default 2 idle connections per host, 32
	// clients would open and close connections to the double all the time.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 512
	tr.MaxIdleConnsPerHost = 512
	tr.DisableCompression = true
	m.hc = &http.Client{Transport: tr}
	m.swap()
	m.srv = &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		// Counts the connections the mesh opens to its llama-server: a client that reuses
		// its connections opens a handful per run, not one per request.
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				m.conns.Add(1)
			}
		}}
	go func() { _ = m.srv.Serve(lis) }()
	return m, nil
}

// swap replaces the double by a fresh one; call it only while no query runs.
func (m *model) swap() {
	if m.hc == nil {
		return // not timed: the mesh holds the double's URL
	}
	d := llamatest.StartDouble(llamatest.DoubleOptions{})
	d.ScriptFunc(addscript.Reply)
	m.mu.Lock()
	old := m.double
	m.double = d
	m.mu.Unlock()
	m.upstream.Store(&d.URL)
	if old != nil {
		old.Close()
		m.hc.CloseIdleConnections()
	}
}

func (m *model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" || r.URL.Path == "/v1/health" {
		m.forward(w, r)
		return
	}
	m.inflight.Add(1)
	start := time.Now()
	m.forward(w, r)
	m.nanos.Add(int64(time.Since(start)))
	m.requests.Add(1)
	if r.URL.Path == "/completion" {
		m.completions.Add(1)
	}
	m.inflight.Add(-1)
}

// settle waits (at most 100 ms) until no timed request is under way. A query can end a moment
// before the proxy's handler of its last request does (the inference service has the last
// event; the handler still reads the end of the double's answer), and that request's model
// time must count for its own query, not the next.
func (m *model) settle() {
	deadline := time.Now().Add(100 * time.Millisecond)
	for m.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Microsecond)
	}
}

// forward sends r to the double and streams the answer back, event by event.
//
// It always reads the double's answer to its end, and the request to the double does not
// end when the mesh's connection does: the inference service closes its connection right
// after a stream's last event, before the chunked body's end. httputil.ReverseProxy, used
// first, then aborted the copy and closed the upstream body early, and about 1 query in 100
// failed mid-answer on a connection to the double that net/http had closed under it
// ("unexpected EOF" in the inference service; none without the proxy).
func (m *model) forward(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the mesh went away
	}
	out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, *m.upstream.Load()+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for _, k := range []string{"Content-Type", "Authorization", "Accept"} {
		if v := r.Header.Values(k); len(v) > 0 {
			out.Header[k] = v
		}
	}
	resp, err := m.hc.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var werr error
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 && werr == nil {
			if _, werr = w.Write(buf[:n]); werr == nil && flusher != nil {
				flusher.Flush()
			}
		}
		if rerr != nil {
			return
		}
	}
}

// copyBufs are forward's copy buffers: pooled, because in inproc mode the mesh shares this
// process's heap, and 32 KB per request would make the mesh's GC look worse than it is.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// modelCounters is a snapshot of the model's counters.
type modelCounters struct {
	time                         time.Duration
	requests, completions, conns int64
}

func (m *model) counters() modelCounters {
	return modelCounters{time: time.Duration(m.nanos.Load()), requests: m.requests.Load(),
		completions: m.completions.Load(), conns: m.conns.Load()}
}

func (c modelCounters) sub(o modelCounters) modelCounters {
	return modelCounters{time: c.time - o.time, requests: c.requests - o.requests,
		completions: c.completions - o.completions, conns: c.conns - o.conns}
}

func (m *model) close() {
	if m.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := m.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = m.srv.Close()
		}
	}
	m.mu.Lock()
	d := m.double
	m.mu.Unlock()
	d.Close()
	if m.hc != nil {
		m.hc.CloseIdleConnections()
	}
}
