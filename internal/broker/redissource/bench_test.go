package redissource_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedupe-proxy/dedupe-proxy/internal/broker"
	"github.com/dedupe-proxy/dedupe-proxy/internal/broker/redissource"
	"github.com/dedupe-proxy/dedupe-proxy/internal/testutil"
)

// Consume-and-ack throughput of one source with 16 workers against the
// local Redis, 200-byte elements (the pipeline and app not included).
func BenchmarkListConsumeAck(b *testing.B) {
	q := newQueue(b, testutil.RedisAddr())
	fill(b, b.N, func(p redis.Pipeliner, v []byte) { p.RPush(context.Background(), q.name, v) }, q.rdb)
	src, err := redissource.New(redissource.Options{Name: "bench", Addrs: []string{testutil.RedisAddr()}, Queue: q.name, Workers: 16})
	if err != nil {
		b.Fatal(err)
	}
	drain(b, src)
}

func BenchmarkStreamConsumeAck(b *testing.B) {
	q := newQueue(b, testutil.RedisAddr())
	fill(b, b.N, func(p redis.Pipeliner, v []byte) {
		p.XAdd(context.Background(), &redis.XAddArgs{Stream: q.name, Values: map[string]any{"body": v}})
	}, q.rdb)
	src, err := redissource.NewStream(redissource.Options{Name: "bench", Addrs: []string{testutil.RedisAddr()}, Stream: q.name,
		Group: testutil.UniqueName("bench-"), Workers: 16})
	if err != nil {
		b.Fatal(err)
	}
	drain(b, src)
}

func fill(b *testing.B, n int, add func(redis.Pipeliner, []byte), rdb redis.UniversalClient) {
	b.Helper()
	for i := 0; i < n; i += 1000 {
		_, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			for j := i; j < min(n, i+1000); j++ {
				add(p, fmt.Appendf(nil, `{"meta":{"id":"%012d"},"data":"%0170d"}`, j, 0))
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func drain(b *testing.B, src broker.Source) {
	b.Helper()
	var n atomic.Int64
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	b.ResetTimer()
	go func() {
		ran <- src.Run(ctx, func(d broker.Delivery) {
			if err := d.Ack(context.Background()); err != nil {
				b.Error(err)
			}
			if n.Add(1) == int64(b.N) {
				close(done)
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d in 5 minutes", n.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	cancel()
	if err := <-ran; err != nil {
		b.Error(err)
	}
	_ = src.Close()
}
