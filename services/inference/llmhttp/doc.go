// Package llmhttp is what the inference service's two model backends share for talking to an
// LLM server over HTTP: package llama (llama-server's native /completion) and package chat
// (an OpenAI-compatible /v1/chat/completions). It holds the rules that must not drift apart
// between them: how a request is sent again on a closed kept-alive connection (Do), how a
// server-sent event stream is read (SSEReader), which errors a backend's error matches and
// the gRPC status it becomes (ErrNotReady, ErrContextExceeded, ErrUnreadable, StatusOf, Code,
// HTTPStatusCode), and the messages servers use to say a prompt is over the context
// (ContextExceeded). Each backend keeps its own Error type: their servers' error bodies differ.
package llmhttp
