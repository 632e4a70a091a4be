package inference

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/searchbounds"
)

// checkQuery checks the question both RPCs take.
func checkQuery(q string) error {
	switch {
	case q == "":
		return errreason.InvalidField("query", "is required")
	case len(q) > searchbounds.MaxQueryBytes:
		return errreason.InvalidField("query", fmt.Sprintf("is %d bytes, more than the %d allowed", len(q), searchbounds.MaxQueryBytes))
	case !utf8.ValidString(q):
		return errreason.InvalidField("query", "is not valid UTF-8")
	}
	return nil
}

// functionTools are the caller's functions as tools whose id is the function's name. The hash
// is the function's definition, so the catalog cache serves them as it serves mesh tools.
func functionTools(fns []*toolmeshv1.Function) []*toolmeshv1.Tool {
	out := make([]*toolmeshv1.Tool, 0, len(fns))
	for _, f := range fns {
		def, _ := proto.MarshalOptions{Deterministic: true}.Marshal(f)
		sum := sha256.Sum256(def)
		out = append(out, &toolmeshv1.Tool{Id: f.GetName(), Name: f.GetName(), Description: f.GetDescription(),
			InputSchema: f.GetParameters(), Hash: "function:" + hex.EncodeToString(sum[:])})
	}
	return out
}

// bound is the tighter of two token bounds, 0 meaning none.
func bound(a, b int) int {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
