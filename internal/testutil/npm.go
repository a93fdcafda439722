package testutil

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// NodeModules installs the npm packages of fixture (a folder with a
// package.json and its package-lock.json) from the lockfile, once per
// lockfile, into the user's cache under name (never into the
// repository), and returns the folder holding node_modules. Without
// node the test is skipped, saying that it needs node for why; node
// without npm, or a failed install, fails it.
func NodeModules(t testing.TB, fixture, name, why string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("node is not installed: %s needs node and npm (CI installs them)", why)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("node is installed but npm is not: npm installs the packages %s needs", why)
	}
	pkg, err := os.ReadFile(filepath.Join(fixture, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(filepath.Join(fixture, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(append([]byte{}, pkg...), lock...))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	parent := filepath.Join(cache, "dedupe-proxy-test", name)
	dir := filepath.Join(parent, hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil {
		return dir
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	// Installed beside the final place and renamed into it, so a run that
	// dies halfway leaves nothing that looks installed.
	tmp, err := os.MkdirTemp(parent, "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for file, b := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(tmp, file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", tmp, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); statErr != nil {
			t.Fatalf("install %s's packages: %v", name, err)
		}
		// Another run installed it first.
	}
	return dir
}

// PythonWith is the first of env's value (when set), Debian's
// /usr/bin/python3 (where apt-get installs python3-<module>) and python3
// on PATH that imports module; "" when none does.
func PythonWith(env, module string) string {
	for _, p := range []string{os.Getenv(env), "/usr/bin/python3", "python3"} {
		if p == "" {
			continue
		}
		if exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	return ""
}
