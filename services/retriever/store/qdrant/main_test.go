package qdrant

import (
	"testing"

	"go.uber.org/goleak"
)

// The go-client leaves nothing running once Client.Close returns (its gRPC connections and
// keepalive goroutines end with the connection), so no goroutine is ignored.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
