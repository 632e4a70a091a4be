// Package openaiface is the api's OpenAI face: POST /v1/chat/completions and GET /v1/models on
// the REST port, in OpenAI's wire format, so that an app written for the OpenAI SDKs uses the
// mesh by changing its base URL. A chat completion runs the api's own agent loop (over the api's
// gRPC server, so tokens, scopes, rate limits and tracing apply as on /v1/query): the mesh's
// tools are server-side tools, found by the retriever and run by the executor, and the caller's
// own functions come back as tool_calls as OpenAI returns them.
package openaiface
