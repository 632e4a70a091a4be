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
	"strings"
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

// newAsker returns an asker for via ("rest", "chat" or "grpc") sized for clients concurrent
// callers, and a func that releases its connections.
func newAsker(ctx context.Context, via string, ms *mesh, clients int, timeout time.Duration) (asker, func(), error) {
	switch via {
	case "rest", "chat":
		// One kept-alive connection per client, as a real client would hold.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 2 * clients
		tr.MaxIdleConnsPerHost = 2 * clients
		hc := &http.Client{Transport: tr, Timeout: timeout}
		if via == "rest" {
			return restAsker(ms.rest, hc), hc.CloseIdleConnections, nil
		}
		// Once, before any timed phase, as an app reads the model's name once at start.
		model, err := modelID(ctx, ms.rest, hc)
		if err != nil {
			hc.CloseIdleConnections()
			return nil, nil, err
		}
		body, err := chatBody(model)
		if err != nil {
			hc.CloseIdleConnections()
			return nil, nil, err
		}
		return chatAsker(ms.rest, body, hc), hc.CloseIdleConnections, nil
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

// restBytes is the size of the last answer on the REST port (/v1/query or
// /v1/chat/completions), for the progress log.
var restBytes atomic.Int64

// post sends body as JSON to url and returns the answer's body; an answer other than 200 is an
// error that quotes its start.
func post(ctx context.Context, hc *http.Client, url string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%d %.200s", resp.StatusCode, b)
	}
	restBytes.Store(int64(len(b)))
	return b, nil
}

func restAsker(base string, hc *http.Client) asker {
	url := base + "/v1/query"
	return func(ctx context.Context) (int, error) {
		b, err := post(ctx, hc, url, restBody)
		if err != nil {
			return 0, fmt.Errorf("POST /v1/query: %w", err)
		}
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

// modelID is the id GET /v1/models lists first: the model a chat completion must name.
func modelID(ctx context.Context, base string, hc *http.Client) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /v1/models: %d %.200s", resp.StatusCode, b)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return "", fmt.Errorf("GET /v1/models: %v: %.200s", err, b)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("GET /v1/models lists no model: %.200s", b)
	}
	return list.Data[0].ID, nil
}

// chatBody is the standard question as a chat completion request for model: one user message,
// no functions of the caller's, so every tool the model uses is the mesh's.
func chatBody(model string) ([]byte, error) {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	return json.Marshal(struct {
		Model    string    `json:"model"`
		Messages []message `json:"messages"`
	}{model, []message{{"user", addscript.Question}}})
}

// chatResponse is a chat.completion as its JSON reads (the fields the check needs), with
// toolmesh's extension, which says what the mesh ran (services/api/openaiface/response.go).
type chatResponse struct {
	Object  string `json:"object"`
	Choices []struct {
		Message struct {
			Role      string            `json:"role"`
			Content   *string           `json:"content"`
			ToolCalls []json.RawMessage `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Toolmesh *struct {
		StopReason string `json:"stop_reason"`
		Error      string `json:"error"`
		Iterations int    `json:"iterations"`
		ToolCalls  []struct {
			Tool    string `json:"tool"`
			Output  string `json:"output"`
			IsError bool   `json:"is_error"`
		} `json:"tool_calls"`
	} `json:"toolmesh"`
}

// chatAnswer reads a chat completion's body into what the check looks at. The shape OpenAI
// clients read is checked here: one choice, an assistant message with text and no tool calls
// (the caller offered no functions, so a call handed back would be a mesh tool leaking out),
// finish_reason stop, and the extension present.
func chatAnswer(b []byte) (answer, error) {
	var r chatResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return answer{}, fmt.Errorf("%v: %.200s", err, b)
	}
	switch {
	case r.Object != "chat.completion":
		return answer{}, fmt.Errorf("object %q, want chat.completion", r.Object)
	case len(r.Choices) != 1:
		return answer{}, fmt.Errorf("%d choices, want 1", len(r.Choices))
	case r.Choices[0].FinishReason != "stop":
		return answer{}, fmt.Errorf("finish_reason %q, want stop", r.Choices[0].FinishReason)
	case r.Choices[0].Message.Role != "assistant" || r.Choices[0].Message.Content == nil:
		return answer{}, fmt.Errorf("message role %q with no content, want an assistant's text", r.Choices[0].Message.Role)
	case len(r.Choices[0].Message.ToolCalls) > 0:
		return answer{}, fmt.Errorf("%d tool calls handed to the caller, want none", len(r.Choices[0].Message.ToolCalls))
	case r.Toolmesh == nil:
		return answer{}, errors.New("no toolmesh extension")
	}
	ext := r.Toolmesh
	// The extension spells the stop reason without the enum's prefix, in lower case.
	a := answer{text: *r.Choices[0].Message.Content, stopReason: "STOP_REASON_" + strings.ToUpper(ext.StopReason),
		iterations: ext.Iterations, err: ext.Error}
	for _, c := range ext.ToolCalls {
		a.calls = append(a.calls, call{tool: c.Tool, output: c.Output, isError: c.IsError})
	}
	return a, nil
}

func chatAsker(base string, body []byte, hc *http.Client) asker {
	url := base + "/v1/chat/completions"
	return func(ctx context.Context) (int, error) {
		b, err := post(ctx, hc, url, body)
		if err != nil {
			return 0, fmt.Errorf("POST /v1/chat/completions: %w", err)
		}
		a, err := chatAnswer(b)
		if err != nil {
			return 0, fmt.Errorf("POST /v1/chat/completions: %w", err)
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
