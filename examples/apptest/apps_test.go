package apptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// The Go example runs the suite in its own package (go test
// ./examples/go); these run the Node and Python examples as the processes
// a user would start.

var (
	npmOnce sync.Once
	npmErr  error
	npmOut  []byte
)

func TestNodeApp(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed, so the Node example is not tested (.ci/run installs it: apt-get install nodejs npm)")
	}
	dir := filepath.Join(testutil.RepoRoot(t), "examples", "node")
	// The example's one dependency, pinned by its package-lock.json.
	npmOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "pg", "package.json")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		npmOut, npmErr = cmd.CombinedOutput()
	})
	if npmErr != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, npmErr, npmOut)
	}
	Run(t, func(t *testing.T, databaseURL string) string {
		cmd := exec.Command(node, "server.js")
		cmd.Dir = dir
		return StartProcess(t, databaseURL, cmd)
	})
}

func TestPythonApp(t *testing.T) {
	python := pythonWithPsycopg2()
	if python == "" {
		t.Skip("no python3 that can import psycopg2, so the Python example is not tested (.ci/run installs it: apt-get install python3-psycopg2)")
	}
	dir := filepath.Join(testutil.RepoRoot(t), "examples", "python")
	Run(t, func(t *testing.T, databaseURL string) string {
		// -B: write no __pycache__ into the tree.
		cmd := exec.Command(python, "-B", "server.py")
		cmd.Dir = dir
		return StartProcess(t, databaseURL, cmd)
	})
}

// pythonWithPsycopg2 is APPTEST_PYTHON, else Debian's /usr/bin/python3
// (where apt-get installs python3-psycopg2), else python3 on PATH — the
// first that imports psycopg2.
func pythonWithPsycopg2() string { return testutil.PythonWith("APPTEST_PYTHON", "psycopg2") }
