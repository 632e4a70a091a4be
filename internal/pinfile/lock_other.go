//go:build !unix

package pinfile

import "sync"

// mu orders this process's updates; without flock, replicas sharing a file may race.
var mu sync.Mutex

func lock(string) (func(), error) {
	mu.Lock()
	return mu.Unlock, nil
}
