package seenset_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Every server here is private: the shared one must never be
// reconfigured, and its own configuration is not the test's to choose.

func durabilityOf(t *testing.T, o seenset.RedisOptions) seenset.Durability {
	t.Helper()
	s, err := seenset.NewRedis(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := s.Durability(ctx)
	if err != nil {
		t.Fatalf("Durability: %v", err)
	}
	return d
}

func wantWarnings(t *testing.T, d seenset.Durability, subs ...string) {
	t.Helper()
	ws := d.Warnings()
	if len(ws) != len(subs) {
		t.Fatalf("warnings %q, want %d", ws, len(subs))
	}
	for i, sub := range subs {
		if !strings.Contains(ws[i], sub) {
			t.Errorf("warning %d = %q, want it to contain %q", i, ws[i], sub)
		}
	}
}

func TestRedisDurabilityStandalone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                 string
		args                 []string
		policy               string
		aof, rdb             seenset.Fact
		evicting, persistent seenset.Fact
		warnings             []string
	}{
		{
			name:   "volatile-lru without persistence",
			args:   []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"},
			policy: "volatile-lru", aof: seenset.FactNo, rdb: seenset.FactNo,
			evicting: seenset.FactYes, persistent: seenset.FactNo,
			warnings: []string{"maxmemory-policy is volatile-lru (maxmemory 67108864 bytes)", "has neither AOF nor RDB"},
		},
		{
			name:   "noeviction with AOF",
			args:   []string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction", "--appendonly", "yes"},
			policy: "noeviction", aof: seenset.FactYes, rdb: seenset.FactUnknown,
			evicting: seenset.FactNo, persistent: seenset.FactYes,
		},
		{
			name:   "RDB save points",
			args:   []string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction", "--save", "3600 1"},
			policy: "noeviction", aof: seenset.FactNo, rdb: seenset.FactYes,
			evicting: seenset.FactNo, persistent: seenset.FactYes,
		},
		{
			// Without maxmemory Redis never evicts, whatever the policy.
			name:   "allkeys-lru without a limit",
			args:   []string{"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru", "--appendonly", "yes"},
			policy: "allkeys-lru", aof: seenset.FactYes, rdb: seenset.FactUnknown,
			evicting: seenset.FactNo, persistent: seenset.FactYes,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testutil.StartRedisWith(t, tc.args...)
			d := durabilityOf(t, seenset.RedisOptions{Addrs: []string{srv.Addr()}})
			if len(d.Servers) != 1 {
				t.Fatalf("servers %+v", d.Servers)
			}
			s := d.Servers[0]
			if s.Addr != srv.Addr() || s.MaxmemoryPolicy != tc.policy || s.AOF != tc.aof || s.RDB != tc.rdb ||
				s.InfoErr != nil || s.SaveErr != nil {
				t.Fatalf("server %+v", s)
			}
			if d.Evicting() != tc.evicting || d.Persistent() != tc.persistent {
				t.Fatalf("evicting %v persistent %v, want %v %v", d.Evicting(), d.Persistent(), tc.evicting, tc.persistent)
			}
			wantWarnings(t, d, tc.warnings...)
		})
	}
}

// A user without INFO, or without CONFIG, gets "unknown" and a warning
// saying so, not an error: the store itself still works.
func TestRedisDurabilityRefused(t *testing.T) {
	t.Parallel()
	srv := testutil.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	for user, rule := range map[string]string{"noinfo": "-info", "noconfig": "-config"} {
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", rule).Err(); err != nil {
			t.Fatal(err)
		}
	}

	d := durabilityOf(t, seenset.RedisOptions{Addrs: []string{srv.Addr()}, Username: "noinfo", Password: "pw"})
	s := d.Servers[0]
	if s.InfoErr == nil || !strings.Contains(s.InfoErr.Error(), "NOPERM") || d.Evicting() != seenset.FactUnknown || d.Persistent() != seenset.FactUnknown {
		t.Fatalf("without INFO: %+v evicting %v persistent %v", s, d.Evicting(), d.Persistent())
	}
	wantWarnings(t, d, "refused INFO")

	d = durabilityOf(t, seenset.RedisOptions{Addrs: []string{srv.Addr()}, Username: "noconfig", Password: "pw"})
	s = d.Servers[0]
	if s.InfoErr != nil || s.SaveErr == nil || s.AOF != seenset.FactNo || s.RDB != seenset.FactUnknown ||
		d.Evicting() != seenset.FactNo || d.Persistent() != seenset.FactUnknown {
		t.Fatalf("without CONFIG: %+v evicting %v persistent %v", s, d.Evicting(), d.Persistent())
	}
	wantWarnings(t, d, "refused CONFIG GET save")
}

// A server that cannot be reached is an outage, not an unknown.
func TestRedisDurabilityUnavailable(t *testing.T) {
	t.Parallel()
	srv := testutil.StartRedis(t)
	s, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{srv.Addr()}, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Durability(ctx); !errors.Is(err, seenset.ErrUnavailable) {
		t.Fatalf("Durability with the server down: %v, want ErrUnavailable", err)
	}
}

// On Cluster every master is asked: one evicting, unpersisted master is
// enough to lose keys.
func TestRedisDurabilityCluster(t *testing.T) {
	t.Parallel()
	cluster := []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "2000"}
	a := testutil.StartRedisWith(t, append(cluster, "--appendonly", "yes")...)
	b := testutil.StartRedisWith(t, append(cluster, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lfu")...)
	ctx := context.Background()
	ca := redis.NewClient(&redis.Options{Addr: a.Addr()})
	cb := redis.NewClient(&redis.Options{Addr: b.Addr()})
	t.Cleanup(func() { _ = ca.Close(); _ = cb.Close() })
	if err := ca.ClusterAddSlotsRange(ctx, 0, 8191).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cb.ClusterAddSlotsRange(ctx, 8192, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(b.Addr(), ":")
	if err := ca.ClusterMeet(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "cluster state ok on both nodes", func() bool {
		for _, c := range []*redis.Client{ca, cb} {
			if info, err := c.ClusterInfo(ctx).Result(); err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})

	d := durabilityOf(t, seenset.RedisOptions{Addrs: []string{a.Addr(), b.Addr()}})
	if len(d.Servers) != 2 {
		t.Fatalf("servers %+v, want both masters", d.Servers)
	}
	by := map[string]seenset.ServerDurability{}
	for _, s := range d.Servers {
		by[s.Addr] = s
	}
	if s := by[a.Addr()]; s.Evicting() != seenset.FactNo || s.Persistent() != seenset.FactYes {
		t.Fatalf("master a: %+v", s)
	}
	if s := by[b.Addr()]; s.Evicting() != seenset.FactYes || s.Persistent() != seenset.FactNo {
		t.Fatalf("master b: %+v", s)
	}
	if d.Evicting() != seenset.FactYes || d.Persistent() != seenset.FactNo {
		t.Fatalf("cluster: evicting %v persistent %v", d.Evicting(), d.Persistent())
	}
	// A cluster without replicas: Describe says so for each master.
	r, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{a.Addr(), b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	topo, err := r.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topo.String() != "cluster, 2 masters, 0 replicas each" || len(topo.Warnings) != 2 ||
		!strings.Contains(topo.Warnings[0], "has no connected replica") {
		t.Fatalf("topology %q, warnings %q", topo.String(), topo.Warnings)
	}
	ws := d.Warnings()
	if len(ws) != 2 || !strings.HasPrefix(ws[0], "redis "+b.Addr()+" maxmemory-policy is allkeys-lfu") ||
		!strings.HasPrefix(ws[1], "redis "+b.Addr()+" has neither AOF nor RDB") {
		t.Fatalf("warnings %q", ws)
	}
}

// A full noeviction Redis refuses new keys rather than dropping old ones:
// Claim fails as ErrUnavailable, so the pipeline holds the message
// (fails closed) instead of forgetting what it has done.
func TestRedisFullNoevictionRefusesClaims(t *testing.T) {
	t.Parallel()
	srv := testutil.StartRedisWith(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	s, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	for i := 0; ; i++ {
		if i == 100000 {
			t.Fatal("100000 claims in 2mb without a refusal")
		}
		_, err := s.Claim(ctx, "k"+strings.Repeat("x", 100)+strconv.Itoa(i), "tok", time.Hour)
		if err == nil {
			continue
		}
		if !errors.Is(err, seenset.ErrUnavailable) || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("claim %d: %v, want ErrUnavailable with OOM", i, err)
		}
		break
	}
	if st, err := s.Status(ctx, "k"+strings.Repeat("x", 100)+"0"); err != nil || st.State != seenset.Inflight {
		t.Fatalf("first key after the refusal: %+v, %v (evicted?)", st, err)
	}
}
