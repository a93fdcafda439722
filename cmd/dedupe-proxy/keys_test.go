package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// `keys status` and `keys forget` against the shared Redis, under a key
// prefix of the test's own, with the proxy's config file.
func TestKeysCommand(t *testing.T) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "dptest:cli:" + hex.EncodeToString(b) + ":"
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	cfg := fmt.Sprintf(`consumer: cli-test
seenset:
  redis:
    addrs: [%q]
    prefix: %q
sources:
  - name: orders
    rabbitmq:
      queue: orders
`, testutil.RedisAddr(), prefix)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{testutil.RedisAddr()}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: testutil.RedisAddr()})
		defer c.Close()
		ctx := context.Background()
		for it := c.Scan(ctx, 0, prefix+"*", 100).Iterator(); it.Next(ctx); {
			c.Del(ctx, it.Val())
		}
	})
	ctx := context.Background()
	if _, err := st.Claim(ctx, "cli-test:orders:order-7", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, "cli-test:orders:order-7", "tok", time.Hour); err != nil {
		t.Fatal(err)
	}

	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := cli("keys", "status", "order-7", "--config", cfgPath)
	if code != 0 || !strings.HasPrefix(out, `{"key":"order-7","space":"orders","state":"done","ttl_seconds":3`) {
		t.Fatalf("keys status = %d %q %q", code, out, errOut)
	}
	// Flags before the arguments work too.
	code, out, errOut = cli("keys", "--config", cfgPath, "forget", "order-7")
	if code != 0 || out != `{"key":"order-7","space":"orders","forgotten":true}`+"\n" {
		t.Fatalf("keys forget = %d %q %q", code, out, errOut)
	}
	if s, _ := st.Status(ctx, "cli-test:orders:order-7"); s.State != seenset.Absent {
		t.Fatalf("state after forget = %s", s.State)
	}
	code, out, _ = cli("keys", "status", "--config", cfgPath, "--", "-12")
	if code != 0 || out != `{"key":"-12","space":"orders","state":"absent","ttl_seconds":0}`+"\n" {
		t.Fatalf("keys status after --: %d %q", code, out)
	}

	// A done mark with a body digest: status shows it and when it was
	// written (its expiry less seenset.ttl, 24h by default).
	d := seenset.SumDigest([]byte(`{"meta":{"id":"ord-1"},"payload":{"amount":10}}`))
	tok := seenset.WithDigest("tok", d)
	if _, err := st.Claim(ctx, "cli-test:orders:ord-1", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	if err := st.Commit(ctx, "cli-test:orders:ord-1", tok, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cli("keys", "status", "ord-1", "--config", cfgPath)
	var ks struct {
		State     string `json:"state"`
		Digest    string `json:"digest"`
		WrittenAt string `json:"written_at"`
	}
	if err := json.Unmarshal([]byte(out), &ks); code != 0 || err != nil {
		t.Fatalf("keys status = %d %q %q (%v)", code, out, errOut, err)
	}
	written, err := time.Parse(time.RFC3339Nano, ks.WrittenAt)
	if ks.State != "done" || ks.Digest != d.String() || err != nil || written.Sub(committed).Abs() > 2*time.Second {
		t.Fatalf("keys status = %s: want done, digest %s, written at about %s", out, d, committed.UTC())
	}
	// -o table: aligned columns, the TTL in whole seconds (24h: 86400,
	// or a little less once a second has passed).
	ttlRow := regexp.MustCompile(`^ord-1 orders done (86400|8639[0-9]) `)
	code, out, errOut = cli("keys", "status", "ord-1", "--config", cfgPath, "-o", "table")
	if lines := strings.Split(out, "\n"); code != 0 || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "KEY SPACE STATE TTL_SECONDS DIGEST WRITTEN_AT" ||
		!ttlRow.MatchString(strings.Join(strings.Fields(lines[1]), " ")) || !strings.Contains(lines[1], d.String()) {
		t.Fatalf("keys status -o table = %d %q %q", code, out, errOut)
	}
	code, out, errOut = cli("keys", "list", "--config", cfgPath, "-o", "table")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "KEY ") || !ttlRow.MatchString(strings.Join(strings.Fields(lines[1]), " ")) {
		t.Fatalf("keys list -o table = %d %q %q", code, out, errOut)
	}
	code, out, _ = cli("keys", "forget", "ord-1", "--config", cfgPath, "-o", "table")
	if code != 0 || strings.Join(strings.Fields(out), " ") != "KEY SPACE FORGOTTEN ord-1 orders true" {
		t.Fatalf("keys forget -o table = %d %q", code, out)
	}
	for _, bad := range [][]string{
		{"keys", "list", "--config", cfgPath, "-o", "yaml"},
		{"keys", "status", "--config", cfgPath},
		{"keys", "purge", "k", "--config", cfgPath},
		{"keys", "status", "a", "b", "--config", cfgPath},
		{"validate", "extra", "--config", cfgPath},
	} {
		if code, _, _ := cli(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
	if code, _, _ := cli("keys", "status", "k", "--config", filepath.Join(t.TempDir(), "missing.yaml")); code != 1 {
		t.Errorf("missing config: exit %d, want 1", code)
	}
}

func TestValidatePrintsWarnings(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	_ = os.WriteFile(cfgPath, []byte(`consumer: c
seenset:
  ttl: 1h
sources:
  - name: orders
    max_redelivery_delay: 48h
    rabbitmq:
      queue: orders
`), 0o600)
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "--config", cfgPath}, &out, &errOut); code != 0 {
		t.Fatalf("validate: %d %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "warning: sources[0].max_redelivery_delay: ") {
		t.Fatalf("no warning in %q", out.String())
	}
}

// With Redis unreachable, the keys commands say so in their own one line
// that names the address; go-redis' own lines for each failed dial, which
// it writes to the process's stderr, are not printed besides.
func TestKeysRedisDownSaysItOnce(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	cfg := `consumer: cli-test
seenset:
  redis:
    addrs: ["127.0.0.1:1"]
sources:
  - name: orders
    rabbitmq:
      queue: orders
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	got := goRedisStderr(t, func() {
		for _, args := range [][]string{
			{"keys", "status", "order-7", "--config", cfgPath},
			{"keys", "list", "--config", cfgPath},
		} {
			var out, errOut bytes.Buffer
			if code := run(args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "127.0.0.1:1") {
				t.Errorf("%v = %d, stdout %q, stderr %q; want exit 1 and the address", args, code, out.String(), errOut.String())
			}
		}
	})
	if got != "" {
		t.Errorf("go-redis printed its own lines besides the command's:\n%s", got)
	}
}
