package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisBroker is a type: redis source in one mode (list: BabelQueue's
// reliable queue; stream: a consumer group) on the broker Redis, a second
// private redis-server. Not the seen-set's server: its INFO counters
// (round trips and commands per message, the Redis CPU column) would
// then mix the broker's commands with the seen-set's and stop being
// comparable with the other brokers' rows; its own process gives the
// broker CPU column, as RabbitMQ's does.
type redisBroker struct {
	o      options
	mode   string // "list" or "stream"
	server *redisServer
	c      *redis.Client
}

// startBrokerRedis starts the broker Redis, in a folder of its own (its
// log beside the seen-set Redis' would mix).
func startBrokerRedis(ctx context.Context, o options, dir string) (*redisServer, error) {
	dir = filepath.Join(dir, "broker-redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return startRedis(ctx, o.redisBin, dir)
}

func newRedisBroker(o options, s *redisServer, mode string) *redisBroker {
	return &redisBroker{o: o, mode: mode, server: s, c: redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 4})}
}

func (r *redisBroker) name() string  { return "Redis " + r.mode + " (private redis-server)" }
func (r *redisBroker) short() string { return "redis-" + r.mode }
func (r *redisBroker) close()        { _ = r.c.Close() }

func (r *redisBroker) serverPID() int { return r.server.cmd.Process.Pid }

// brokerRedisCost is what one drain cost the broker Redis per message:
// round trips, commands (the commands inside Lua scripts counted, as
// INFO commandstats counts them), script calls, and the commands by name.
type brokerRedisCost struct {
	trips, cmds, scripts float64
	byCmd                map[string]float64
}

func newBrokerRedisCost(after, before redisStats, n int) *brokerRedisCost {
	d := after.sub(before)
	c := &brokerRedisCost{trips: float64(d.trips) / float64(n), cmds: float64(d.cmds) / float64(n),
		scripts: float64(d.scripts) / float64(n), byCmd: map[string]float64{}}
	for name, v := range d.calls {
		c.byCmd[name] = float64(v) / float64(n)
	}
	return c
}

// top is the commands that cost at least 0.005 per message, most first:
// "evalsha 1.00, lmove 1.00, …".
func (c *brokerRedisCost) top() string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range c.byCmd {
		if v >= 0.005 {
			all = append(all, kv{k, v})
		}
	}
	slices.SortFunc(all, func(a, b kv) int {
		if a.v != b.v {
			return cmp.Compare(b.v, a.v)
		}
		return strings.Compare(a.k, b.k)
	})
	parts := make([]string, len(all))
	for i, x := range all {
		parts[i] = fmt.Sprintf("%s %.2f", x.k, x.v)
	}
	return strings.Join(parts, ", ")
}

func (r *redisBroker) newDest(_ context.Context, id string) (dest, error) {
	return &redisDest{b: r, key: id}, nil
}

// redisDest is one row's list or stream; the stream's group is the
// proxy's consumer name (bench), as the proxy names it.
type redisDest struct {
	b   *redisBroker
	key string
}

const benchGroup = "bench"

// cleanup deletes the list or stream and every key under its hash tag
// (the proxy's processing lists, heartbeats, sessions).
func (d *redisDest) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := []string{d.key}
	iter := d.b.c.Scan(ctx, 0, "{"+d.key+"}*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	_ = d.b.c.Del(ctx, keys...).Err()
}

// inflightBound: each of the workers handles one message at a time.
func (d *redisDest) inflightBound() int { return d.b.o.workers }

func (d *redisDest) setOrdering(string) {}

func (d *redisDest) proxySource() string {
	what := "queue"
	if d.b.mode == "stream" {
		what = "stream"
	}
	return fmt.Sprintf(`    type: redis
    redis:
      addrs: ["%s"]
      mode: %s
      %s: "%s"
      workers: %d
`, d.b.server.addr, d.b.mode, what, d.key, d.b.o.workers)
}

func (d *redisDest) bareArgs() []string {
	return []string{"-broker", "redis", "-redis", d.b.server.addr, "-redis-mode", d.b.mode, "-queue", d.key,
		"-group", benchGroup, "-workers", strconv.Itoa(d.b.o.workers)}
}

// add appends one message: RPUSH of the body (a BabelQueue producer), or
// XADD with the body in field body.
func (d *redisDest) add(ctx context.Context, p redis.Cmdable, body []byte) {
	if d.b.mode == "list" {
		p.RPush(ctx, d.key, body)
		return
	}
	p.XAdd(ctx, &redis.XAddArgs{Stream: d.key, Values: []any{"body", body}})
}

// publish sends pipelined, 1,000 commands a round trip; every reply is
// checked.
func (d *redisDest) publish(ctx context.Context, n int, key func(int) string, body func(int64, string) []byte) error {
	ts := nowNanos()
	const chunk = 1000
	for i := 0; i < n; i += chunk {
		cmds, err := d.b.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+chunk, n); j++ {
				k := key(j)
				d.add(ctx, p, body(ts, k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(cmds) != min(chunk, n-i) {
			return fmt.Errorf("%d replies for %d messages", len(cmds), min(chunk, n-i))
		}
	}
	return nil
}

func (d *redisDest) pacer(context.Context) (pacer, error) { return &redisPacer{d: d}, nil }

// redisPacer sends each message with its own command: Redis holds it
// when the reply comes (about 0.1 ms on loopback, as a confirm).
type redisPacer struct{ d *redisDest }

func (p *redisPacer) send(_ string, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmds, err := p.d.b.c.Pipelined(ctx, func(pl redis.Pipeliner) error { p.d.add(ctx, pl, body); return nil })
	if err == nil && len(cmds) != 1 {
		err = errors.New("no reply")
	}
	return err
}

func (p *redisPacer) close() error { return nil }

// bareRedis is the consumer users write by hand on a Redis source, one
// loop per worker: mode list reserves with BLMOVE into a processing list
// of its own and acks with LREM; mode stream reads one entry for the
// group with XREADGROUP and acks with XACK. A failed POST is retried
// after 100 ms, as the bare Kafka forwarder does.
func bareRedis(ctx context.Context, o bareOptions, st *bareStats, fwd *forwarder) error {
	c := redis.NewClient(&redis.Options{Addr: o.redisAddr, PoolSize: o.workers + 2})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	if o.redisMode == "stream" {
		if err := c.XGroupCreateMkStream(ctx, o.queue, o.group, "0").Err(); err != nil && err.Error() != "BUSYGROUP Consumer Group name already exists" {
			return fmt.Errorf("create group: %w", err)
		}
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil && ctx.Err() == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	for w := range o.workers {
		name := fmt.Sprintf("bare-%d-%d", os.Getpid(), w)
		wg.Go(func() {
			var err error
			if o.redisMode == "list" {
				err = bareRedisList(ctx, c, o.queue, "{"+o.queue+"}:bare:"+name, st, fwd)
			} else {
				err = bareRedisStream(ctx, c, o.queue, o.group, name, st, fwd)
			}
			if err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	return firstErr
}

func bareRedisList(ctx context.Context, c *redis.Client, queue, processing string, st *bareStats, fwd *forwarder) error {
	for ctx.Err() == nil {
		body, err := c.BLMove(ctx, queue, processing, "LEFT", "RIGHT", time.Second).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("BLMOVE: %w", err)
		}
		if !postUntilDone(ctx, fwd, body) {
			return nil // left in the processing list, as a stopped replica leaves it
		}
		if err := c.LRem(context.WithoutCancel(ctx), processing, 1, body).Err(); err != nil {
			return fmt.Errorf("LREM: %w", err)
		}
		st.done(body)
	}
	return nil
}

func bareRedisStream(ctx context.Context, c *redis.Client, stream, group, consumer string, st *bareStats, fwd *forwarder) error {
	for ctx.Err() == nil {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer,
			Streams: []string{stream, ">"}, Count: 1, Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("XREADGROUP: %w", err)
		}
		for _, s := range res {
			for _, m := range s.Messages {
				body, _ := m.Values["body"].(string)
				if !postUntilDone(ctx, fwd, []byte(body)) {
					return nil // left pending
				}
				if err := c.XAck(context.WithoutCancel(ctx), stream, group, m.ID).Err(); err != nil {
					return fmt.Errorf("XACK: %w", err)
				}
				st.done([]byte(body))
			}
		}
	}
	return nil
}

// postUntilDone posts body until the app takes it (nil fwd: the bare
// consumer, nothing to post); false when ctx ended first.
func postUntilDone(ctx context.Context, fwd *forwarder, body []byte) bool {
	for fwd != nil {
		if err := fwd.post(ctx, body, ""); err == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return ctx.Err() == nil
}
