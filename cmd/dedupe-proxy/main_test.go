package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func cli(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidate(t *testing.T) {
	root := filepath.Join("..", "..")
	code, out, _ := cli("validate", "--config", filepath.Join(root, "config.example.yaml"))
	if code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("valid config: exit %d, %q", code, out)
	}
	code, _, errOut := cli("validate", "--config", filepath.Join(root, "internal", "config", "testdata", "invalid-unknown-keys.yaml"))
	if code != 1 || !strings.Contains(errOut, "  - line 3: app.timout: unknown field (did you mean app.timeout?)\n") || !strings.Contains(errOut, "sources[0].rabbitmq.queu: unknown field") {
		t.Fatalf("invalid config: exit %d, stderr:\n%s", code, errOut)
	}
	code, _, errOut = cli("validate", "--config", "nope.yaml")
	if code != 1 || !strings.Contains(errOut, "nope.yaml") {
		t.Fatalf("missing file: exit %d, %q", code, errOut)
	}
	code, _, errOut = cli("validate")
	if code != 2 || !strings.Contains(errOut, "--config FILE is required") {
		t.Fatalf("no --config: exit %d, %q", code, errOut)
	}
}

func TestUsageAndVersion(t *testing.T) {
	if code, out, _ := cli("version"); code != 0 || !strings.HasPrefix(out, "dedupe-proxy ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, errOut := cli("frobnicate"); code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("unknown: %d %q", code, errOut)
	}
	if code, _, _ := cli(); code != 2 {
		t.Fatalf("no args: %d", code)
	}
}
