// Package embed turns text into dense vectors through an embeddings server.
package embed

import "context"

// Dense embeds texts into dense vectors of a fixed dimension.
type Dense interface {
	// Embed returns one vector per text, in order.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Model is the model id, used in index names so that vectors of different models never mix.
	Model() string
	// Dim is the vector dimension; zero until the first successful Embed (or a probe) tells it.
	Dim() int
}
