package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

// TestModelPullOffline: `toolmesh model pull` with a hub that cannot be reached ends at once
// with one line that names the host, the cause and the next step: not five retries and Go's
// `HEAD "http://…": dial tcp …` with the reference twice (issue 31 item 5).
func TestModelPullOffline(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	bin := buildBinary(t)
	cmd := exec.Command(bin, "model", "pull", modelfetch.Default)
	cmd.Env = append(os.Environ(), modelfetch.EnvEndpoint+"=http://"+closed, modelfetch.EnvDir+"="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err = cmd.Run()
	took := time.Since(began)
	if code := cmd.ProcessState.ExitCode(); code != 1 || stdout.Len() != 0 {
		t.Fatalf("model pull offline: exit %d (%v), stdout %q; want 1 and nothing", code, err, stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	want := "toolmesh model pull: " + modelfetch.Default + ": cannot reach the hub at " + closed + ": connection refused; check the network"
	if !strings.HasPrefix(last, want) || !strings.Contains(last, modelfetch.EnvEndpoint) {
		t.Errorf("last line %q; want it to start %q and name %s", last, want, modelfetch.EnvEndpoint)
	}
	for _, raw := range []string{"HEAD", "dial tcp", "/resolve/", `"`} {
		if strings.Contains(last, raw) {
			t.Errorf("last line %q holds %q", last, raw)
		}
	}
	if strings.Contains(stderr.String(), "trying again") || took > 10*time.Second {
		t.Errorf("model pull took %s:\n%s\nwant one try: nothing answers to retry", took, stderr.String())
	}
}

// TestQueryEscapesControlBytes: what the model and the tools wrote reaches the terminal with
// its control characters escaped, so an answer cannot clear the screen, set the title, rewrite
// a line or hide text; newlines and tabs stay (issue 31, "smaller").
func TestQueryEscapesControlBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	events := []*toolmeshv1.QueryStreamResponse{
		{Event: &toolmeshv1.QueryStreamResponse_ModelOutput{ModelOutput: &toolmeshv1.Step{Number: 1,
			ModelOutput: "<<function>>calculator.add(a=2, b=3)\x1b]0;pwned\x07\x1b[2J"}}},
		{Event: &toolmeshv1.QueryStreamResponse_ToolCallFinished{ToolCallFinished: &toolmeshv1.ToolCallRecord{
			Tool: "calculator.add", Output: "5\x08\x08ok \u202eevil\u202c \u009b31m", Step: 1}}},
		{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: "The sum is \x1b[31m5\x1b[0m.\r"}},
		{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: "\n\tSecond line\x7f."}},
		{Event: &toolmeshv1.QueryStreamResponse_Done{Done: &toolmeshv1.QueryResponse{
			Answer: "The sum is \x1b[31m5\x1b[0m.\r\n\tSecond line\x7f.", StopReason: toolmeshv1.StopReason_STOP_REASON_ANSWERED}}},
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/query:stream" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		for _, ev := range events {
			b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(ev)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = w.Write([]byte(`{"result":` + string(b) + "}\n"))
		}
	}))
	defer api.Close()

	bin := buildBinary(t)
	cmd := exec.Command(bin, "query", "--api", api.URL, "What is 2 plus 3?")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("toolmesh query: %v\n%s", err, stderr.String())
	}
	for what, text := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
		if i := strings.IndexFunc(text, func(r rune) bool {
			return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0) || (r >= 0x202a && r <= 0x202e)
		}); i >= 0 {
			t.Errorf("%s holds the control character %q:\n%q", what, text[i:i+1], text)
		}
	}
	if want := "The sum is \\x1b[31m5\\x1b[0m.\\r\n\tSecond line\\x7f.\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	for _, want := range []string{`\x1b]0;pwned\x07\x1b[2J`, `5\x08\x08ok \u202eevil\u202c \u009b31m`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}
