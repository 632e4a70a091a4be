package llama

import (
	"net/http"
	"net/http/httptrace"
	"sync"
)

// Do is hc.Do(req), sent once more when it failed while being written on a kept-alive
// connection. llama-server closes a connection after a streamed answer (and after some errors)
// without saying so, and a request sent on it in the moment before the client notices fails.
// net/http resends such a request itself only when none of it was written; a prompt of a few
// KiB is written in parts, and its write fails half-way. The server cannot have acted on a
// request it did not get whole, so sending it again on another connection is safe. req's body
// must be rewindable (GetBody set, as http.NewRequest does for a bytes.Reader).
func Do(hc *http.Client, req *http.Request) (*http.Response, error) {
	var (
		mu       sync.Mutex
		reused   bool
		writeErr error
	)
	trace := &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			mu.Lock()
			reused, writeErr = i.Reused, nil
			mu.Unlock()
		},
		// Called by the connection's writer, which may outlive Do's wait for an answer.
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			mu.Lock()
			writeErr = i.Err
			mu.Unlock()
		},
	}
	ctx := req.Context()
	resp, err := hc.Do(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	mu.Lock()
	unsent := reused && writeErr != nil
	mu.Unlock()
	if err == nil || !unsent || ctx.Err() != nil || (req.Body != nil && req.GetBody == nil) {
		return resp, err
	}
	again := req.Clone(ctx)
	if req.GetBody != nil {
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, err
		}
		again.Body = body
	}
	return hc.Do(again)
}
