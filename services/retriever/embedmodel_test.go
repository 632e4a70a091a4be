package retriever

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/modelfetch/hubtest"
	"github.com/toolmesh/toolmesh/services/retriever/store/qdrant/qdranttest"
)

func TestEmbedModelRefConfig(t *testing.T) {
	base := func() Config {
		var c Config
		c.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
		return c
	}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"a known model", func(c *Config) { c.EmbedModelRef = modelfetch.DefaultEmbedding }, ""},
		{"with the http embedder and no URL", func(c *Config) { c.EmbedModelRef = modelfetch.DefaultEmbedding; c.Embedder = "http" }, ""},
		{"and a URL too", func(c *Config) { c.EmbedModelRef = modelfetch.DefaultEmbedding; c.EmbedURL = "http://x:1" }, "give one"},
		{"not a reference", func(c *Config) { c.EmbedModelRef = "hf://a/b/c.gguf" }, "retriever.embed.model-ref: "},
		{"bad gpu layers", func(c *Config) { c.EmbedModelRef = modelfetch.DefaultEmbedding; c.EmbedServer.GPULayers = "many" }, "retriever.embed.gpu-layers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(&c)
			err := c.Validate()
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// embedModelConfig is a retriever config whose embedding model, the tiny GGUF, comes from
// the hub double named in its config and runs on the real llama-server; it skips without one.
func embedModelConfig(t *testing.T) (Config, *hubtest.Hub) {
	t.Helper()
	bin := llamatest.ServerBin(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	hub := hubtest.New(t)
	hub.File("acme/tiny-embed", commit, "tiny-embed.gguf", llamatest.TinyModelBytes(t, llamatest.TinyModel{}), true)
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
	cfg.GRPCAddr, cfg.ResyncBackoffMax = "127.0.0.1:0", 200*time.Millisecond
	cfg.EmbedModelRef = "hf://acme/tiny-embed/tiny-embed.gguf@" + commit
	cfg.EmbedServer.Bin, cfg.EmbedServer.ModelsDir = bin, t.TempDir()
	cfg.EmbedServer.Hub = modelfetch.Hub{Endpoint: hub.URL}
	return cfg, hub
}

// TestEmbedModelRef: --retriever.embed.model-ref alone pulls the model, runs llama-server
// --embedding for it, and the index becomes the hybrid one (lexical fused with dense),
// named after the model.
func TestEmbedModelRef(t *testing.T) {
	cfg, _ := embedModelConfig(t)
	fake := &fakeExecutor{snapshot: demoTools(t), events: make(chan *toolmeshv1.WatchToolsResponse)}
	addr, stop := serveExecutor(t, "127.0.0.1:0", fake)
	defer stop()
	cfg.ExecutorAddr = addr
	s, err := New(context.Background(), cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer run(t, s)()
	eventually.Check(t, 60*time.Second, "index built with the embedding model", func() string {
		if ok, why := s.Ready(context.Background()); !ok {
			return why
		}
		return ""
	})
	if name := s.idx.Name(); !strings.Contains(name, "tiny-embed") {
		t.Errorf("index %q, want it to use the embedding model tiny-embed", name)
	}
	resp, err := s.SearchTools(context.Background(), &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: "convert 30 degrees celsius to fahrenheit", K: 3})
	if err != nil || len(resp.GetResults()) == 0 {
		t.Fatalf("search: %v, %v", resp, err)
	}
}

// TestEmbedModelRefOnQdrant: the qdrant store needs the vector dimension before it opens, so
// Run opens it once the embedding model toolmesh runs answers; New starts nothing.
func TestEmbedModelRefOnQdrant(t *testing.T) {
	cfg, hub := embedModelConfig(t)
	d, err := qdranttest.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cfg.ExecutorAddr = serveCatalog(t, newCatalog(demoTools(t)...))
	cfg.Store, cfg.QdrantAddr, cfg.QdrantCollection, cfg.QdrantTimeout = "qdrant", d.Addr(), "embed", time.Second
	s, err := New(context.Background(), cfg, nil, nil)
	if err != nil {
		t.Fatalf("New on qdrant with a managed embedding model: %v", err)
	}
	if got := hub.Requests(); len(got) != 0 {
		t.Fatalf("New asked the hub %d times; pulling and running the model is Run's", len(got))
	}
	if ok, why := s.Ready(context.Background()); ok || !strings.Contains(why, "embedding model") {
		t.Errorf("Ready before Run = %v, %q; want not ready, waiting for the embedding model", ok, why)
	}
	defer run(t, s)()
	eventually.Check(t, 30*time.Second, "ready on qdrant", func() string {
		if ok, why := s.Ready(context.Background()); !ok {
			return why
		}
		return ""
	})
}
