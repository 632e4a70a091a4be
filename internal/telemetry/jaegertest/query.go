package jaegertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// ErrNotFound is returned (wrapped) by Trace when Jaeger has no such trace (yet).
var ErrNotFound = errors.New("not found")

// Services lists the service names Jaeger has seen spans from, sorted.
func (j *Jaeger) Services(ctx context.Context) ([]string, error) {
	var resp struct {
		Services []string `json:"services"`
	}
	if err := j.get(ctx, "/api/v3/services", nil, &resp); err != nil {
		return nil, err
	}
	slices.Sort(resp.Services)
	return resp.Services, nil
}

// maxTraces bounds what Traces returns; the in-memory store needs an explicit search depth.
const maxTraces = 1000

// Traces returns the traces (newest first, at most 1000) that have a span of service starting
// at or after since. No match is an empty result, not an error.
func (j *Jaeger) Traces(ctx context.Context, service string, since time.Time) ([]Trace, error) {
	q := url.Values{
		// snake_case names: the ones every Jaeger v2 release accepts.
		"query.service_name":   {service},
		"query.start_time_min": {since.UTC().Format(time.RFC3339Nano)},
		// Both bounds are required; a minute ahead covers spans that started just now.
		"query.start_time_max": {time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)},
		"query.num_traces":     {fmt.Sprint(maxTraces)},
		"query.raw_traces":     {"true"}, // as stored: see the Trace type
	}
	var resp otlpResponse
	if err := j.get(ctx, "/api/v3/traces", q, &resp); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	return resp.Result.traces()
}

// Trace returns the trace with the given id (32 hex digits, as trace.TraceID.String() prints
// it). An unknown id is an error wrapping ErrNotFound: spans reach the store a moment after
// they are exported, so a test usually wants WaitTrace.
func (j *Jaeger) Trace(ctx context.Context, traceID string) (Trace, error) {
	var resp otlpResponse
	q := url.Values{"raw_traces": {"true"}} // as stored: see the Trace type
	if err := j.get(ctx, "/api/v3/traces/"+url.PathEscape(traceID), q, &resp); err != nil {
		return Trace{}, err
	}
	traces, err := resp.Result.traces()
	if err != nil {
		return Trace{}, err
	}
	for _, tr := range traces {
		if tr.TraceID == strings.ToLower(traceID) {
			return tr, nil
		}
	}
	return Trace{}, fmt.Errorf("trace %s: the answer holds %d other traces: %w", traceID, len(traces), ErrNotFound)
}

// WaitTrace polls Trace until the trace exists and ok(trace) holds (ok nil: until it exists),
// or ctx ends; ctx should carry a deadline. It returns the last version of the trace it saw
// even with an error, so a failing test can print what did arrive (Trace.String).
func (j *Jaeger) WaitTrace(ctx context.Context, traceID string, ok func(Trace) bool) (Trace, error) {
	var last Trace
	polls := 0
	for {
		tr, err := j.Trace(ctx, traceID)
		polls++
		switch {
		case err == nil:
			last = tr
			if ok == nil || ok(tr) {
				return tr, nil
			}
		case errors.Is(err, ErrNotFound):
			// Not stored yet: the receiver batches before it writes.
		case ctx.Err() != nil:
			// The request was cut by ctx: report it below.
		default:
			return last, err
		}
		if ctxDone(ctx, 100*time.Millisecond) {
			if len(last.Spans) == 0 {
				return last, fmt.Errorf("trace %s never arrived (%d polls): %w", traceID, polls, ctx.Err())
			}
			return last, fmt.Errorf("trace %s arrived with %d spans but never satisfied the condition (%d polls): %w",
				traceID, len(last.Spans), polls, ctx.Err())
		}
	}
}

// ctxDone waits up to d and reports whether ctx has ended.
func ctxDone(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true
	case <-t.C:
		return false
	}
}

// get GETs path from the query service and decodes the JSON answer into out. Jaeger's own
// 404 ({"error":{"httpCode":404,...}}: "No traces found", "trace not found") becomes
// ErrNotFound; any other 404 (a route this Jaeger does not have) stays a plain error, so a
// poll does not mistake it for "not yet".
func (j *Jaeger) get(ctx context.Context, path string, q url.Values, out any) error {
	u := j.QueryURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return fmt.Errorf("jaeger query: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("jaeger query: GET %s: reading the answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				HTTPCode int    `json:"httpCode"`
				Message  string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error.HTTPCode != 0 {
			if e.Error.HTTPCode == http.StatusNotFound {
				return fmt.Errorf("jaeger query: GET %s: %s: %w", path, e.Error.Message, ErrNotFound)
			}
			return fmt.Errorf("jaeger query: GET %s: %s: %s", path, resp.Status, e.Error.Message)
		}
		return fmt.Errorf("jaeger query: GET %s: %s: %.300s", path, resp.Status, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("jaeger query: GET %s: decoding the answer: %w", path, err)
	}
	return nil
}
