package main

import (
	"errors"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/twmb/franz-go/pkg/kfake"
)

// embeddedRedis is an in-process server speaking the Redis protocol
// (miniredis), with Lua, so the seen-set's scripts run unchanged and the
// two proxy processes share it over TCP as they would a real Redis.
//
// miniredis does not expire keys on its own: TTLs only move when its
// clock is fast-forwarded. A ticker forwards it by the real time that
// passed, so leases and done-key TTLs expire as on a real Redis, to
// within one tick.
type embeddedRedis struct {
	m    *miniredis.Miniredis
	stop chan struct{}
	done sync.WaitGroup
}

// expiryTick is how late a key may expire; well under the shortest lease
// the seen-set is given (the conformance suite's 200 ms).
const expiryTick = 5 * time.Millisecond

func startEmbeddedRedis() (*embeddedRedis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, err
	}
	r := &embeddedRedis{m: m, stop: make(chan struct{})}
	r.done.Go(func() {
		t := time.NewTicker(expiryTick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-r.stop:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	})
	return r, nil
}

func (r *embeddedRedis) addr() string { return r.m.Addr() }

func (r *embeddedRedis) close() {
	close(r.stop)
	r.done.Wait()
	r.m.Close()
}

// embeddedKafka is kfake, franz-go's in-process Kafka, speaking the real
// protocol over TCP on 127.0.0.1, with one broker and the demo's topic.
type embeddedKafka struct {
	c     *kfake.Cluster
	addrs []string
}

func startEmbeddedKafka(topic string, partitions int) (*embeddedKafka, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic))
	if err != nil {
		return nil, err
	}
	// ListenAddrs hangs after Close: read it now.
	addrs := c.ListenAddrs()
	if len(addrs) == 0 {
		c.Close()
		return nil, errors.New("kfake has no listener")
	}
	return &embeddedKafka{c: c, addrs: addrs}, nil
}

func (k *embeddedKafka) close() { k.c.Close() }
