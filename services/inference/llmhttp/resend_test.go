package llmhttp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// closingConnDouble is a test double of a kept-alive connection that the server closes while a
// request is written on it: once armed, it writes half of the next write, closes, and fails
// the write with net.ErrClosed, as the real one does (see TestRealServerAfterAStream in chat).
type closingConnDouble struct {
	net.Conn
	armed *atomic.Bool
}

func (c *closingConnDouble) Write(p []byte) (int, error) {
	if c.armed.CompareAndSwap(true, false) {
		n, _ := c.Conn.Write(p[:len(p)/2])
		c.Conn.Close()
		return n, &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}
	}
	return c.Conn.Write(p)
}

// TestDoResendsUnsent (a connection double, an httptest server): a request whose write fails half-way on a kept-alive connection is sent
// again, once, on a new connection, and reaches the server whole exactly once; a request that
// fails so on a new connection, or whose body cannot be read again, is not.
func TestDoResendsUnsent(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return // a request cut off half-way is not one the server acts on
		}
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)

	body := strings.Repeat("a prompt of a few KiB ", 400)
	for _, tc := range []struct {
		name       string
		warm       bool // a first request leaves a kept-alive connection to reuse
		rewindable bool
		wantOK     bool
	}{
		{"kept-alive connection", true, true, true},
		{"new connection", false, true, false},
		{"body not rewindable", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var armed atomic.Bool
			var dials atomic.Int32
			tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &closingConnDouble{Conn: c, armed: &armed}, nil
			}}
			t.Cleanup(tr.CloseIdleConnections)
			hc := &http.Client{Transport: tr}
			post := func(b string) (*http.Response, error) {
				var rd io.Reader = strings.NewReader(b)
				if !tc.rewindable {
					rd = io.MultiReader(rd) // no GetBody
				}
				req, err := http.NewRequest(http.MethodPost, srv.URL, rd)
				if err != nil {
					t.Fatal(err)
				}
				return Do(hc, req)
			}
			if tc.warm {
				resp, err := post("warm")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			got = nil
			mu.Unlock()

			armed.Store(true)
			resp, err := post(body)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			whole := 0
			for _, g := range got {
				if g == body {
					whole++
				}
			}
			mu.Unlock()
			switch {
			case tc.wantOK && (err != nil || whole != 1):
				t.Errorf("got %v with the server given the request whole %d times, want it answered and given once", err, whole)
			case !tc.wantOK && (err == nil || !errors.Is(err, net.ErrClosed) || whole != 0):
				t.Errorf("got %v with the server given the request whole %d times, want the write error and no request", err, whole)
			}
			t.Logf("%v after %d dials", err, dials.Load())
		})
	}
}
