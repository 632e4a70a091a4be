package app

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// TestAttackSecretsInBanner: credentials in --llm-url (user:password@, ?api_key=) reach neither
// the banner `up` prints nor the log (issue 26 item 8). The log goes through the handlers the
// app puts in front of any logger it is given.
func TestAttackSecretsInBanner(t *testing.T) {
	var logs syncLog
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	args := []string{"--inference.grpc-addr=127.0.0.1:0", "--drain-timeout=1s",
		"--llm-url=http://user:S3CRET@127.0.0.1:1/?api_key=S3CRET"}
	a, stop, err := launch(t, args, logger, nil, "inference")
	if err != nil {
		t.Fatal(err)
	}
	// Inference probes the llama-server and logs its URL when it does not answer.
	eventually.Check(t, 10*time.Second, "the llama-server's probe logged", func() string {
		if !strings.Contains(logs.String(), "llama-server is not ready") {
			return logs.String()
		}
		return ""
	})
	stop()
	var inference string
	for _, e := range a.Endpoints {
		if strings.Contains(e.Addr, "S3CRET") {
			t.Errorf("banner line %s: %q shows a credential", e.Name, e.Addr)
		}
		if strings.HasPrefix(e.Name, "inference") {
			inference = e.Addr
		}
	}
	if !strings.Contains(inference, "llama-server http://REDACTED@127.0.0.1:1/") {
		t.Errorf("inference banner line %q; want the llama-server's address, credentials masked", inference)
	}
	if strings.Contains(logs.String(), "S3CRET") {
		t.Errorf("the log shows a credential:\n%s", logs.String())
	}
}
