package llamaserver_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/llamaserver"
)

// TestModelRetriesBackOff: a model that cannot be had yet (a hub that cannot be reached) is
// asked for again with waits that keep doubling past the children's restart cap, each try
// logged once, and the status says what failed and counts down to the next try (issue 31
// item 3: five warnings every 30 s, forever).
func TestModelRetriesBackOff(t *testing.T) {
	var mu sync.Mutex
	var tries []time.Time
	unreachable := errors.New("tiny: cannot reach the hub at 127.0.0.1:1: connection refused")
	r := supervise(t, "serve", llamaserver.Config{BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond},
		func(context.Context, func(string)) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			tries = append(tries, time.Now())
			return "", unreachable
		})
	const want = 6 // waits of about 10, 20, 40, 80 and 160 ms between them
	eventually.Check(t, 20*time.Second, "six tries", func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(tries) < want {
			return "tries so far: " + strconv.Itoa(len(tries))
		}
		return ""
	})
	st := r.Status()
	r.stop()

	mu.Lock()
	gap := tries[want-1].Sub(tries[want-2])
	mu.Unlock()
	// The fifth wait is 160 ms ±20%; capped at BackoffMax it would be 20 ms ±20%.
	if gap < 120*time.Millisecond {
		t.Errorf("the fifth wait between tries was %s; want the backoff to keep doubling (about 160 ms), not to stop at BackoffMax (20 ms)", gap)
	}
	if !strings.HasPrefix(st.Message, "no model yet: "+unreachable.Error()+"; trying again in ") || !errors.Is(st.Err, unreachable) {
		t.Errorf("status %s %q (err %v); want what failed and when it is tried again", st.State, st.Message, st.Err)
	}
	logs := r.logs.String()
	if n := strings.Count(logs, "cannot get the model yet"); n < want-1 || n > len(tries) {
		t.Errorf("%d warnings for %d tries; want one a try:\n%s", n, len(tries), logs)
	}
}
