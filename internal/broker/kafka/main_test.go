package kafka

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the source, kgo or kfake starts must be gone when
// the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
