package deploy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llamatest"
)

// TestLlamaServerAsComposed starts a real llama-server (TOOLMESH_LLAMA_SERVER, from
// ./scripts/llamaserver; skipped without one) with compose.yaml's llama-server arguments, a tiny
// model with Gorilla's 4096-token context in place of Gorilla, and loopback in place of
// 0.0.0.0:8080: the arguments are accepted, every slot gets the whole 4096-token window, and
// /metrics and the model alias are served.
func TestLlamaServerAsComposed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts llama-server; skipped with -short")
	}
	args := readComposeCommands(t)["llama-server"].Command
	ctxSize, _ := flagValue(args, "c")
	slots, _ := flagValue(args, "np")
	c, err1 := strconv.Atoi(ctxSize)
	np, err2 := strconv.Atoi(slots)
	if err1 != nil || err2 != nil {
		t.Fatalf("llama-server -c %q -np %q", ctxSize, slots)
	}
	// StartServer gives -m (the tiny model), --host, --port, -c and -np itself.
	var extra []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-m", "--model", "--host", "--port", "-c", "--ctx-size", "-np", "--parallel":
			i++
			continue
		}
		extra = append(extra, args[i])
	}
	s := llamatest.StartServer(t, llamatest.ServerOptions{CtxSize: c, Parallel: np, Args: extra,
		Model: llamatest.TinyModel{ContextLength: gorillaContext}})

	var props struct {
		TotalSlots int `json:"total_slots"`
		Defaults   struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	getJSON(t, s.URL+"/props", &props)
	if props.TotalSlots != np || props.Defaults.NCtx != gorillaContext {
		t.Errorf("/props: %d slots of %d tokens, want %d slots of %d (compose: -c %d -np %d)",
			props.TotalSlots, props.Defaults.NCtx, np, gorillaContext, c, np)
	}
	if slices.Contains(args, "--metrics") {
		if body := getText(t, s.URL+"/metrics"); !strings.Contains(body, "llamacpp:") {
			t.Errorf("/metrics does not look like llama-server's:\n%.300s", body)
		}
	}
	if alias, ok := flagValue(args, "alias"); ok {
		var models struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		getJSON(t, s.URL+"/v1/models", &models)
		var ids []string
		for _, m := range models.Data {
			ids = append(ids, m.ID)
		}
		if !slices.Contains(ids, alias) {
			t.Errorf("/v1/models = %v, want the alias %q", ids, alias)
		}
	}
}
