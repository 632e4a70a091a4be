//go:build !unix

package filelock

import (
	"context"
	"fmt"
	"sync"
)

// Without flock only the callers of this process are kept apart (one channel per path: the
// paths locked are a handful of files); other processes sharing the file may race.
var (
	mu   sync.Mutex
	held = map[string]chan struct{}{}
)

// Lock takes an exclusive lock on path within this process and returns the function that
// releases it; it waits until ctx ends, and then fails with ctx's cause.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	mu.Lock()
	ch, ok := held[path]
	if !ok {
		ch = make(chan struct{}, 1)
		held[path] = ch
	}
	mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("lock %s: held by another caller: %w", path, context.Cause(ctx))
	}
}
