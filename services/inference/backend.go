package inference

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/llamaserver"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/redact"
)

// backend is the llama-server the service talks to: one the user runs (LLM.URL), one toolmesh
// runs itself (sup), or FallbackURL when neither is configured and toolmesh cannot run one.
type backend struct {
	url  string
	name string // the model's name in logs, spans and answers
	ref  modelfetch.Ref
	sup  *llamaserver.Supervisor
	// why says, for the fallback, why toolmesh does not run llama-server itself.
	why string
}

// upDefault is the one command that gets a user from nothing to an answering model.
const upDefault = "toolmesh up --model " + modelfetch.Default

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
	if ref.Local() {
		// Refused at start, as a missing llama-server is: a mesh that came up "ready" with a
		// model it can never load only says so in a log line and on /readyz.
		if err := modelfetch.CheckFile(ref.Path); err != nil {
			return backend{}, fmt.Errorf("inference.llm.model: %w; give --model (--inference.llm.model) a .gguf file, or a model to pull such as %s",
				err, modelfetch.Default)
		}
	}
	cache, cacheErr := cfg.Server.Cache()
	if cfg.Model == "" {
		_, binErr := llamaserver.LookPath(cfg.Server.Bin)
		pulled := false
		if cacheErr == nil {
			_, pulled, _ = cache.Lookup(ref, cfg.Server.Hub.Fetcher(nil).Hub())
		}
		switch {
		case binErr != nil:
			b.why = "llama-server is not on PATH"
			if cfg.Server.Bin != "" {
				b.why = "llama-server not found at " + cfg.Server.Bin
			}
		case !pulled:
			b.why = fmt.Sprintf("%s is not pulled into %s", modelfetch.Default, cache.Dir)
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
	}, llamaserver.FromCache(ref, cache, cfg.Server.Hub, logger), logger)
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

// notReady says why the model does not answer, health being the error of its /health. The
// supervisor of a llama-server toolmesh runs knows best, in its own words: through the proxy
// its message came back as a 503 quoted inside another error.
func (b backend) notReady(health error) string {
	if b.sup != nil {
		if st := b.sup.Status(); st.State != llamaserver.Ready {
			return st.Message
		}
	}
	if b.why != "" {
		return b.why + "; " + health.Error()
	}
	return health.Error()
}

// unavailable is the error of a question asked while the llama-server toolmesh runs is not
// ready, in the supervisor's words ("no model yet: …", "Loading model: downloading …"), or
// nil when it is ready or the user runs the server. Asked through the proxy, the same news
// came back as llama-server's 503 quoted inside the client's error.
func (b backend) unavailable() error {
	if b.sup == nil {
		return nil
	}
	st := b.sup.Status()
	switch st.State {
	case llamaserver.Ready:
		return nil
	case llamaserver.Preparing, llamaserver.Loading:
		// Retrying soon helps: the api says "still loading".
		return errreason.Error(codes.Unavailable, errreason.NotReady, st.Message)
	}
	return errreason.Error(codes.Unavailable, errreason.BackendUnavailable, st.Message)
}

// otherModel is what a user can do instead of waiting for the hub: each is a restart.
const otherModel = "restart toolmesh with `HF_ENDPOINT=URL` naming a mirror of the hub, with `--model FILE.gguf` for a model file you have, " +
	"or with `--llm-url URL` for a llama-server you run (in serve: --inference.llm.model, --inference.llm.url)"

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
		return fmt.Sprintf("`%s`: it downloads the model once, verifies it and runs llama-server with it (for serve: --inference.llm.model=%s)", upDefault, modelfetch.Default)
	}
	st := b.sup.Status()
	var unreachable *modelfetch.UnreachableError
	switch {
	case st.State == llamaserver.Failed && b.ref.Local():
		// `model pull` refuses a file: the file itself is what to fix.
		return fmt.Sprintf("%s cannot be loaded (the error says why): restart toolmesh with --model naming a .gguf file, or a model to pull such as %s",
			b.ref.Path, modelfetch.Default)
	case st.State == llamaserver.Failed:
		return fmt.Sprintf("`toolmesh model pull %s` shows the download and why it fails; then restart toolmesh", b.ref)
	case st.State == llamaserver.Restarting && st.ModelPath == "" && errors.As(st.Err, &unreachable):
		// Not `toolmesh up --model …`: that is the command already running.
		return fmt.Sprintf("%s cannot be reached (%s): %s; or wait: toolmesh tries the hub again by itself", unreachable.Server, unreachable.Cause, otherModel)
	case st.State == llamaserver.Restarting && st.ModelPath == "":
		return "pulling the model failed (the error says why): " + otherModel + "; or wait: toolmesh tries again by itself"
	case st.State == llamaserver.Restarting:
		if len(st.Command) > 0 {
			return fmt.Sprintf("run llama-server by hand to see why it stops: `%s`", strings.Join(st.Command, " "))
		}
	}
	return ""
}
