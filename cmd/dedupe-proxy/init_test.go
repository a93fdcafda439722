package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
)

// config.schema.json is what `config schema` prints: regenerate it with
// `go run ./cmd/dedupe-proxy config schema > config.schema.json`.
func TestCommittedSchemaIsCurrent(t *testing.T) {
	code, out, errOut := cli("config", "schema")
	if code != 0 {
		t.Fatalf("config schema: exit %d: %s", code, errOut)
	}
	committed, err := os.ReadFile(filepath.Join("..", "..", "config.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if out != string(committed) {
		t.Errorf("config.schema.json differs from `dedupe-proxy config schema`; run: go run ./cmd/dedupe-proxy config schema > config.schema.json")
	}
	example, err := os.ReadFile(filepath.Join("..", "..", "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(example), "\n"); first != "# yaml-language-server: $schema=config.schema.json" {
		t.Errorf("config.example.yaml starts with %q, not the yaml-language-server line", first)
	}
}

// What init writes passes validate, for every kind of source.
func TestInitWritesValidConfig(t *testing.T) {
	t.Setenv("WEBHOOK_SECRET", "whsec_test")
	for _, kind := range config.SourceTypes() {
		t.Run(kind, func(t *testing.T) {
			code, out, errOut := cli("init", "--source", kind, "--consumer", "billing", "--name", "invoices", "--app-url", "http://127.0.0.1:8081")
			if code != 0 {
				t.Fatalf("init: exit %d: %s", code, errOut)
			}
			p := writeConfig(t, out)
			if code, vout, verr := cli("validate", "--config", p); code != 0 || strings.Contains(vout, "warning") {
				t.Fatalf("validate: exit %d, want 0 without a warning: %s%s\n%s", code, vout, verr, out)
			}
			cfg, err := config.Load(p, []string{"WEBHOOK_SECRET=x"})
			if err != nil {
				t.Fatal(err)
			}
			s := cfg.Sources[0]
			if cfg.Consumer != "billing" || cfg.App.URL != "http://127.0.0.1:8081" || s.Name != "invoices" || s.Type != kind {
				t.Errorf("flags not applied: consumer %q, app.url %q, source %v", cfg.Consumer, cfg.App.URL, s)
			}
		})
	}
}

func TestInitOutputFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	if code, out, errOut := cli("init", "--source", "kafka", "-o", p); code != 0 || out != "" || !strings.Contains(errOut, "wrote "+p) {
		t.Fatalf("init -o: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := cli("validate", p); code != 0 {
		t.Fatalf("validate: exit %d: %s%s", code, out, errOut)
	}
	if err := os.WriteFile(p, []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := cli("init", "--source", "redis", "-o", p); code != 1 || !strings.Contains(errOut, "--force") {
		t.Errorf("init over an existing file: exit %d, %q", code, errOut)
	}
	if b, _ := os.ReadFile(p); string(b) != "mine\n" {
		t.Errorf("init replaced an existing file without --force: %q", b)
	}
	if code, _, errOut := cli("init", "--source", "redis", "-o", p, "--force"); code != 0 {
		t.Fatalf("init --force: exit %d: %s", code, errOut)
	}
	if b, _ := os.ReadFile(p); !strings.Contains(string(b), "type: redis") {
		t.Errorf("init --force did not write: %q", b)
	}
}

func TestInitRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"init"}, 2, "--source is required"},
		{[]string{"init", "--source", "rabbit"}, 2, `did you mean rabbitmq`},
		{[]string{"init", "--source", "kafka", "--app-url", "localhost:8080"}, 1, "app.url: has no scheme"},
		{[]string{"init", "--source", "kafka", "--consumer", "a:b"}, 1, "consumer: must be set to a name"},
	} {
		code, out, errOut := cli(tc.args...)
		if code != tc.code || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
}
