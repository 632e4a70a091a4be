// Package filelock keeps the processes that share a file apart while one of them writes it:
// an exclusive lock on a file beside it, waited for until a context ends. The pin file's
// replicas take turns with it, and so do two pulls of one model file (model-init and a user's
// `toolmesh model pull`).
package filelock

import "time"

// The wait between two tries at a held lock doubles from firstWait up to maxWait: an update of
// the pin file takes milliseconds, a pull of a model minutes.
const (
	firstWait = 10 * time.Millisecond
	maxWait   = 250 * time.Millisecond
)
