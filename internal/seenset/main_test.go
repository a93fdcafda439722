package seenset_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Neither store may leave goroutines behind once closed: Memory has none by
// design, and Redis must stop its client's goroutines on Close. The Redis
// Cluster and Sentinel set-ups, shared by the package's tests, are closed
// first.
func TestMain(m *testing.M) {
	code := m.Run()
	closeTopologies()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
