package inference

import (
	"strconv"
	"strings"
	"sync"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
)

// catalogs keeps recently built catalogs: sizing a grammar for a handful of tools costs a
// millisecond or more, and a loop asks for the same tools at the same budget step after
// step. A catalog is read-only once built, so one may serve many requests at once.
type catalogs struct {
	mu    sync.Mutex
	max   int
	byKey map[string]*gorilla.Catalog
	order []string // insertion order, oldest first
}

func newCatalogs(max int) *catalogs {
	return &catalogs{max: max, byKey: make(map[string]*gorilla.Catalog, max)}
}

// build returns the catalog of tools sized to maxBytes (0: not sized), without the grammar's
// answer branch when callsOnly, from the cache when the same definitions were built so before.
// Tools without a definition hash are built every time: nothing says two of them are the same.
func (c *catalogs) build(tools []*toolmeshv1.Tool, maxBytes int, callsOnly bool) (*gorilla.Catalog, error) {
	key, ok := catalogKey(tools, maxBytes, callsOnly)
	if ok {
		c.mu.Lock()
		cat := c.byKey[key]
		c.mu.Unlock()
		if cat != nil {
			return cat, nil
		}
	}
	opts := gorilla.DefaultOptions
	opts.MaxBytes, opts.CallsOnly = maxBytes, callsOnly
	cat, err := gorilla.BuildWith(tools, opts)
	if err != nil || !ok {
		return cat, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.byKey[key]; !dup {
		if len(c.order) >= c.max {
			delete(c.byKey, c.order[0])
			c.order = c.order[1:]
		}
		c.byKey[key] = cat
		c.order = append(c.order, key)
	}
	return cat, nil
}

func catalogKey(tools []*toolmeshv1.Tool, maxBytes int, callsOnly bool) (string, bool) {
	var b strings.Builder
	b.WriteString(strconv.Itoa(maxBytes))
	if callsOnly {
		b.WriteString("calls")
	}
	for _, t := range tools {
		if t.GetHash() == "" {
			return "", false
		}
		b.WriteByte(0)
		b.WriteString(t.GetId())
		b.WriteByte(1)
		b.WriteString(t.GetHash())
	}
	return b.String(), true
}
