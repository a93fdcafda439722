package seenset_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// The sizing figures of docs/redis.md come from these benchmarks, each
// against private servers:
//
//	go test -run '^$' -bench BytesPerKey -benchtime 1x ./internal/seenset/          (bytes)
//	go test -run '^$' -bench TopologyClaimCommit -benchtime 5s ./internal/seenset/ (msgs/s)

// BenchmarkRedisBytesPerKey remembers 100,000 keys (claim, then commit
// with a 24 h TTL, through the store as the proxy does) and reports the
// server's used_memory growth per key: the key, its value, its expiry and
// the hash-table entries for both. b.N is ignored: the figure does not
// depend on it.
func BenchmarkRedisBytesPerKey(b *testing.B) {
	const n = 100000
	uuid := "3f2b8c1e-9a4d-4e7f-b1c2-8d9e0f1a2" // + 5 digits: 36 characters
	for _, tc := range []struct {
		name, key string
		hashOver  int
		digest    bool // tokens carry a body digest (seenset.WithDigest), as the proxy's do
	}{
		// "<consumer>:<source>:<meta.id>" as the proxy stores it; the
		// default prefix dedupe: comes on top.
		{"short-id", "billing:payments:pay-%06d", 0, false},
		{"meta.id-36", "billing:payments:" + uuid[:31] + "%05d", 0, false},
		{"key-200", "billing:payments:" + strings.Repeat("y", 171) + "%05d", 0, false},
		// The same keys with seenset.redis.hash_keys_over: 64.
		{"meta.id-36-hash64", "billing:payments:" + uuid[:31] + "%05d", 64, false},
		{"key-200-hash64", "billing:payments:" + strings.Repeat("y", 171) + "%05d", 64, false},
		// The proxy's tokens since key reuse is detected.
		{"short-id-digest", "billing:payments:pay-%06d", 0, true},
		{"meta.id-36-digest", "billing:payments:" + uuid[:31] + "%05d", 0, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := testutil.StartRedis(b)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer c.Close()
			s, err := seenset.NewRedis(seenset.RedisOptions{Addrs: []string{srv.Addr()}, Prefix: "dedupe:", HashKeysOver: tc.hashOver})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			before := usedMemory(b, c)
			// Tokens shaped like the pipeline's: 11 base64url characters
			// (64 random bits), then a base-36 counter.
			for i := 0; i < n; i += 1000 {
				var items []seenset.KeyToken
				for j := i; j < i+1000; j++ {
					tok := "nzpsLht9T4A" + strconv.FormatInt(int64(j), 36)
					if tc.digest {
						tok = seenset.WithDigest(tok, seenset.SumDigest([]byte(tok)))
					}
					items = append(items, seenset.KeyToken{Key: fmt.Sprintf(tc.key, j%1000000), Token: tok})
				}
				for _, r := range s.ClaimMany(ctx, items, 30*time.Second) {
					if r.Err != nil || r.Result != seenset.Claimed {
						b.Fatalf("claim: %v %v", r.Result, r.Err)
					}
				}
				for _, err := range s.CommitMany(ctx, items, 24*time.Hour) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			if keys := c.DBSize(ctx).Val(); keys != n {
				b.Fatalf("%d keys stored, want %d", keys, n)
			}
			// Let the incremental rehash of the key and expiry tables
			// finish: while it runs both the old and the new table count.
			time.Sleep(2 * time.Second)
			b.ReportMetric(float64(usedMemory(b, c)-before)/n, "B/key")
			b.ReportMetric(float64(len("dedupe:"+fmt.Sprintf(tc.key, 0))), "key-bytes")
			// MEMORY USAGE of one key: what Redis itself counts for it.
			var mu int64
			for j := 0; j < n; j += n / 10 {
				mu += c.MemoryUsage(ctx, "dedupe:"+fmt.Sprintf(tc.key, j)).Val()
			}
			b.ReportMetric(float64(mu)/10, "MEMORY-USAGE-B")
		})
	}
}

func usedMemory(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	txt, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(txt, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}

// BenchmarkRedisTopologyClaimCommit is a forwarded message's seen-set cost: a
// claim and a commit of a fresh key, from 64 goroutines (the batcher
// pipelines them), on one standalone server, a Sentinel group and a
// 3-master Cluster, with and without a replica wait.
func BenchmarkRedisTopologyClaimCommit(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts func(b *testing.B) seenset.RedisOptions
	}{
		{"standalone", func(b *testing.B) seenset.RedisOptions {
			return seenset.RedisOptions{Addrs: []string{testutil.StartRedis(b).Addr()}}
		}},
		{"sentinel-wait0", func(b *testing.B) seenset.RedisOptions {
			s := sharedSentinel(b)
			return seenset.RedisOptions{Addrs: s.SentinelAddrs(), MasterName: s.MasterName}
		}},
		{"sentinel-wait1", func(b *testing.B) seenset.RedisOptions {
			s := sharedSentinel(b)
			return seenset.RedisOptions{Addrs: s.SentinelAddrs(), MasterName: s.MasterName, WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond}
		}},
		{"cluster-wait0", func(b *testing.B) seenset.RedisOptions {
			return seenset.RedisOptions{Addrs: sharedCluster(b).Addrs()}
		}},
		{"cluster-wait1", func(b *testing.B) seenset.RedisOptions {
			return seenset.RedisOptions{Addrs: sharedCluster(b).Addrs(), WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := tc.opts(b)
			o.Prefix = randomPrefix(b)
			s, err := seenset.NewRedis(o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			var seq atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := "k" + strconv.FormatInt(seq.Add(1), 36)
					if res, err := s.Claim(ctx, k, "t", time.Minute); err != nil || res != seenset.Claimed {
						b.Errorf("claim: %v %v", res, err)
						return
					}
					if err := s.Commit(ctx, k, "t", time.Minute); err != nil {
						b.Errorf("commit: %v", err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
