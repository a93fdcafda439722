package testutil

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot is the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// BabelQueueDir is ../shared/conformance/babelqueue next to the repo (CI
// provides it there). It is read at test time and never copied in; when it
// is absent the test is skipped with a message saying so.
func BabelQueueDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(RepoRoot(t), "..", "shared", "conformance", "babelqueue")
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
		t.Skipf("SKIP: BabelQueue conformance suite not found at %s (%v); it is read from ../shared at test time", dir, err)
	}
	return dir
}

// Delivery is one step of a BabelQueue idempotency sequence.
type Delivery struct {
	MetaID       string `json:"meta_id"`
	ExpectEffect string `json:"expect_effect"` // "run" or "skip"
	Outcome      string `json:"outcome"`       // "ok" or "throw" for a run
	ForgetBefore bool   `json:"forget_before"`
}

// Sequence is one idempotency case of manifest.json.
type Sequence struct {
	Name            string
	Deliveries      []Delivery
	ExpectedEffects int `json:"expected_effects"`
}

// IdempotencySequences reads manifest.json → idempotency.sequences.cases
// (skipping the test when the suite is absent, failing when it is empty).
func IdempotencySequences(t testing.TB) []Sequence {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(BabelQueueDir(t), "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Idempotency struct {
			Sequences struct{ Cases []Sequence }
		}
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(m.Idempotency.Sequences.Cases) == 0 {
		t.Fatal("manifest.json has no idempotency sequences")
	}
	return m.Idempotency.Sequences.Cases
}
