package app

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

// modelArgs are `up`'s flags for a mesh without the demo servers whose inference runs
// llama-server itself for --model: a stand-in executable, never run in these tests, since the
// model is never had.
func modelArgs(t *testing.T, extra ...string) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "llama-server")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(modelfetch.EnvDir, t.TempDir())
	return append([]string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--inference.llm.server-bin=" + bin,
	}, extra...)
}

var meshTargets = []string{"executor", "retriever", "inference", "api"}

// readyzModel is /readyz's inference section.
type readyzModel struct {
	Ready bool   `json:"ready"`
	Error string `json:"error"`
	Fix   string `json:"fix"`
}

func readyzInference(t *testing.T, base string) readyzModel {
	t.Helper()
	_, b := get(t, base+"/readyz")
	var body struct {
		Inference readyzModel `json:"inference"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("/readyz: %v: %s", err, b)
	}
	return body.Inference
}

// TestUpModelOffline is issue 31 item 3 through `up`: `--model gorilla-openfunctions-v2` with
// a hub that cannot be reached. /readyz says what failed in one clause (the hub, its address,
// the cause) and a fix that is not the command already running: a mirror (HF_ENDPOINT), a
// file at hand (--model FILE.gguf) or a running server (--llm-url). A question's 503 gives the
// same fix. The log has one warning a try, the waits doubling, and not the fetcher's five
// retries for each.
func TestUpModelOffline(t *testing.T) {
	hub := freeAddr(t)
	t.Setenv(modelfetch.EnvEndpoint, "http://"+hub)
	logs := &syncLog{}
	a, _, err := launch(t, modelArgs(t, "--model", modelfetch.Default), slog.New(slog.NewTextHandler(logs, nil)), nil, meshTargets...)
	if err != nil {
		t.Fatal(err)
	}
	base := endpoint(a, "REST")

	var st readyzModel
	eventually.Check(t, 20*time.Second, "/readyz says why there is no model", func() string {
		st = readyzInference(t, base)
		if !strings.HasPrefix(st.Error, "no model yet: ") || st.Fix == "" {
			return st.Error + " / fix: " + st.Fix
		}
		return ""
	})
	what := "no model yet: " + modelfetch.Default + ": cannot reach the hub at " + hub + ": connection refused; trying again in "
	if !strings.HasPrefix(st.Error, what) {
		t.Errorf("inference.error %q; want it to start %q", st.Error, what)
	}
	if strings.ContainsAny(st.Error, "\"\\") || strings.Contains(st.Error, "unavailable_error") || strings.Contains(st.Error, "giving up") {
		t.Errorf("inference.error %q: a nested error with escapes", st.Error)
	}
	for _, want := range []string{"the hub at " + hub + " cannot be reached (connection refused)", "`HF_ENDPOINT=URL`", "`--model FILE.gguf`", "`--llm-url URL`"} {
		if !strings.Contains(st.Fix, want) {
			t.Errorf("inference.fix %q lacks %q", st.Fix, want)
		}
	}
	if strings.Contains(st.Fix, "up --model") || strings.Contains(st.Fix, "model pull") {
		t.Errorf("inference.fix %q sends the user to the command already running", st.Fix)
	}

	// A question's 503 says the same in one layer: not llama-server's 503 quoted in another
	// error, and the fix rather than `toolmesh up --model`.
	code, b := post(t, base+"/v1/query", `{"query":"What is 2 plus 3?"}`)
	msg := decodeError(t, b).Message
	if code != 503 || !strings.Contains(msg, "(no model yet: "+modelfetch.Default+": cannot reach the hub at "+hub) ||
		!strings.Contains(msg, "to fix: the hub at "+hub+" cannot be reached (connection refused)") {
		t.Errorf("a question: %d %s; want 503 saying what failed and the fix", code, b)
	}
	for _, bad := range []string{"toolmesh up --model", "unavailable_error", "llama-server props"} {
		if strings.Contains(msg, bad) {
			t.Errorf("a question's 503 %q holds %q", msg, bad)
		}
	}

	// Tries at about 0, 1, 3 and 7 s: four warnings in 7 s, each saying the hub cannot be
	// reached, each wait about twice the one before.
	retryIn := regexp.MustCompile(`retry_in=([0-9.]+m?s)`)
	var waits []time.Duration
	eventually.Check(t, 30*time.Second, "three tries logged", func() string {
		waits = waits[:0]
		for _, l := range strings.Split(logs.String(), "\n") {
			if m := retryIn.FindStringSubmatch(l); m != nil && strings.Contains(l, "cannot get the model yet") {
				d, _ := time.ParseDuration(m[1])
				waits = append(waits, d)
			}
		}
		if len(waits) < 3 {
			return strconv.Itoa(len(waits)) + " tries so far"
		}
		return ""
	})
	text := logs.String()
	if strings.Contains(text, "model download failed; trying again") {
		t.Errorf("the fetcher retried each try itself:\n%s", text)
	}
	// The question above logged its own failed calls ("grpc call").
	if n, tries := strings.Count(text, "level=WARN")-strings.Count(text, `msg="grpc call"`), strings.Count(text, "cannot get the model yet"); n != tries {
		t.Errorf("%d warnings for %d tries:\n%s", n, tries, text)
	}
	for i := 1; i < len(waits); i++ {
		// Twice the last, each ±20%: at least 4/3 of it.
		if waits[i] < waits[i-1]*5/4 {
			t.Errorf("waits %v: want each about twice the one before", waits)
			break
		}
	}
}

// TestUpModelFile is issue 31 item 4 through `up`: a --model FILE that does not exist, or is
// not a GGUF model, stops the start with the reason, as a missing llama-server does; it used to
// start, report ready, and send the user to `model pull FILE`, which refuses a file.
func TestUpModelFile(t *testing.T) {
	dir := t.TempDir()
	pointer := filepath.Join(dir, "lfs.gguf")
	if err := os.WriteFile(pointer, []byte("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"missing", filepath.Join(dir, "missing.gguf"), "does not exist"},
		{"not GGUF", pointer, "is a Git LFS pointer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := launch(t, modelArgs(t, "--model", tc.file), nil, nil, meshTargets...)
			if err == nil {
				t.Fatal("up started")
			}
			msg := err.Error()
			if !strings.Contains(msg, "inference.llm.model: model file "+tc.file+" "+tc.want) || !strings.Contains(msg, "--model") {
				t.Errorf("up: %v; want the file, what is wrong with it, and --model", err)
			}
			if strings.Contains(msg, "model pull "+tc.file) {
				t.Errorf("up: %v; sends the user to pull a file", err)
			}
		})
	}
}

// TestAgentHealthFollowsModel: the api's gRPC health says AgentService NOT_SERVING while no
// model answers its questions, as /readyz does, and SERVING once one does; ToolService
// (search, direct calls) is SERVING throughout (issue 31, "smaller").
func TestAgentHealthFollowsModel(t *testing.T) {
	const agent, tools = "toolmesh.v1.AgentService", "toolmesh.v1.ToolService"
	d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
	d.Loading(1<<30, false) // the model loads until told otherwise
	args := []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0", "--drain-timeout=2s", "--llm-url=" + d.URL}
	a, _ := runApp(t, args, meshTargets...)
	addr := endpoint(a, "api gRPC")
	time.Sleep(2 * modelPoll)
	if got := serviceHealth(t, addr, agent); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("AgentService with no model: %s, want NOT_SERVING", got)
	}
	if got := serviceHealth(t, addr, tools); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("ToolService with no model: %s, want SERVING", got)
	}
	d.Loading(0, false)
	eventually.Check(t, 20*time.Second, "AgentService SERVING once the model answers", func() string {
		if got := serviceHealth(t, addr, agent); got != healthpb.HealthCheckResponse_SERVING {
			return got.String()
		}
		return ""
	})
}

// TestConsoleModelOffline: the console's banner, on every page, says the hub cannot be reached
// and what to do, not a nested error with escapes (issue 31 item 3).
func TestConsoleModelOffline(t *testing.T) {
	browser := startBrowser(t)
	hub := freeAddr(t)
	t.Setenv(modelfetch.EnvEndpoint, "http://"+hub)
	a, _, err := launch(t, modelArgs(t, "--model", modelfetch.Default), nil, nil, meshTargets...)
	if err != nil {
		t.Fatal(err)
	}
	p := openPage(t, browser, endpoint(a, "REST")+"/ui/")
	p.wait("the model's state", `!!document.querySelector('#mesh [data-part="model"] .fix')`)
	banner := eval[string](p, `document.querySelector('#mesh [data-part="model"]').textContent.replace(/\s+/g, ' ').trim()`)
	want := "model not ready Questions need it. To fix: the hub at " + hub + " cannot be reached (connection refused): restart toolmesh with HF_ENDPOINT=URL"
	if !strings.HasPrefix(banner, want) || strings.ContainsAny(banner, "\"\\`") {
		t.Errorf("banner %q; want it to start %q, without quotes, escapes or backticks", banner, want)
	}
	if got := eval[[]string](p, `[...document.querySelectorAll('#mesh .fix code')].map(c => c.textContent)`); !slices.Equal(got, []string{"HF_ENDPOINT=URL", "--model FILE.gguf", "--llm-url URL"}) {
		t.Errorf("the fix's commands set as code: %q", got)
	}
	p.close()
}
