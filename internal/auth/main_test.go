package auth

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Test tokens. Each is at least MinTokenLen long; none of them may ever appear in a log line.
const (
	tokenCI  = "ci-secret-0123456789abcdef"
	tokenOps = "ops-secret-fedcba9876543210"
	tokenEnv = "env-secret-aaaabbbbccccdddd"
)

// logBuffer collects log output from concurrent handlers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newGuard builds a Guard for tokens "ci" and "ops" (plus env) that logs at debug into the
// returned buffer.
func newGuard(t *testing.T, cfg Config, env string) (*Guard, *logBuffer) {
	t.Helper()
	if cfg.TokensFile == "" {
		cfg.TokensFile = "testdata/tokens"
	}
	logs := &logBuffer{}
	g, err := New(cfg, env, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	return g, logs
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
