package llama

import (
	"container/list"
	"crypto/sha256"
	"sync"
)

// tokenCache remembers token counts of texts, least recently used first out. Keys are
// SHA-256 digests so long texts (tool descriptions) do not stay in memory.
type tokenCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *tokenEntry, most recent at the front
	byKey map[[sha256.Size]byte]*list.Element
}

type tokenEntry struct {
	key [sha256.Size]byte
	n   int
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{max: max, order: list.New(), byKey: make(map[[sha256.Size]byte]*list.Element)}
}

func (c *tokenCache) get(text string) (int, bool) {
	k := sha256.Sum256([]byte(text))
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*tokenEntry).n, true
	}
	return 0, false
}

func (c *tokenCache) put(text string, n int) {
	k := sha256.Sum256([]byte(text))
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		e.Value.(*tokenEntry).n = n
		c.order.MoveToFront(e)
		return
	}
	c.byKey[k] = c.order.PushFront(&tokenEntry{key: k, n: n})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*tokenEntry).key)
	}
}

func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
