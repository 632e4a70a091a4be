package llmhttp

import (
	"net/http"
	"net/http/httptrace"
	"sync"
)

// Do is hc.Do(req) for a request to a model server, sent again when a kept-alive connection
// turns out closed. llama-server closes a connection after a streamed answer (and after some
// errors) without saying so, and a request sent on it in the moment before the client notices
// fails. A nil Idempotency-Key (the header itself is not sent) lets net/http resend it when
// nothing of it was written or nothing was read back; a prompt of a few KiB is written in
// parts and can fail half-written, which net/http does not resend: Do sends it once more. The
// server cannot have acted on a request it did not get whole. req's body must be rewindable
// (GetBody set, as http.NewRequest does for a bytes.Reader).
func Do(hc *http.Client, req *http.Request) (*http.Response, error) {
	req.Header["Idempotency-Key"] = nil
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
