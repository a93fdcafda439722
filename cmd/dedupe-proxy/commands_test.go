package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"run", "--help"}, {"run", "-h"}, {"help", "run"}} {
		code, out, errOut := cli(args...)
		if code != 0 || !strings.HasPrefix(out, "Usage: dedupe-proxy run --config FILE") || !strings.Contains(out, "SIGTERM") || errOut != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	for _, cmd := range commandNames(newRoot()) {
		if code, out, _ := cli("help", cmd); code != 0 || !strings.HasPrefix(out, "Usage: dedupe-proxy "+cmd) {
			t.Errorf("help %s: exit %d, %q", cmd, code, out)
		}
	}
	if code, out, _ := cli("help"); code != 0 || !strings.Contains(out, "dedupe-proxy doctor") {
		t.Errorf("help: exit %d, %q", code, out)
	}
	if code, _, errOut := cli("help", "frobnicate"); code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Errorf("help frobnicate: exit %d, %q", code, errOut)
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// config print: effective values, where each came from, secrets redacted.
func TestConfigPrint(t *testing.T) {
	p := writeConfig(t, `consumer: orders-worker
admin:
  token: admintoken123
seenset:
  redis:
    master_name: seenset
    password: redispass123
sources:
  - name: orders
    rabbitmq:
      url: amqp://user:rabbitpass123@rabbit:5672/
      queue: orders
  - name: events
    type: kafka
    kafka:
      brokers: ["k:9092"]
      topics: [events]
      group: g
      sasl: {mechanism: plain, username: u, password: saslpass123}
  - name: hooks
    type: webhook
    webhook:
      secrets: ["env:HOOK_SECRET"]
      target:
        rabbitmq:
          routing_key: orders
`)
	t.Setenv("HOOK_SECRET", "hooksecret123")
	t.Setenv("DEDUPE_PROXY_APP_URL", "http://app:pw123@127.0.0.1:8081")
	t.Setenv("DEDUPE_PROXY_SEENSET_REDIS_SENTINEL_PASSWORD", "sentinelpass123")
	code, out, errOut := cli("config", "print", "--config", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, secret := range []string{"admintoken123", "redispass123", "rabbitpass123", "saslpass123", "hooksecret123", "pw123", "sentinelpass123"} {
		if strings.Contains(out, secret) {
			t.Errorf("secret %s printed:\n%s", secret, out)
		}
	}
	for _, want := range []string{
		"consumer: orders-worker # file\n",
		"  url: http://app:xxxxx@127.0.0.1:8081 # env DEDUPE_PROXY_APP_URL\n",
		"  timeout: 10s # default\n",
		"  token: <redacted> # file\n",
		"    password: <redacted> # file\n",
		"    sentinel_password: <redacted> # env DEDUPE_PROXY_SEENSET_REDIS_SENTINEL_PASSWORD\n",
		"      url: amqp://user:xxxxx@rabbit:5672/ # file\n",
		"        password: <redacted> # file\n",
		"      secrets: ['env:HOOK_SECRET'] # file\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	// A source shows only its own type's block.
	if strings.Count(out, "\n    kafka:\n") != 1 || strings.Count(out, "\n    rabbitmq:\n") != 1 || strings.Count(out, "\n    webhook:\n") != 1 {
		t.Errorf("blocks of other types printed:\n%s", out)
	}
	if code, _, errOut := cli("config", "show", "--config", p); code != 2 || !strings.Contains(errOut, "config print") {
		t.Errorf("config show: exit %d, %q", code, errOut)
	}
}

// doctor exits 0 when everything answers and 1 when something fails.
func TestDoctorExitStatus(t *testing.T) {
	rabbit := testutil.NewRabbit(t)
	q := rabbit.Queue("doctor-cli-", nil)
	app := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer app.Close()
	cfg := func(queue string) string {
		return writeConfig(t, fmt.Sprintf(`consumer: c
admin: {listen: "127.0.0.1:%d"}
app: {url: %q, health_url: /healthz}
seenset: {redis: {addrs: [%q]}}
sources:
  - name: orders
    rabbitmq: {url: %q, queue: %s}
`, testutil.FreePort(t), app.URL, testutil.RedisAddr(), testutil.RabbitURL(), queue))
	}
	code, out, _ := cli("doctor", "--config", cfg(q))
	if code != 0 || !strings.Contains(out, "0 failed") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	code, out, _ = cli("doctor", "--config", cfg("missing-"+q))
	if code != 1 || !strings.Contains(out, "FAIL  rabbitmq queue missing-"+q) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// What config print writes is a config that validates as it is: every
// kind of source, secrets and URL passwords redacted, values from the
// environment written into the file.
func TestConfigPrintOutputValidates(t *testing.T) {
	t.Setenv("HOOK_SECRET", "hooksecret123")
	t.Setenv("DEDUPE_PROXY_APP_URL", "http://app:pw123@127.0.0.1:8081")
	t.Setenv("DEDUPE_PROXY_SEENSET_REDIS_PASSWORD", "redispass123")
	all := writeConfig(t, `consumer: orders-worker
admin: {token: admintoken123}
app: {health_url: /healthz}
sources:
  - name: orders
    rabbitmq:
      url: amqp://user:rabbitpass123@rabbit:5672/
      queue: orders
      dead_letter: {mode: publish, routing_key: orders.dlq}
  - name: events
    type: kafka
    kafka:
      brokers: ["k:9092"]
      topics: [events]
      group: g
      sasl: {mechanism: plain, username: u, password: saslpass123}
      tls: {enabled: true}
  - name: hooks
    type: webhook
    webhook:
      profile: github
      secrets: ["env:HOOK_SECRET"]
      mode: enqueue
      target:
        rabbitmq:
          url: amqp://user:rabbitpass123@rabbit:5672/
          routing_key: orders
`)
	for _, path := range []string{all, filepath.Join("..", "..", "config.example.yaml"), filepath.Join("..", "..", "deploy", "compose", "config.yaml")} {
		code, printed, errOut := cli("config", "print", "--config", path)
		if code != 0 {
			t.Fatalf("config print %s: exit %d: %s", path, code, errOut)
		}
		again := writeConfig(t, printed)
		code, out, errOut := cli("validate", "--config", again)
		if code != 0 || !strings.Contains(out, ": ok (") {
			t.Errorf("validate the output of config print %s: exit %d, %s%s\nprinted:\n%s", path, code, out, errOut, printed)
		}
		// And it is a fixed point: printing the printed file gives the
		// same settings (the origins differ: "# file" everywhere).
		code, reprinted, _ := cli("config", "print", "--config", again)
		if code != 0 || stripOrigins(reprinted) != stripOrigins(printed) {
			t.Errorf("config print of the printed %s differs:\n%s\nvs\n%s", path, reprinted, printed)
		}
	}
}

// stripOrigins drops the header line and each value's "# origin".
func stripOrigins(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "# effective configuration") {
			continue
		}
		if i := strings.Index(l, " # "); i >= 0 {
			l = l[:i]
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// config print shows what a webhook source really keys by, and none of
// the blocks its profile, mode and target leave unused.
func TestConfigPrintWebhookKeyAndBlocks(t *testing.T) {
	t.Setenv("HOOK_SECRET", "hooksecret123")
	p := writeConfig(t, `consumer: c
sources:
  - name: stripe
    type: webhook
    webhook: {profile: stripe, secrets: ["env:HOOK_SECRET"], mode: forward}
  - name: gh
    type: webhook
    webhook: {profile: github, secrets: ["env:HOOK_SECRET"], target: {broker: kafka, kafka: {topic: hooks}}}
  - name: generic
    type: webhook
    key: ["header:x-event-id"]
    webhook: {profile: generic-hmac, secrets: ["env:HOOK_SECRET"], mode: forward, generic: {header: X-Sig}}
`)
	code, out, errOut := cli("config", "print", "--config", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	srcs := strings.Split(out, "\n  - name: ")[1:]
	if len(srcs) != 3 {
		t.Fatalf("want 3 sources in:\n%s", out)
	}
	stripe, gh, generic := srcs[0], srcs[1], srcs[2]
	if !strings.Contains(stripe, "key: ['json:meta.id'] # default; not used: profile stripe keys by the body's id (key_from: profile)\n") {
		t.Errorf("stripe's key line does not say what it keys by:\n%s", stripe)
	}
	if !strings.Contains(gh, "not used: profile github keys by sha256:<hex SHA-256 of the body>") {
		t.Errorf("github's key line does not say what it keys by:\n%s", gh)
	}
	if !strings.Contains(generic, "key: ['header:x-event-id'] # file\n") {
		t.Errorf("generic-hmac keys by its rules:\n%s", generic)
	}
	// mode forward publishes nowhere: no target; a kafka target has no
	// rabbitmq block; only generic-hmac reads the generic block.
	for name, s := range map[string]string{"stripe": stripe, "generic": generic} {
		if strings.Contains(s, "target:") {
			t.Errorf("%s (mode forward) prints a target:\n%s", name, s)
		}
	}
	if !strings.Contains(gh, "target:") || !strings.Contains(gh, "topic: hooks") || strings.Contains(gh, "rabbitmq:") {
		t.Errorf("github's kafka target: want only its kafka block:\n%s", gh)
	}
	if strings.Contains(stripe, "generic:") || strings.Contains(gh, "generic:") || !strings.Contains(generic, "header: X-Sig") {
		t.Errorf("the generic block belongs to generic-hmac only:\n%s", out)
	}
}
