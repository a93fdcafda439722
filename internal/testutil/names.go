package testutil

import (
	"crypto/rand"
	"encoding/hex"
)

// UniqueName returns prefix plus random hex, for queues and key prefixes.
func UniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
