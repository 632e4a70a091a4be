package llamaserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamaserver"
	"github.com/toolmesh/toolmesh/internal/llamatest"
)

// superviseReal runs a supervisor of the real llama-server (llamatest.ServerBin) on the tiny
// random-weight model.
func superviseReal(t *testing.T, cfg llamaserver.Config) *running {
	t.Helper()
	bin := llamatest.ServerBin(t)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := llamatest.WriteTinyModelFile(model, llamatest.TinyModel{}); err != nil {
		t.Fatal(err)
	}
	cfg.Bin, cfg.Threads = bin, 1
	cfg.BackoffMin, cfg.BackoffMax = 50*time.Millisecond, time.Second
	logs := &syncBuffer{}
	s, err := llamaserver.New(cfg, func(context.Context, func(string)) (string, error) { return model, nil },
		slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Supervisor: s, logs: logs, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); _ = s.Run(ctx) }()
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs.String())
		}
	})
	return r
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

// TestRealLlamaServer: the real llama-server under the supervisor loads, completes through
// the stable URL, is restarted after kill -9 (the wrapper script execs the server, so the pid
// killed is the server's), and is gone after a stop.
func TestRealLlamaServer(t *testing.T) {
	r := superviseReal(t, llamaserver.Config{CtxSize: 4096, Parallel: 1, Metrics: true, Alias: "tiny", GPULayers: "auto"})
	first := waitState(t, r.Supervisor, llamaserver.Ready)
	complete := func() {
		t.Helper()
		code, out := post(t, r.URL()+"/completion", `{"prompt":"Hello","n_predict":4}`)
		if _, ok := out["content"].(string); code != http.StatusOK || !ok {
			t.Fatalf("POST /completion = %d %v", code, out)
		}
	}
	complete()
	if code, body := get(t, r.URL()+"/metrics"); code != http.StatusOK || !strings.Contains(body, "llamacpp:") {
		t.Errorf("GET /metrics = %d %.200s", code, body)
	}
	if !strings.Contains(r.logs.String(), "pid="+strconv.Itoa(first.PID)) {
		t.Error("no llama-server log line was forwarded")
	}

	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, 30*time.Second, "restarted", func() string {
		if st := r.Status(); st.State != llamaserver.Ready || st.PID == first.PID {
			return st.State.String() + ": " + st.Message
		}
		return ""
	})
	complete()
	second := r.Status().PID
	r.stop()
	for _, pid := range []int{first.PID, second} {
		if alive(pid) {
			t.Errorf("llama-server %d still runs after the stop", pid)
		}
	}
}

// TestRealLlamaServerEmbedding: --embedding on the tiny model serves /v1/embeddings.
func TestRealLlamaServerEmbedding(t *testing.T) {
	r := superviseReal(t, llamaserver.Config{Embedding: true})
	waitState(t, r.Supervisor, llamaserver.Ready)
	code, out := post(t, r.URL()+"/v1/embeddings", `{"input":["add two numbers","convert celsius"],"model":"tiny"}`)
	data, _ := out["data"].([]any)
	if code != http.StatusOK || len(data) != 2 {
		t.Fatalf("POST /v1/embeddings = %d %v", code, out)
	}
}
