// Package searchbounds is the one set of bounds of a tool search that every hop checks alike
// (REST and gRPC, the MCP face's search_tools, the agent loop, the retriever, inference), so
// that whatever one hop accepts the next one does too: how many tools a search returns, and
// how long the text searched with (a question, in the agent loop) may be.
package searchbounds

const (
	// DefaultK is how many tools a search returns when k is 0.
	DefaultK = 4
	// MaxK is the most tools one search may return.
	MaxK = 50
	// MaxQueryBytes bounds a question (the agent loop, inference) and a search text (REST,
	// the retriever) alike.
	MaxQueryBytes = 8 << 10
)
