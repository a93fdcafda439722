package testutil

import (
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
