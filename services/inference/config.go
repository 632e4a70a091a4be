package inference

import (
	"errors"
	"flag"
	"fmt"
	"net"

	"github.com/toolmesh/toolmesh/internal/llamaserver"
	"github.com/toolmesh/toolmesh/internal/modelfetch"
	"github.com/toolmesh/toolmesh/internal/secret"
	"github.com/toolmesh/toolmesh/services/inference/llama"
)

// Config is the inference target's configuration.
type Config struct {
	GRPCAddr string
	// Backend is "gorilla" (llama-server /completion with Gorilla's prompt and a grammar) or
	// "openai" (any OpenAI-compatible /v1/chat/completions with tools).
	Backend string
	// Chat is the OpenAI-compatible server, used when Backend is "openai".
	ChatURL   string
	ChatModel string
	// LLM is the llama-server that runs Gorilla OpenFunctions v2. Its APIKey, also the chat
	// backend's, is a secret (Secrets). An empty URL means toolmesh runs llama-server itself
	// (see Model).
	LLM llama.Config
	// Model is the model toolmesh runs with its own llama-server when LLM.URL is empty: a
	// registry name, an hf:// reference or a .gguf file, pulled when missing. Empty means the
	// default model if it is already pulled and llama-server is found, else FallbackURL.
	// With LLM.URL set it only names the model in logs and spans.
	Model string
	// Server is how that llama-server is run.
	Server llamaserver.Flags
	// Slots is its -np (questions decoded at once); CtxSize the context of each slot, so -c
	// is Slots × CtxSize.
	Slots, CtxSize int
	// MaxTools bounds the candidates of one request; the retriever's k is at most 50.
	MaxTools int
}

// FallbackURL is where inference looks for a llama-server when none is named and toolmesh
// does not run one.
const FallbackURL = "http://127.0.0.1:8080"

const envLLMAPIKey = "TOOLMESH_LLM_API_KEY"

// Secrets are the values the inference target reads from the environment.
func (c *Config) Secrets() []secret.Var {
	return []secret.Var{{Env: envLLMAPIKey, Value: &c.LLM.APIKey,
		Usage: "API key sent to the model server (llama-server --api-key, or the OpenAI-compatible server's key)"}}
}

// RegisterFlags sets the defaults and binds them to flags prefixed "inference.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "inference.grpc-addr", "127.0.0.1:7703", "inference gRPC listen address (host:port)")
	fs.IntVar(&c.MaxTools, "inference.max-tools", 50, "most candidate tools one request may carry")
	fs.StringVar(&c.Backend, "inference.backend", "gorilla", "gorilla (llama-server /completion, Gorilla OpenFunctions v2 prompt and grammar) or openai (any /v1/chat/completions server with tools; tested against llama-server --jinja and a double of the OpenAI wire format, not against vLLM or Ollama)")
	fs.StringVar(&c.ChatURL, "inference.chat.url", "", "OpenAI-compatible server for --inference.backend=openai (key from env "+envLLMAPIKey+")")
	fs.StringVar(&c.ChatModel, "inference.chat.model", "", "model name sent to the OpenAI-compatible server")
	c.LLM.RegisterFlags(fs, "inference.llm.")
	fs.StringVar(&c.Model, "inference.llm.model", "", "model toolmesh runs with its own llama-server when --inference.llm.url is empty: "+
		"a known name ("+modelfetch.Default+"), hf://OWNER/REPO/FILE@REVISION[#sha256:HEX] or a .gguf file, pulled (and verified) if missing; "+
		"empty: "+modelfetch.Default+" if it is pulled and llama-server is found, else "+FallbackURL+". With --inference.llm.url it only names the model in logs")
	c.Server.RegisterFlags(fs, "inference.llm.", "auto")
	fs.IntVar(&c.Slots, "inference.llm.slots", 1, "questions the llama-server toolmesh runs decodes at once (-np); each slot has --inference.llm.ctx-size tokens")
	fs.IntVar(&c.CtxSize, "inference.llm.ctx-size", 4096, "context of each slot of the llama-server toolmesh runs (Gorilla OpenFunctions v2 was trained with 4096)")
}

// modelRef is the model Model names, the default model when it is empty.
func (c *Config) modelRef() (modelfetch.Ref, error) {
	name := c.Model
	if name == "" {
		name = modelfetch.Default
	}
	return modelfetch.ParseRef(name)
}

// Validate reports the first bad value, naming its flag.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		return fmt.Errorf("inference.grpc-addr: %q is not host:port: %w", c.GRPCAddr, err)
	}
	if c.MaxTools < 1 {
		return errors.New("inference.max-tools: must be at least 1")
	}
	switch c.Backend {
	case "gorilla":
	case "openai":
		if c.ChatURL == "" || c.ChatModel == "" {
			return errors.New("inference.chat.url and inference.chat.model: required when inference.backend is openai")
		}
		return nil
	default:
		return fmt.Errorf("inference.backend: %q is not gorilla or openai", c.Backend)
	}
	llm := c.LLM
	if llm.URL == "" {
		llm.URL = FallbackURL // toolmesh runs llama-server, or looks there
		if _, err := c.modelRef(); err != nil {
			return fmt.Errorf("inference.llm.model: %w", err)
		}
		if c.Slots < 1 || c.CtxSize < 1 {
			return errors.New("inference.llm.slots and inference.llm.ctx-size: must be at least 1")
		}
		if err := c.Server.Validate("inference.llm."); err != nil {
			return err
		}
	}
	if err := llm.Validate(); err != nil {
		return fmt.Errorf("inference.llm: %w", err)
	}
	return nil
}
