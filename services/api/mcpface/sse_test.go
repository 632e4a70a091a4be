package mcpface

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/eventually"
)

// The legacy SSE transport answers a POST with 202 and writes the result on the stream later;
// these tests hold its calls to what a streamable HTTP call is held to (issue 26): in flight
// for their token until the result is written, bounded per session, cancelled with the stream.

// TestSSEFloodKeepsToTheTokensSlots: one token posts 48 slow calls to its SSE session at once,
// against a tools handler that runs 16 calls at a time as the executor does per server. The
// token may have 8 requests in flight (its stream is one of them), so at most 7 calls are
// accepted and the rest are refused with 429, and another token's call does not wait behind
// them. Once their results are written, the token's slots are free again.
func TestSSEFloodKeepsToTheTokensSlots(t *testing.T) {
	const (
		flood = "flood-token-0123456789"
		other = "other-token-0123456789"
		wait  = 400 * time.Millisecond
	)
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.slow")), harnessOptions{
		tokens: "flood:" + flood + ",other:" + other,
		auth:   auth.Config{MaxInFlight: 8},
	})
	h.tools.mu.Lock()
	h.tools.wait, h.tools.slots = wait, make(chan struct{}, 16)
	h.tools.mu.Unlock()
	s := openSSE(t, h.url, flood)
	s.initialize(t)

	type answer struct {
		code int
		body string
		err  error
	}
	answers := make([]answer, 48)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			code, body, err := postMessage(s.endpoint, flood, callBody(fmt.Sprint(i+1), "srv__slow"))
			answers[i] = answer{code, body, err}
		})
	}
	wg.Wait()
	accepted := 0
	for i, a := range answers {
		switch {
		case a.err != nil:
			t.Fatalf("call %d: %v", i+1, a.err)
		case a.code == http.StatusAccepted:
			accepted++
		case a.code != http.StatusTooManyRequests || !strings.Contains(a.body, "in flight"):
			t.Errorf("call %d: %d %s, want 202, or 429 saying the token has too many requests in flight", i+1, a.code, a.body)
		}
	}
	if accepted == 0 || accepted > 7 {
		t.Errorf("%d of 48 calls accepted; want 1 to 7 (8 requests in flight for the token, its stream one of them)", accepted)
	}

	// Calls sent before this one would finish in rounds of 16 and the other token's call
	// would wait behind two more rounds (800 ms more); allow for a slow machine besides.
	c := h.connect(t, CatalogPath, mcp.LATEST_PROTOCOL_VERSION, other)
	start := time.Now()
	if res, err := call(t, c, "srv__slow", nil); err != nil || res.IsError {
		t.Fatalf("the other token's call: %q, %v", text(res), err)
	}
	took := time.Since(start)
	t.Logf("%d of 48 calls accepted; the other token's call took %s", accepted, took.Round(time.Millisecond))
	if took > wait+250*time.Millisecond {
		t.Errorf("the other token's call took %s beside %d accepted SSE calls; want under %s (its own %s + 250 ms)", took, accepted, wait+250*time.Millisecond, wait)
	}

	s.waitResults(t, accepted, 10*time.Second)
	// The results are written: the token's slots are free for new calls.
	for i := range 7 {
		if code, body, err := postMessage(s.endpoint, flood, callBody(fmt.Sprint(100+i), "srv__slow")); err != nil || code != http.StatusAccepted {
			t.Fatalf("call %d after the results were written: %d %s %v, want 202", i+1, code, body, err)
		}
	}
	s.waitResults(t, accepted+7, 10*time.Second)
}

// TestSSESessionCap: without tokens there is no limit per token, so a session's calls are
// capped on their own (--api.mcp-sse-max-calls): past the cap a call is refused with 429 and a
// JSON-RPC error naming the limit, while notifications still go through; once results are
// written, calls are accepted again. Ids may be numbers or strings.
func TestSSESessionCap(t *testing.T) {
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.slow")), harnessOptions{cfg: Config{SSEMaxCalls: 3}})
	block := make(chan struct{})
	h.tools.mu.Lock()
	h.tools.block, h.tools.canceled = block, make(chan struct{})
	h.tools.mu.Unlock()
	s := openSSE(t, h.url, "")
	s.initialize(t)
	for _, id := range []string{"1", `"two"`, "3"} {
		if code, body, err := postMessage(s.endpoint, "", callBody(id, "srv__slow")); err != nil || code != http.StatusAccepted {
			t.Fatalf("call %s: %d %s %v, want 202", id, code, body, err)
		}
	}
	code, body, err := postMessage(s.endpoint, "", callBody(`"four"`, "srv__slow"))
	if err != nil {
		t.Fatal(err)
	}
	var refusal struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if code != http.StatusTooManyRequests || json.Unmarshal([]byte(body), &refusal) != nil || refusal.JSONRPC != "2.0" ||
		refusal.ID != "four" || refusal.Error.Code == 0 || !strings.Contains(refusal.Error.Message, "mcp-sse-max-calls") {
		t.Errorf("a fourth call: %d %s; want 429 with a JSON-RPC error for id \"four\" naming --api.mcp-sse-max-calls", code, body)
	}
	note := `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`
	if code, body, err := postMessage(s.endpoint, "", note); err != nil || code != http.StatusAccepted {
		t.Errorf("a notification at the cap: %d %s %v, want 202", code, body, err)
	}
	close(block)
	s.waitResults(t, 3, 10*time.Second)
	for _, id := range []string{"5", `"six"`, "7"} {
		if code, body, err := postMessage(s.endpoint, "", callBody(id, "srv__slow")); err != nil || code != http.StatusAccepted {
			t.Fatalf("call %s after the results were written: %d %s %v, want 202", id, code, body, err)
		}
	}
	s.waitResults(t, 6, 10*time.Second)
}

// TestSSECloseCancelsCalls: closing the SSE socket ends the context of every call of its
// session that is still running (mcp-go runs them detached from their POST), and gives their
// token its slots back.
func TestSSECloseCancelsCalls(t *testing.T) {
	const token = "me-token-0123456789abc"
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.slow")), harnessOptions{
		tokens: "me:" + token, auth: auth.Config{MaxInFlight: 4},
	})
	h.tools.mu.Lock()
	h.tools.wait = time.Minute
	h.tools.mu.Unlock()
	s := openSSE(t, h.url, token)
	s.initialize(t)
	for i := range 3 {
		if code, body, err := postMessage(s.endpoint, token, callBody(fmt.Sprint(i+1), "srv__slow")); err != nil || code != http.StatusAccepted {
			t.Fatalf("call %d: %d %s %v, want 202", i+1, code, body, err)
		}
	}
	eventually.True(t, 5*time.Second, "3 calls running", func() bool { return h.tools.running.Load() == 3 })
	s.close()
	eventually.True(t, 5*time.Second, "the 3 calls' contexts ended with the stream", func() bool { return h.tools.ended.Load() == 3 })
	// The 3 calls and the stream held the token's 4 slots; a new stream and call need 2.
	h.tools.mu.Lock()
	h.tools.wait = 0
	h.tools.mu.Unlock()
	c := h.connectSSE(t, token)
	if res, err := call(t, c, "srv__slow", nil); err != nil || text(res) != "ok srv.slow" {
		t.Errorf("a call once the stream closed: %q, %v", text(res), err)
	}
}

// callBody is a tools/call of tool with the JSON id.
func callBody(id, tool string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q}}`, id, tool)
}

// postMessage posts body to an SSE session's message endpoint with token ("" none); unlike
// post it may be called from any goroutine.
func postMessage(url, token, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// rawSSE is a legacy SSE stream read by hand, so that a test can post what it likes to its
// session and close its socket.
type rawSSE struct {
	endpoint string // the session's message URL
	token    string
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	answers map[string]bool // JSON id of each response read → whether it was a result (not an error)
}

// openSSE opens GET /sse with token and reads the endpoint event.
func openSSE(t *testing.T, base, token string) *rawSSE {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+SSEPath, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET %s: %d %s", SSEPath, resp.StatusCode, b)
	}
	s := &rawSSE{token: token, cancel: cancel, done: make(chan struct{}), answers: map[string]bool{}}
	endpoint := make(chan string, 1)
	go func() {
		defer close(s.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var event string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:"):
				data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
				if event == "endpoint" {
					endpoint <- data
					continue
				}
				var m struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
					Result json.RawMessage `json:"result"`
				}
				if json.Unmarshal([]byte(data), &m) == nil && m.Method == "" && len(m.ID) > 0 {
					s.mu.Lock()
					s.answers[string(m.ID)] = m.Result != nil
					s.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(s.close)
	select {
	case e := <-endpoint:
		s.endpoint = base + e
	case <-time.After(10 * time.Second):
		t.Fatal("no endpoint event within 10 s")
	}
	return s
}

// initialize runs the 2025-06-18 handshake on the session (id 0).
func (s *rawSSE) initialize(t *testing.T) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcpface-test","version":"0"}}}`
	if code, b, err := postMessage(s.endpoint, s.token, body); err != nil || code != http.StatusAccepted {
		t.Fatalf("initialize: %d %s %v", code, b, err)
	}
	eventually.True(t, 10*time.Second, "the initialize result", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.answers["0"]
	})
	if code, b, err := postMessage(s.endpoint, s.token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || code != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s %v", code, b, err)
	}
}

// waitResults waits until n results (besides initialize's) have been read from the stream.
func (s *rawSSE) waitResults(t *testing.T, n int, within time.Duration) {
	t.Helper()
	eventually.True(t, within, fmt.Sprintf("%d results on the stream", n), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		got := 0
		for id, ok := range s.answers {
			if ok && id != "0" {
				got++
			}
		}
		return got >= n
	})
}

// close closes the stream's socket and waits for its reader.
func (s *rawSSE) close() {
	s.cancel()
	<-s.done
}
