package api

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"time"
)

// Config is the api target's configuration.
type Config struct {
	HTTPAddr      string
	GRPCAddr      string
	ExecutorAddr  string
	RetrieverAddr string
	// CallTimeout bounds one tool call made through the api; the executor applies its own too.
	CallTimeout time.Duration
	// RPCTimeout bounds every other call to a dependency.
	RPCTimeout   time.Duration
	MaxBodyBytes int64
}

// RegisterFlags sets the defaults and binds them to flags prefixed "api.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.HTTPAddr, "api.http-addr", "127.0.0.1:7700", "REST listen address (host:port)")
	fs.StringVar(&c.GRPCAddr, "api.grpc-addr", "127.0.0.1:7701", "api gRPC listen address (host:port)")
	fs.StringVar(&c.ExecutorAddr, "api.executor-addr", "127.0.0.1:7704", "executor gRPC address the api calls")
	fs.StringVar(&c.RetrieverAddr, "api.retriever-addr", "127.0.0.1:7702", "retriever gRPC address the api calls for tool search; empty turns search off")
	fs.DurationVar(&c.CallTimeout, "api.call-timeout", 2*time.Minute, "upper bound on one tool call made through the api")
	fs.DurationVar(&c.RPCTimeout, "api.rpc-timeout", 10*time.Second, "timeout of every other call from the api to a dependency")
	fs.Int64Var(&c.MaxBodyBytes, "api.max-body-bytes", 1<<20, "largest REST request body accepted, in bytes")
}

// Validate reports the first bad value, naming its flag.
func (c *Config) Validate() error {
	for _, a := range []struct{ flag, v string }{
		{"api.http-addr", c.HTTPAddr}, {"api.grpc-addr", c.GRPCAddr}, {"api.executor-addr", c.ExecutorAddr},
	} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%s: %q is not host:port: %w", a.flag, a.v, err)
		}
	}
	if c.RetrieverAddr != "" {
		if _, _, err := net.SplitHostPort(c.RetrieverAddr); err != nil {
			return fmt.Errorf("api.retriever-addr: %q is not host:port: %w", c.RetrieverAddr, err)
		}
	}
	if c.CallTimeout <= 0 || c.RPCTimeout <= 0 {
		return errors.New("api.call-timeout and api.rpc-timeout must be positive")
	}
	if c.MaxBodyBytes < 1024 {
		return fmt.Errorf("api.max-body-bytes: %d is below the 1024-byte minimum", c.MaxBodyBytes)
	}
	return nil
}
