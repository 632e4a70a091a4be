package inference

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/modelfetch/hubtest"
)

// fakeBinDir puts an executable named llama-server (never run here) in a folder that becomes
// the whole PATH, or an empty folder when present is false.
func fakeBinDir(t *testing.T, present bool) string {
	t.Helper()
	dir := t.TempDir()
	if present {
		if err := os.WriteFile(filepath.Join(dir, "llama-server"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	return dir
}

func defaultConfig(t *testing.T) Config {
	t.Helper()
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
	cfg.Server.ModelsDir = t.TempDir()
	return cfg
}

// pullDefault puts the default model (tiny bytes under its pinned coordinates) into the cache
// through the hub double, as `toolmesh model pull` would.
func pullDefault(t *testing.T, cfg *Config) {
	t.Helper()
	k, _ := modelfetch.Lookup(modelfetch.Default)
	// The hub the service asks (its config's, not the environment's): a file the hub's word
	// vouched for is found only for the hub it came from.
	hub := hubtest.New(t)
	hub.File(k.Repo, k.Revision, k.File, []byte("GGUF not really"), true)
	cfg.Server.Hub = modelfetch.Hub{Endpoint: hub.URL}
	if _, err := cfg.Server.Hub.Fetcher(nil).Pull(context.Background(), modelfetch.Cache{Dir: cfg.Server.ModelsDir}, k.Ref()); err != nil {
		t.Fatal(err)
	}
}

func TestBackendChoice(t *testing.T) {
	t.Run("a llama-server the user runs", func(t *testing.T) {
		cfg := defaultConfig(t)
		cfg.LLM.URL = "http://127.0.0.1:9"
		b, err := newBackend(cfg, nil)
		if err != nil || b.sup != nil || b.url != cfg.LLM.URL || b.name != modelfetch.Default {
			t.Fatalf("backend %+v, %v; want the URL given, named %s", b, err, modelfetch.Default)
		}
		if fix := b.fix(); !strings.Contains(fix, "start llama-server at http://127.0.0.1:9") || !strings.Contains(fix, upDefault) {
			t.Errorf("fix %q", fix)
		}
	})
	t.Run("nothing pulled", func(t *testing.T) {
		fakeBinDir(t, true)
		b, err := newBackend(defaultConfig(t), nil)
		if err != nil || b.sup != nil || b.url != FallbackURL || !strings.Contains(b.why, "is not pulled") {
			t.Fatalf("backend %+v, %v; want the fallback URL because the model is not pulled", b, err)
		}
		if fix := b.fix(); !strings.HasPrefix(fix, "`"+upDefault+"`") {
			t.Errorf("fix %q, want it to start with `%s`", fix, upDefault)
		}
	})
	t.Run("no llama-server", func(t *testing.T) {
		fakeBinDir(t, false)
		cfg := defaultConfig(t)
		pullDefault(t, &cfg)
		b, err := newBackend(cfg, nil)
		if err != nil || b.sup != nil || !strings.Contains(b.why, "llama-server is not on PATH") {
			t.Fatalf("backend %+v, %v; want the fallback because llama-server is missing", b, err)
		}
		if fix := b.fix(); !strings.Contains(fix, "brew install llama.cpp") || !strings.Contains(fix, upDefault) {
			t.Errorf("fix %q", fix)
		}
	})
	t.Run("default model pulled and llama-server found", func(t *testing.T) {
		fakeBinDir(t, true)
		cfg := defaultConfig(t)
		pullDefault(t, &cfg)
		b, err := newBackend(cfg, nil)
		if err != nil || b.sup == nil {
			t.Fatalf("backend %+v, %v; want toolmesh to run llama-server without being asked", b, err)
		}
		defer b.sup.Close()
		if b.url != b.sup.URL() || !strings.Contains(b.describe(), "run by toolmesh") {
			t.Errorf("url %s, describe %q", b.url, b.describe())
		}
	})
	t.Run("model asked for, no llama-server", func(t *testing.T) {
		fakeBinDir(t, false)
		cfg := defaultConfig(t)
		cfg.Model = modelfetch.Default
		_, err := New(cfg, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "inference.llm.server-bin") || !strings.Contains(err.Error(), "install") {
			t.Errorf("New with --inference.llm.model and no llama-server: %v", err)
		}
	})
	t.Run("model file that cannot be loaded", func(t *testing.T) {
		// Refused at start, naming the file and what it is, as a missing llama-server is
		// (issue 31 item 4); it used to start and send the user to `model pull FILE`.
		fakeBinDir(t, true)
		dir := t.TempDir()
		html := filepath.Join(dir, "page.gguf")
		if err := os.WriteFile(html, []byte("<html>404</html>"), 0o644); err != nil {
			t.Fatal(err)
		}
		for file, want := range map[string]string{filepath.Join(dir, "missing.gguf"): "does not exist", html: "is a web page"} {
			cfg := defaultConfig(t)
			cfg.Model = file
			_, err := New(cfg, nil, nil)
			if err == nil || !strings.HasPrefix(err.Error(), "inference.llm.model: model file "+file+" "+want) {
				t.Errorf("New with --inference.llm.model %s: %v; want it refused: %s", file, err, want)
			}
		}
	})
	t.Run("bad model reference", func(t *testing.T) {
		cfg := defaultConfig(t)
		cfg.Model = "hf://acme/m/m.gguf"
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "inference.llm.model: ") {
			t.Errorf("Validate: %v", err)
		}
	})
}

// TestBackendHidesCredentials: the backend's description (the `up` banner's inference line)
// masks credentials in the URL of a llama-server or OpenAI-compatible server the user runs
// (issue 26 item 8).
func TestBackendHidesCredentials(t *testing.T) {
	const u = "https://user:S3CRET@gpu.example:8443/?api_key=S3CRET"
	for name, cfg := range map[string]func(*Config){
		"llama-server": func(c *Config) { c.LLM.URL = u },
		"openai": func(c *Config) {
			c.Backend, c.ChatURL, c.ChatModel = "openai", "https://user:S3CRET@gpu.example:8443/v1", "m"
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := defaultConfig(t)
			cfg(&c)
			s, err := New(c, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Backend(); strings.Contains(got, "S3CRET") || !strings.Contains(got, "gpu.example:8443") {
				t.Errorf("Backend() = %q; want the server's address without its credentials", got)
			}
		})
	}
}

// TestManagedModel pulls the tiny model from the hub double (its config's Hub), runs the real
// llama-server on it and answers a Generate; it skips without TOOLMESH_LLAMA_SERVER.
func TestManagedModel(t *testing.T) {
	bin := llamatest.ServerBin(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	hub := hubtest.New(t)
	hub.File("acme/tiny", commit, "tiny.gguf", llamatest.TinyModelBytes(t, llamatest.TinyModel{}), true)

	cfg := defaultConfig(t)
	cfg.Server.Hub = modelfetch.Hub{Endpoint: hub.URL}
	cfg.Model = "hf://acme/tiny/tiny.gguf@" + commit
	cfg.Server.Bin = bin
	cfg.LLM.NPredict = 32
	s, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var st *toolmeshv1.GetModelStatusResponse
	eventually.Check(t, 60*time.Second, "model ready", func() string {
		st, err = s.GetModelStatus(ctx, &toolmeshv1.GetModelStatusRequest{})
		if err != nil {
			return err.Error()
		}
		if !st.GetReady() {
			return st.GetMessage()
		}
		return ""
	})
	if st.GetModel() != "tiny" || st.GetContextSize() != 4096 || st.GetFix() != "" {
		t.Errorf("status %v, want model tiny with a 4096-token slot", st)
	}
	out, err := s.Generate(ctx, &toolmeshv1.GenerateRequest{Query: "What is 2 plus 3?", Tools: calcTools(t)})
	if err != nil {
		t.Fatalf("Generate on the managed llama-server: %v", err)
	}
	if out.GetModel() != "tiny" || (len(out.GetCalls()) == 0 && out.GetAnswer() == "") {
		t.Errorf("Generate = %v, want calls or an answer from model tiny", out)
	}
}
