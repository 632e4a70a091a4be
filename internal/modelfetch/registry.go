// Package modelfetch fetches and caches model files: it knows the models toolmesh runs,
// fetches them from a Hugging Face hub (or a mirror named by HF_ENDPOINT) at a pinned revision,
// verifies every byte against a SHA-256, and keeps them in a local cache. Package hubtest holds
// a protocol-faithful double of the hub.
package modelfetch

import (
	"slices"
	"strings"
)

// Known is a model toolmesh knows by name. Its revision is a commit id, so the bytes behind
// the name never change; its SHA-256 and size are pinned when a maintainer has seen them, and
// otherwise taken from what the hub states for that commit (X-Linked-Etag, or the model API's
// lfs.sha256): trust on first use, which `toolmesh model ls` shows as "hub only, not pinned",
// and a file so checked is reused only for the hub it came from.
type Known struct {
	// Name is what users type: `toolmesh model pull NAME`, `toolmesh up --model NAME`.
	Name string
	// Repo, File and Revision locate the file on the hub; Revision is a 40-hex commit id.
	Repo, File, Revision string
	// SHA256 is the file's SHA-256 in lowercase hex, or "" when it has not been pinned yet.
	SHA256 string
	// Size is the file's exact size in bytes, or 0 when it has not been pinned yet.
	Size int64
	// About is the approximate size for people ("4.3 GB") and what the model is for.
	About string
	// Source says where the pins come from and what is not yet confirmed.
	Source string
}

// Ref is the reference of a known model.
func (k Known) Ref() Ref {
	return Ref{Name: k.Name, Repo: k.Repo, File: k.File, Revision: k.Revision, SHA256: k.SHA256, Size: k.Size}
}

// Names of the models toolmesh uses by default.
const (
	// Default is the function-calling model the inference service runs.
	Default = "gorilla-openfunctions-v2"
	// DefaultEmbedding is the embedding model for the retriever's dense search.
	DefaultEmbedding = "all-minilm-l6-v2"
)

// registry is every model toolmesh knows by name. Pins were read from public sources, not
// from the hub itself (it cannot be reached where this was written); Source says which.
//
// To pin a model's SHA-256 and size, a maintainer runs, with HF_ENDPOINT unset (so the answer
// is huggingface.co's own, not a mirror's):
//
//	toolmesh model pull --print-pin NAME
//
// which asks the hub for the pinned commit, downloads or reuses the file, hashes it again and
// prints the SHA256 and Size lines to set on the entry below (and the hf://...#sha256:
// reference with the same pin). From then on every pull is checked against the pin, whatever
// hub or mirror serves it, and a hub that states another digest is refused up front.
var registry = []Known{
	{
		Name:     Default,
		Repo:     "gorilla-llm/gorilla-openfunctions-v2-gguf",
		File:     "gorilla-openfunctions-v2-q4_K_M.gguf",
		Revision: "bab1cf50a4dd54be06c5ea16fd00e60e872bcd9a",
		About:    "Gorilla OpenFunctions v2, Q4_K_M, about 4.3 GB: function calling (inference)",
		Source: "repository linked from the Gorilla model card; revision is the snapshot a public " +
			"README shows after downloading this file. SHA-256 and size not pinned yet (pin them with " +
			"`toolmesh model pull --print-pin`): the hub's X-Linked-Etag (or the model API's lfs.sha256) " +
			"for this commit is checked instead",
	},
	{
		Name:     DefaultEmbedding,
		Repo:     "second-state/All-MiniLM-L6-v2-Embedding-GGUF",
		File:     "all-MiniLM-L6-v2-ggml-model-f16.gguf",
		Revision: "544f204f2eaa2d71361ffc74d6df7170285b286a",
		About:    "all-MiniLM-L6-v2, f16, about 46 MB: embeddings (retriever, dense search)",
		Source: "revision is the snapshot public benchmark scripts load this file from; SHA-256 " +
			"and size not pinned yet (pin them with `toolmesh model pull --print-pin`): the hub's " +
			"X-Linked-Etag (or lfs.sha256) for this commit is checked instead",
	},
}

// Lookup finds a known model by name (case-insensitive).
func Lookup(name string) (Known, bool) {
	for _, k := range registry {
		if strings.EqualFold(k.Name, name) {
			return k, true
		}
	}
	return Known{}, false
}

// Registry lists the known models.
func Registry() []Known { return slices.Clone(registry) }

// Names lists the known models' names.
func Names() []string {
	out := make([]string, len(registry))
	for i, k := range registry {
		out[i] = k.Name
	}
	return out
}
