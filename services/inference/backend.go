package inference

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/toolmesh/toolmesh/internal/llamaserver"
	"github.com/toolmesh/toolmesh/internal/model"
	"github.com/toolmesh/toolmesh/internal/redact"
)

// backend is the llama-server the service talks to: one the user runs (LLM.URL), one toolmesh
// runs itself (sup), or FallbackURL when neither is configured and toolmesh cannot run one.
type backend struct {
	url  string
	name string // the model's name in logs, spans and answers
	ref  model.Ref
	sup  *llamaserver.Supervisor
	// why says, for the fallback, why toolmesh does not run llama-server itself.
	why string
}

// upDefault is the one command that gets a user from nothing to an answering model.
const upDefault = "toolmesh up --model " + model.Default

// newBackend decides where the llama-server is. With LLM.URL it is there. With Model, toolmesh
// runs llama-server for it (pulling it first if needed) and a missing llama-server is an error.
// With neither, toolmesh runs the default model only if it is already pulled and llama-server
// is found, and otherwise looks at FallbackURL: nothing is downloaded unasked.
func newBackend(cfg Config, logger *slog.Logger) (backend, error) {
	ref, err := cfg.modelRef()
	if err != nil {
		return backend{}, fmt.Errorf("inference.llm.model: %w", err)
	}
	b := backend{ref: ref, name: ref.DisplayName()}
	if cfg.LLM.URL != "" {
		b.url = cfg.LLM.URL
		return b, nil
	}
	cache, cacheErr := cfg.Server.Cache()
	if cfg.Model == "" {
		_, binErr := llamaserver.LookPath(cfg.Server.Bin)
		pulled := false
		if cacheErr == nil {
			_, pulled, _ = cache.Lookup(ref, model.FetcherFromEnv(nil).Hub())
		}
		switch {
		case binErr != nil:
			b.why = "llama-server is not on PATH"
			if cfg.Server.Bin != "" {
				b.why = "llama-server not found at " + cfg.Server.Bin
			}
		case !pulled:
			b.why = fmt.Sprintf("%s is not pulled into %s", model.Default, cache.Dir)
		}
		if b.why != "" {
			b.url = FallbackURL
			return b, nil
		}
	}
	if cacheErr != nil {
		return backend{}, fmt.Errorf("inference.llm.models-dir: %w", cacheErr)
	}
	sup, err := llamaserver.New(llamaserver.Config{
		Bin:          cfg.Server.Bin,
		CtxSize:      cfg.Slots * cfg.CtxSize,
		Parallel:     cfg.Slots,
		GPULayers:    cfg.Server.GPULayers,
		Alias:        b.name,
		Metrics:      true,
		ReadyTimeout: cfg.LLM.ReadyTimeout,
	}, llamaserver.FromCache(ref, cache, logger), logger)
	if err != nil {
		return backend{}, fmt.Errorf("inference.llm.server-bin: %w", err)
	}
	b.sup, b.url = sup, sup.URL()
	return b, nil
}

// describe says where the model is, for the endpoints `up` prints: the URL of a llama-server
// the user runs may carry credentials (user:password@, ?api_key=), which are masked.
func (b backend) describe() string {
	switch {
	case b.sup != nil:
		return fmt.Sprintf("%s on llama-server %s, run by toolmesh", b.name, b.sup.Bin())
	case b.why != "":
		return redact.Text(fmt.Sprintf("no model yet: %s; to fix: %s", b.why, b.fix()))
	}
	return "llama-server " + redact.URL(b.url)
}

// fix is the one command that makes questions answerable, or "" when waiting is enough.
func (b backend) fix() string {
	if b.sup == nil {
		switch {
		case b.why == "":
			host, port := "127.0.0.1", "8080"
			if u, err := url.Parse(b.url); err == nil && u.Port() != "" {
				host, port = u.Hostname(), u.Port()
			}
			return fmt.Sprintf("start llama-server at %s (e.g. `llama-server -m MODEL.gguf --host %s --port %s -c 4096`), or let toolmesh run it: `%s`",
				b.url, host, port, upDefault)
		case strings.Contains(b.why, "llama-server"):
			return fmt.Sprintf("%s; then `%s`", llamaserver.InstallHint, upDefault)
		}
		return fmt.Sprintf("`%s`: it downloads the model once, verifies it and runs llama-server with it (for serve: --inference.llm.model=%s)", upDefault, model.Default)
	}
	st := b.sup.Status()
	switch st.State {
	case llamaserver.Failed:
		return fmt.Sprintf("`toolmesh model pull %s` shows the download and why it fails; then restart toolmesh", b.ref)
	case llamaserver.Restarting:
		if len(st.Command) > 0 {
			return fmt.Sprintf("run llama-server by hand to see why it stops: `%s`", strings.Join(st.Command, " "))
		}
	}
	return ""
}
