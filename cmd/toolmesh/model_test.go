package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/modelfetch/hubtest"
)

// childPIDs lists the processes whose parent is ppid (Linux /proc).
func childPIDs(t *testing.T, ppid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(ppid) && fields[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	return !strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z")
}

// inferenceReady reads /readyz's model section.
func inferenceReady(t *testing.T, base string) (bool, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var body struct {
		Inference struct {
			Ready bool   `json:"ready"`
			Error string `json:"error"`
			Fix   string `json:"fix"`
		} `json:"inference"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return body.Inference.Ready, body.Inference.Error + " / fix: " + body.Inference.Fix
}

// askTwoPlusThree runs `toolmesh query --json "What is 2 plus 3?"`: the tiny model's text is
// noise, so the loop ends answered or at its step limit; what is checked is that it runs.
func askTwoPlusThree(t *testing.T, bin, base string) {
	t.Helper()
	cmd := exec.Command(bin, "query", "--json", "--max-iterations", "3", "--api", base, "What is 2 plus 3?")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var out struct {
		StopReason string `json:"stop_reason"`
		Iterations int    `json:"iterations"`
	}
	if jerr := json.Unmarshal(stdout.Bytes(), &out); jerr != nil {
		t.Fatalf("toolmesh query: %v (%v)\nstdout %s\nstderr %s", err, jerr, stdout.String(), stderr.String())
	}
	if !slices.Contains([]string{"STOP_REASON_ANSWERED", "STOP_REASON_MAX_ITERATIONS"}, out.StopReason) || out.Iterations < 1 {
		t.Fatalf("toolmesh query: stop reason %s after %d steps (%v)\n%s\n%s; want answered or max iterations",
			out.StopReason, out.Iterations, err, stdout.String(), stderr.String())
	}
}

// TestUpRunsTheModel is the check with the real llama-server (llamatest.ServerBin, put
// on PATH) and the tiny GGUF served by the hub double through HF_ENDPOINT:
// `toolmesh up --model hf://...` pulls it, starts llama-server, becomes ready and answers; a
// kill -9 of llama-server is repaired and the next question works; Ctrl-C leaves no llama-server.
func TestUpRunsTheModel(t *testing.T) {
	server := llamatest.ServerBin(t)
	if filepath.Base(server) != "llama-server" {
		t.Skipf("the llama-server installed is %s, not named llama-server, so it cannot be found on PATH", server)
	}
	tiny := llamatest.TinyModelBytes(t, llamatest.TinyModel{})
	const commit = "0123456789abcdef0123456789abcdef01234567"
	hub := hubtest.NewFromEnv(t)
	hub.File("acme/tiny-gguf", commit, "tiny.gguf", tiny, true)
	models := t.TempDir()
	t.Setenv(modelfetch.EnvDir, models)
	t.Setenv("PATH", filepath.Dir(server)+string(os.PathListSeparator)+os.Getenv("PATH"))

	bin := buildBinary(t)
	ref := "hf://acme/tiny-gguf/tiny.gguf@" + commit
	up, base := startUp(t, bin, "--model", ref)
	eventually.Check(t, 60*time.Second, "the model ready", func() string {
		if ok, why := inferenceReady(t, base); !ok {
			return why
		}
		return ""
	})
	cached := modelfetch.Cache{Dir: models}.FilePath("acme/tiny-gguf", commit, "tiny.gguf")
	if got, err := os.ReadFile(cached); err != nil || !bytes.Equal(got, tiny) {
		t.Fatalf("the model was not pulled into %s: %v", cached, err)
	}
	children := childPIDs(t, up.cmd.Process.Pid)
	if len(children) != 1 {
		t.Fatalf("toolmesh up has children %v, want one llama-server", children)
	}
	first := children[0]
	askTwoPlusThree(t, bin, base)

	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second int
	eventually.Check(t, 60*time.Second, "llama-server restarted and ready", func() string {
		kids := childPIDs(t, up.cmd.Process.Pid)
		if len(kids) != 1 || kids[0] == first {
			return fmt.Sprintf("children %v (the killed one was %d)", kids, first)
		}
		second = kids[0]
		if ok, why := inferenceReady(t, base); !ok {
			return why
		}
		return ""
	})
	askTwoPlusThree(t, bin, base)

	up.interrupt(t, 30*time.Second)
	for _, pid := range []int{first, second} {
		if processAlive(pid) {
			t.Errorf("llama-server %d still runs after toolmesh up stopped", pid)
		}
	}
}
