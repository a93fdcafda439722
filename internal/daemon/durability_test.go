package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/config"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// durabilityProxy runs a proxy whose seen-set is the private server rs,
// logging JSON into buf.
func durabilityProxy(t *testing.T, rs *testutil.RedisServer, buf *testutil.LogBuffer, mutate func(*config.Config)) *proxy {
	t.Helper()
	h := newHarness(t, func(c *config.Config) {
		withAdmin(c)
		c.SeenSet.Redis.Addrs = []string{rs.Addr()}
		if mutate != nil {
			mutate(c)
		}
	})
	h.logger = slog.New(slog.NewJSONHandler(buf, nil))
	return h.start()
}

// warnLines are the WARN messages of a JSON log that contain sub.
func warnLines(t *testing.T, buf *testutil.LogBuffer, sub string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if msg, _ := m["msg"].(string); m["level"] == "WARN" && strings.Contains(msg, sub) {
			out = append(out, msg)
		}
	}
	return out
}

// A Redis that may evict the seen-set's keys and keeps nothing across a
// restart: one warning per problem at start, logged once however often it
// is read again, both gauges, and a warning line on /readyz, which stays
// 200. A noeviction Redis with AOF: none of it. The warnings follow a
// configuration change.
func TestDurabilityWarnings(t *testing.T) {
	ctx := context.Background()

	risky := testutil.StartRedisWith(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	var buf testutil.LogBuffer
	p := durabilityProxy(t, risky, &buf, nil)
	testutil.Eventually(t, 10*time.Second, "gauges set at start", func() bool {
		return p.gauge(t, "dedupe_proxy_seenset_evicting") == 1 && p.gauge(t, "dedupe_proxy_seenset_persistent") == 0
	})
	evict := "redis " + risky.Addr() + " maxmemory-policy is volatile-lru (maxmemory 67108864 bytes): the seen-set's keys all have a TTL and may be evicted under memory pressure, and a message whose done key was evicted is forwarded again; set noeviction"
	lose := "redis " + risky.Addr() + " has neither AOF nor RDB snapshots: a restart without a replica taking over empties the seen-set, and every message delivered again after it is forwarded again; set appendonly yes"
	for range 3 {
		if !p.d.durable.read(ctx) {
			t.Fatal("durability read failed")
		}
		code, body := adminDo(t, p, "GET", "/readyz", "")
		if want := "source orders: ok\nseenset: ok (redis standalone, 1 master, 0 replicas)\nseenset durability: warning: " + evict + "; " + lose + "\n"; code != http.StatusOK || body != want {
			t.Fatalf("/readyz = %d %q, want 200 %q", code, body, want)
		}
	}
	if ws := warnLines(t, &buf, "redis "+risky.Addr()); len(ws) != 2 || ws[0] != evict || ws[1] != lose {
		t.Fatalf("warnings logged %q, want each problem once", ws)
	}
	if p.d.Ready(ctx) != nil {
		t.Fatalf("not ready: %v", p.d.Ready(ctx))
	}

	safe := testutil.StartRedisWith(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction", "--appendonly", "yes")
	var sbuf testutil.LogBuffer
	sp := durabilityProxy(t, safe, &sbuf, nil)
	testutil.Eventually(t, 10*time.Second, "gauges set at start", func() bool {
		return sp.gauge(t, "dedupe_proxy_seenset_evicting") == 0 && sp.gauge(t, "dedupe_proxy_seenset_persistent") == 1
	})
	if code, body := adminDo(t, sp, "GET", "/readyz", ""); code != http.StatusOK || body != "source orders: ok\nseenset: ok (redis standalone, 1 master, 0 replicas)\n" {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	if ws := warnLines(t, &sbuf, "redis "); len(ws) != 0 {
		t.Fatalf("warnings about a safe Redis: %q", ws)
	}

	// An operator switches the policy: the next read warns and flips the
	// gauge.
	admin := redis.NewClient(&redis.Options{Addr: safe.Addr()})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if !sp.d.durable.read(ctx) {
		t.Fatal("durability read failed")
	}
	if g := sp.gauge(t, "dedupe_proxy_seenset_evicting"); g != 1 {
		t.Fatalf("evicting = %v after the policy change, want 1", g)
	}
	if ws := warnLines(t, &sbuf, "maxmemory-policy is allkeys-lru"); len(ws) != 1 {
		t.Fatalf("warnings after the policy change: %q", ws)
	}
}

// A user that may not run INFO: the proxy starts, stays ready, warns once
// that it cannot tell, and the gauges say unknown (-1).
func TestDurabilityInfoRefused(t *testing.T) {
	ctx := context.Background()
	rs := testutil.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "proxy", "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	var buf testutil.LogBuffer
	p := durabilityProxy(t, rs, &buf, func(c *config.Config) {
		c.SeenSet.Redis.Username = "proxy"
		c.SeenSet.Redis.Password = "pw"
	})
	testutil.Eventually(t, 10*time.Second, "INFO refusal logged", func() bool {
		return len(warnLines(t, &buf, "refused INFO")) > 0
	})
	for range 3 {
		if !p.d.durable.read(ctx) {
			t.Fatal("durability read failed")
		}
	}
	code, body := adminDo(t, p, "GET", "/readyz", "")
	if code != http.StatusOK || !strings.HasPrefix(body, "source orders: ok\nseenset: ok (redis standalone, 1 master, replicas unknown)\nseenset durability: warning: redis "+rs.Addr()+" refused INFO (NOPERM") {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	if ws := warnLines(t, &buf, "refused INFO"); len(ws) != 1 {
		t.Fatalf("refusal logged %d times, want once: %q", len(ws), ws)
	}
	if e, pe := p.gauge(t, "dedupe_proxy_seenset_evicting"), p.gauge(t, "dedupe_proxy_seenset_persistent"); e != -1 || pe != -1 {
		t.Fatalf("gauges evicting %v persistent %v, want -1 -1", e, pe)
	}
}

// A seen-set that does not answer at start is said once, at start, before
// any message needs it; once it answers, the proxy goes on.
func TestSeenSetUnreachableAtStartLoggedOnce(t *testing.T) {
	rs := testutil.StartRedis(t)
	addr := rs.Addr()
	rs.Kill()
	var buf testutil.LogBuffer
	h := newHarness(t, func(c *config.Config) { c.SeenSet.Redis.Addrs = []string{addr} })
	d, err := New(&h.cfg, Deps{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	testutil.Eventually(t, 10*time.Second, "the start-up warning", func() bool {
		return len(warnLines(t, &buf, "seen-set unreachable at start")) == 1
	})
	time.Sleep(6 * time.Second) // the check reads again every 5 s
	if n := len(warnLines(t, &buf, "seen-set unreachable at start")); n != 1 {
		t.Fatalf("%d start-up warnings, want 1", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
