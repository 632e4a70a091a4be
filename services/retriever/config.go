package retriever

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/llamaserver"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/secret"
	"github.com/toolmesh/toolmesh/internal/server"
)

// Config is the retriever target's configuration.
type Config struct {
	GRPCAddr     string
	ExecutorAddr string
	// Store is "memory" (in-process, the default) or "qdrant".
	Store string
	// DataDir, when set, keeps the memory store on disk so a restart does not re-embed.
	DataDir string
	// Embedder is "lexical" (no model needed) or "http" (an OpenAI-compatible /v1/embeddings
	// server, fused with lexical search).
	Embedder string

	EmbedURL       string
	EmbedModel     string
	EmbedBatchSize int
	EmbedTimeout   time.Duration
	// EmbedModelRef, when set, is an embedding model toolmesh runs itself on a llama-server
	// with --embedding (pulled if missing), in place of EmbedURL; it turns the http embedder
	// on and names the index (EmbedModel is then not used).
	EmbedModelRef string
	EmbedServer   llamaserver.Flags

	// EmbedAPIKey and QdrantAPIKey are secrets (Secrets).
	EmbedAPIKey  string
	QdrantAPIKey string

	QdrantAddr       string
	QdrantCollection string
	QdrantTLS        bool
	// QdrantCAFile is a PEM file of the authorities that sign Qdrant's certificate, for a
	// self-signed or private-CA certificate; empty: the system's.
	QdrantCAFile  string
	QdrantTimeout time.Duration

	// ResyncBackoffMax caps the wait between attempts to resubscribe to the executor.
	ResyncBackoffMax time.Duration

	// DialOptions are added to those of the executor's client (mutual TLS); set by the app,
	// not a flag.
	DialOptions []grpc.DialOption
	// LocalExecutor is the executor when it runs in this process (`toolmesh up`,
	// internal/localclient): the retriever then calls it directly instead of dialing
	// ExecutorAddr. Set by the app, not a flag.
	LocalExecutor toolmeshv1.ExecutorServiceClient
}

// Secrets come from the environment only, never from flags (flags show in ps and logs).
const (
	envEmbedAPIKey  = "TOOLMESH_EMBED_API_KEY"
	envQdrantAPIKey = "TOOLMESH_QDRANT_API_KEY"
)

// Secrets are the values the retriever target reads from the environment.
func (c *Config) Secrets() []secret.Var {
	return []secret.Var{
		{Env: envEmbedAPIKey, Value: &c.EmbedAPIKey, Usage: "API key sent to the embeddings server (--retriever.embedder=http)"},
		{Env: envQdrantAPIKey, Value: &c.QdrantAPIKey, Usage: "API key sent to Qdrant (--retriever.store=qdrant)"},
	}
}

// RegisterFlags sets the defaults and binds them to flags prefixed "retriever.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "retriever.grpc-addr", "127.0.0.1:7702", "retriever gRPC listen address (host:port)")
	fs.StringVar(&c.ExecutorAddr, "retriever.executor-addr", "127.0.0.1:7704", "executor gRPC address whose tools the retriever indexes")
	fs.StringVar(&c.Store, "retriever.store", "memory", "tool index store: memory (in-process) or qdrant")
	fs.StringVar(&c.DataDir, "retriever.data-dir", "", "folder where the memory store keeps its index across restarts; empty: in memory only")
	fs.StringVar(&c.Embedder, "retriever.embedder", "lexical", "lexical (built in, no model) or http (an OpenAI-compatible /v1/embeddings server, fused with lexical)")
	fs.StringVar(&c.EmbedURL, "retriever.embed.url", "", "base URL of the embeddings server, e.g. http://127.0.0.1:8081 (API key from env "+envEmbedAPIKey+")")
	fs.StringVar(&c.EmbedModel, "retriever.embed.model", "all-MiniLM-L6-v2", "embedding model name sent to the server and used in index names")
	fs.IntVar(&c.EmbedBatchSize, "retriever.embed.batch-size", 32, "texts per embeddings request")
	fs.DurationVar(&c.EmbedTimeout, "retriever.embed.timeout", 30*time.Second, "timeout of one embeddings request")
	fs.StringVar(&c.EmbedModelRef, "retriever.embed.model-ref", "", "embedding model toolmesh runs itself with llama-server --embedding, for dense search fused with lexical: "+
		modelfetch.DefaultEmbedding+", hf://OWNER/REPO/FILE@REVISION[#sha256:HEX] or a .gguf file, pulled (and verified) if missing; "+
		"turns on the http embedder in place of --retriever.embed.url, and names the index")
	c.EmbedServer.RegisterFlags(fs, "retriever.embed.", "0")
	fs.StringVar(&c.QdrantAddr, "retriever.qdrant.addr", "127.0.0.1:6334", "Qdrant gRPC address (API key from env "+envQdrantAPIKey+")")
	fs.StringVar(&c.QdrantCollection, "retriever.qdrant.collection", "toolmesh_tools", "Qdrant collection name prefix; the embedder's model and dimension are appended")
	fs.BoolVar(&c.QdrantTLS, "retriever.qdrant.tls", false, "use TLS to Qdrant")
	fs.StringVar(&c.QdrantCAFile, "retriever.qdrant.ca-file", "", "PEM file of the certificate authorities to trust for Qdrant's TLS certificate (a self-signed or private CA); empty: the system's")
	fs.DurationVar(&c.QdrantTimeout, "retriever.qdrant.timeout", 5*time.Second, "timeout of one Qdrant call")
	fs.DurationVar(&c.ResyncBackoffMax, "retriever.resync-backoff-max", 10*time.Second, "longest wait between attempts to resubscribe to the executor's tool changes")
}

// Validate reports the first bad value, naming its flag.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		return fmt.Errorf("retriever.grpc-addr: %q is not host:port: %w", c.GRPCAddr, err)
	}
	if err := server.CheckTarget(c.ExecutorAddr); err != nil {
		return fmt.Errorf("retriever.executor-addr: %q: %w", c.ExecutorAddr, err)
	}
	switch c.Store {
	case "memory":
	case "qdrant":
		if _, _, err := net.SplitHostPort(c.QdrantAddr); err != nil {
			return fmt.Errorf("retriever.qdrant.addr: %q is not host:port: %w", c.QdrantAddr, err)
		}
		if c.QdrantTimeout <= 0 {
			return errors.New("retriever.qdrant.timeout: must be positive")
		}
		if c.QdrantCAFile != "" && !c.QdrantTLS {
			return errors.New("retriever.qdrant.ca-file: needs retriever.qdrant.tls")
		}
	default:
		return fmt.Errorf("retriever.store: %q is not memory or qdrant", c.Store)
	}
	if c.EmbedModelRef != "" {
		if _, err := modelfetch.ParseRef(c.EmbedModelRef); err != nil {
			return fmt.Errorf("retriever.embed.model-ref: %w", err)
		}
		if c.EmbedURL != "" {
			return errors.New("retriever.embed.model-ref and retriever.embed.url: give one (toolmesh runs the model, or you run the server), not both")
		}
		if err := c.EmbedServer.Validate("retriever.embed."); err != nil {
			return err
		}
	}
	switch c.Embedder {
	case "lexical":
	case "http":
		if c.EmbedModelRef != "" {
			break
		}
		if c.EmbedURL == "" {
			return errors.New("retriever.embed.url: required when retriever.embedder is http")
		}
		if c.EmbedModel == "" {
			return errors.New("retriever.embed.model: required when retriever.embedder is http")
		}
	default:
		return fmt.Errorf("retriever.embedder: %q is not lexical or http", c.Embedder)
	}
	if c.ResyncBackoffMax <= 0 {
		return errors.New("retriever.resync-backoff-max: must be positive")
	}
	return nil
}
