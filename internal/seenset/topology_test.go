package seenset_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset/storetest"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// One Redis Cluster (3 masters, 1 replica each) and one Sentinel group
// (master, 2 replicas, 3 sentinels) serve every test of the package; each
// test keeps to its own key prefix. Tests that pause a node do not run in
// parallel, so the others never see it.
var (
	clusterOnce, sentinelOnce sync.Once
	cluster                   *testutil.RedisCluster
	sentinel                  *testutil.RedisSentinel
	clusterErr, sentinelErr   error
)

func sharedCluster(t testing.TB) *testutil.RedisCluster {
	t.Helper()
	clusterOnce.Do(func() { cluster, clusterErr = testutil.NewRedisCluster(testutil.RedisClusterOptions{}) })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

func sharedSentinel(t testing.TB) *testutil.RedisSentinel {
	t.Helper()
	sentinelOnce.Do(func() { sentinel, sentinelErr = testutil.NewRedisSentinel(testutil.RedisSentinelOptions{}) })
	if sentinelErr != nil {
		t.Fatal(sentinelErr)
	}
	return sentinel
}

func closeTopologies() {
	if cluster != nil {
		cluster.Close()
	}
	if sentinel != nil {
		sentinel.Close()
	}
}

// waitTimeout is generous: a replica's acknowledgement normally takes a
// round trip, but the race detector on a busy 2-core machine can stretch
// it, and a conformance case must not fail for that.
const waitTimeout = 2 * time.Second

func clusterStore(t testing.TB, wait int) *seenset.Redis {
	t.Helper()
	return newTopologyStore(t, seenset.RedisOptions{Addrs: sharedCluster(t).Addrs(), WaitReplicas: wait, WaitTimeout: waitTimeout})
}

func sentinelStore(t testing.TB, wait int) *seenset.Redis {
	t.Helper()
	s := sharedSentinel(t)
	return newTopologyStore(t, seenset.RedisOptions{Addrs: s.SentinelAddrs(), MasterName: s.MasterName, WaitReplicas: wait, WaitTimeout: waitTimeout})
}

func newTopologyStore(t testing.TB, o seenset.RedisOptions) *seenset.Redis {
	t.Helper()
	o.Prefix = randomPrefix(t)
	s, err := seenset.NewRedis(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The conformance suite on Redis Cluster: every transition is one command
// or script on one key, so each runs on the key's master; batches span
// masters (go-redis splits a pipeline by slot).
func TestRedisClusterConformance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		wait    int
		scripts bool
	}{{"plain", 0, false}, {"scripts", 0, true}, {"wait1", 1, false}, {"wait1scripts", 1, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) seenset.Store {
				s := clusterStore(t, c.wait)
				if c.scripts {
					seenset.UseScriptsOnly(s)
				}
				return s
			})
		})
	}
}

func TestRedisSentinelConformance(t *testing.T) {
	t.Parallel()
	for _, wait := range []int{0, 2} {
		t.Run(fmt.Sprintf("wait%d", wait), func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) seenset.Store { return sentinelStore(t, wait) })
		})
	}
}

// A batch (ClaimMany, CommitMany, and the batcher's pipeline of many
// callers' claims) whose keys live on every master gets every answer
// right, and the keys land on their own masters.
func TestRedisClusterBatchesSpanMasters(t *testing.T) {
	t.Parallel()
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait%d", wait), func(t *testing.T) {
			t.Parallel()
			s := clusterStore(t, wait)
			ctx := context.Background()
			var items []seenset.KeyToken
			for i := range 300 {
				items = append(items, seenset.KeyToken{Key: fmt.Sprintf("orders:%d", i), Token: "A"})
			}
			for i, r := range s.ClaimMany(ctx, items, time.Minute) {
				if r.Err != nil || r.Result != seenset.Claimed {
					t.Fatalf("ClaimMany item %d: %v %v", i, r.Result, r.Err)
				}
			}
			for i, err := range s.CommitMany(ctx, items, time.Hour) {
				if err != nil {
					t.Fatalf("CommitMany item %d: %v", i, err)
				}
			}
			// Many callers at once: the batcher pipelines their claims.
			var wg sync.WaitGroup
			errs := make([]error, len(items))
			for i, it := range items {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := s.Claim(ctx, it.Key, "B", time.Minute)
					if err == nil && res != seenset.Duplicate {
						err = fmt.Errorf("got %v, want duplicate", res)
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			perMaster := keysPerMaster(t, s)
			if len(perMaster) != 3 {
				t.Fatalf("keys on %d masters, want all 3: %v", len(perMaster), perMaster)
			}
			total := 0
			for _, n := range perMaster {
				total += n
			}
			if total != len(items) {
				t.Fatalf("%d keys stored, want %d", total, len(items))
			}
		})
	}
}

// keysPerMaster counts s's keys on each master of the shared cluster.
func keysPerMaster(t *testing.T, s *seenset.Redis) map[string]int {
	t.Helper()
	prefix := seenset.PrefixOf(s)
	out := map[string]int{}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: sharedCluster(t).Addrs()})
	defer cc.Close()
	var mu sync.Mutex
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, prefix+"*").Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			mu.Lock()
			out[c.Options().Addr] = len(keys)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// With a replica wait, a claim on a master whose replica does not answer
// fails (ErrUnavailable) once the wait times out, while keys of other
// masters go on; the claim's write stands, so the claimer's retry under
// its own token succeeds once the replica is back. Not parallel: it
// pauses a replica of the shared cluster.
func TestRedisClusterWaitFailsClosedWithoutReplica(t *testing.T) {
	c := sharedCluster(t)
	s := newTopologyStore(t, seenset.RedisOptions{Addrs: c.Addrs(), WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	prefix := seenset.PrefixOf(s)
	stuck, free := "", ""
	var master *testutil.RedisNode
	for i := 0; stuck == "" || free == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		m, err := c.MasterOf(ctx, prefix+k)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case master == nil:
			master, stuck = m, k
		case m != master && free == "":
			free = k
		}
	}
	replica, err := c.ReplicaOf(ctx, master)
	if err != nil {
		t.Fatal(err)
	}
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(ctx, stuck, "A", time.Minute)
	// The other masters' replicas answer; under load one may miss the
	// short timeout, and the claimer's retry then takes the key.
	var ferr error
	for range 20 {
		if _, ferr = s.Claim(ctx, free, "A", time.Minute); ferr == nil {
			break
		}
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, seenset.ErrUnavailable) || !strings.Contains(err.Error(), "not enough replicas") {
		t.Fatalf("claim with the replica paused: %v, want ErrUnavailable (not enough replicas)", err)
	}
	if ferr != nil {
		t.Fatalf("claim on another master: %v", ferr)
	}
	testutil.Eventually(t, 10*time.Second, "the claimer's retry succeeds", func() bool {
		res, err := s.Claim(ctx, stuck, "A", time.Minute)
		return err == nil && res == seenset.Claimed
	})
	if res, err := s.Claim(ctx, stuck, "B", time.Minute); err != nil || res != seenset.Busy {
		t.Fatalf("another claimer: %v %v, want busy", res, err)
	}
}

// Waiting for more replicas than there are fails every write, and
// Describe says why.
func TestRedisSentinelWaitForMissingReplicas(t *testing.T) {
	t.Parallel()
	s := newTopologyStore(t, seenset.RedisOptions{Addrs: sharedSentinel(t).SentinelAddrs(), MasterName: sharedSentinel(t).MasterName,
		WaitReplicas: 3, WaitTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	if _, err := s.Claim(ctx, "k", "A", time.Minute); !errors.Is(err, seenset.ErrUnavailable) {
		t.Fatalf("claim waiting for 3 of 2 replicas: %v, want ErrUnavailable", err)
	}
	if err := s.Commit(ctx, "k", "A", time.Minute); !errors.Is(err, seenset.ErrUnavailable) {
		t.Fatalf("commit waiting for 3 of 2 replicas: %v, want ErrUnavailable", err)
	}
	topo, err := s.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Warnings) != 1 || !strings.Contains(topo.Warnings[0], "wait_replicas is 3") {
		t.Fatalf("warnings %q", topo.Warnings)
	}
}

func TestDescribeRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, sn := sharedCluster(t), sharedSentinel(t)
	single := testutil.StartRedis(t)
	for _, tc := range []struct {
		name string
		o    seenset.RedisOptions
		want string
		warn string
	}{
		{"cluster", seenset.RedisOptions{Addrs: c.Addrs()}, "cluster, 3 masters, 1 replica each", ""},
		{"sentinel", seenset.RedisOptions{Addrs: sn.SentinelAddrs(), MasterName: sn.MasterName}, "sentinel, 1 master, 2 replicas", ""},
		{"standalone", seenset.RedisOptions{Addrs: []string{single.Addr()}}, "standalone, 1 master, 0 replicas", ""},
		{"one cluster node", seenset.RedisOptions{Addrs: c.Addrs()[:1]}, "standalone, 1 master, 1 replica", "is a Cluster node but seenset.redis.addrs lists one address"},
		{"a replica", seenset.RedisOptions{Addrs: []string{c.Replicas[0].Addr()}}, "standalone, 1 master, replicas unknown", "is a slave, not a master"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := seenset.DescribeRedis(ctx, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := topo.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
			switch {
			case tc.warn == "" && len(topo.Warnings) != 0:
				t.Errorf("warnings %q, want none", topo.Warnings)
			case tc.warn != "" && (len(topo.Warnings) == 0 || !strings.Contains(strings.Join(topo.Warnings, "; "), tc.warn)):
				t.Errorf("warnings %q, want one containing %q", topo.Warnings, tc.warn)
			}
		})
	}
	if _, err := seenset.DescribeRedis(ctx, seenset.RedisOptions{Addrs: []string{"127.0.0.1:1"}, DialTimeout: 100 * time.Millisecond}); !errors.Is(err, seenset.ErrUnavailable) {
		t.Fatalf("unreachable: %v, want ErrUnavailable", err)
	}
}

// Sentinels that require a password: the store works with
// SentinelPassword, and without it (or with a wrong one) every call fails
// with an error that says the sentinels refused the credentials rather
// than only "unreachable".
func TestRedisSentinelAuth(t *testing.T) {
	t.Parallel()
	sn := testutil.StartRedisSentinel(t, testutil.RedisSentinelOptions{Replicas: 1, SentinelPassword: "sentinel-s3cret"})
	ctx := context.Background()
	s := newTopologyStore(t, seenset.RedisOptions{Addrs: sn.SentinelAddrs(), MasterName: sn.MasterName, SentinelPassword: "sentinel-s3cret"})
	if res, err := s.Claim(ctx, "k", "A", time.Minute); err != nil || res != seenset.Claimed {
		t.Fatalf("claim with the sentinel password: %v %v", res, err)
	}
	if err := s.Commit(ctx, "k", "A", time.Minute); err != nil {
		t.Fatalf("commit with the sentinel password: %v", err)
	}
	if topo, err := s.Describe(ctx); err != nil || topo.String() != "sentinel, 1 master, 1 replica" {
		t.Fatalf("describe with the sentinel password: %v %v", topo, err)
	}

	for _, pw := range []string{"", "wrong"} {
		bad := newTopologyStore(t, seenset.RedisOptions{Addrs: sn.SentinelAddrs(), MasterName: sn.MasterName, SentinelPassword: pw,
			DialTimeout: time.Second})
		_, err := bad.Claim(ctx, "k2", "B", time.Minute)
		if !errors.Is(err, seenset.ErrUnavailable) || !strings.Contains(err.Error(), "sentinel_password") {
			t.Errorf("claim with sentinel password %q: %v, want ErrUnavailable naming sentinel_password", pw, err)
		}
		err = bad.Ping(ctx)
		if err == nil || !strings.Contains(err.Error(), "sentinels refused") {
			t.Errorf("ping with sentinel password %q: %v", pw, err)
		}
		t.Logf("sentinel password %q: %v", pw, err)
	}
}
