package mcpbridge

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// endpoint is a stand-in for an MCP endpoint that records the headers of each POST and answers
// with answer (status, content type, body).
type endpoint struct {
	mu      sync.Mutex
	headers []http.Header
	answer  func(body string) (int, string, string)
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	b, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.headers = append(e.headers, r.Header.Clone())
	e.mu.Unlock()
	status, ct, body := e.answer(string(b))
	w.Header().Set("Content-Type", ct)
	if strings.Contains(string(b), `"initialize"`) {
		w.Header().Set("Mcp-Session-Id", "s-1")
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// TestRelay: requests go out with the token, the session id and the negotiated version; JSON
// and SSE answers come back one line each; a refusal is a JSON-RPC error that says what to do.
func TestRelay(t *testing.T) {
	e := &endpoint{answer: func(body string) (int, string, string) {
		switch {
		case strings.Contains(body, `"initialize"`):
			return 200, "application/json", "{\n \"jsonrpc\": \"2.0\", \"id\": 1,\n \"result\": {\"protocolVersion\": \"2025-11-25\"}}"
		case strings.Contains(body, `"tools/list"`):
			return 200, "text/event-stream", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n" +
				"data: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[]}}\n\n"
		case strings.Contains(body, `"notifications/initialized"`):
			return 202, "application/json", ""
		}
		return 401, "application/json", `{"code":16,"message":"no API token"}`
	}}
	ts := httptest.NewServer(e)
	defer ts.Close()
	stdin := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
	}, "\n") + "\n"
	out := &lockedBuf{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := New(Config{URL: ts.URL, Token: "secret"}, nil)
	// One line at a time, each after the last has been answered, as a client does.
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, r, out) }()
	lines := strings.SplitAfter(stdin, "\n")
	for _, l := range lines[:1] {
		_, _ = io.WriteString(w, l)
	}
	waitFor(t, out, `"protocolVersion":"2025-11-25"`)
	for _, l := range lines[1:] {
		_, _ = io.WriteString(w, l)
	}
	waitFor(t, out, `"id":2`)
	_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}`+"\n")
	waitFor(t, out, `"id":3`)
	_ = w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress"}`, `{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}`}
	for i, w := range want {
		if i >= len(got) || got[i] != w {
			t.Errorf("line %d = %q, want %q", i, at(got, i), w)
		}
	}
	if last := at(got, 3); !strings.Contains(last, `"id":3`) || !strings.Contains(last, "401") || !strings.Contains(last, "TOOLMESH_TOKEN") || !strings.Contains(last, "no API token") {
		t.Errorf("the refused call's answer = %q, want a JSON-RPC error naming 401, the endpoint's message and TOOLMESH_TOKEN", last)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, h := range e.headers {
		if h.Get("Authorization") != "Bearer secret" {
			t.Errorf("POST %d: Authorization %q", i, h.Get("Authorization"))
		}
		if i > 0 && (h.Get("Mcp-Session-Id") != "s-1" || h.Get("Mcp-Protocol-Version") != "2025-11-25") {
			t.Errorf("POST %d: session %q, version %q; want s-1 and 2025-11-25", i, h.Get("Mcp-Session-Id"), h.Get("Mcp-Protocol-Version"))
		}
	}
}

// lockedBuf is stdout as the test reads it while the bridge writes.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuf) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func waitFor(t *testing.T, out *lockedBuf, s string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(out.String(), s) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s on stdout within 5 s: %s", s, out.String())
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// TestEndpointDown: with nothing listening at the URL, every request is answered with a
// JSON-RPC error that names the URL and says what to do, and the log says it once, not once a
// request.
func TestEndpointDown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + lis.Addr().String() + "/mcp"
	_ = lis.Close()
	var logs lockedBuf
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := New(Config{URL: url, Unreachable: "is `toolmesh up` running?"}, logger)
	stdin := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"prompts/list"}`,
	}, "\n") + "\n"
	out := &lockedBuf{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Run(ctx, strings.NewReader(stdin), out); err != nil {
		t.Fatal(err)
	}
	answers := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(answers) != 3 {
		t.Fatalf("stdout has %d lines, want an answer to each of the 3 requests: %s", len(answers), out.String())
	}
	for _, a := range answers {
		var m struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(a), &m); err != nil {
			t.Fatalf("answer %q: %v", a, err)
		}
		if want := "cannot reach " + url + " (connect: connection refused): is `toolmesh up` running?"; !strings.Contains(m.Error.Message, want) {
			t.Errorf("answer %q does not say %q", m.Error.Message, want)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "is `toolmesh up` running?") {
		t.Errorf("%d WARN lines, want one saying what to do:\n%s", n, logs.String())
	}
}
