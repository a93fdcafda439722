package seenset_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Neither store may leave goroutines behind once closed: Memory has none by
// design, and Redis must stop its client's goroutines on Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
