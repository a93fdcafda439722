package seenset

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends script calls from many goroutines to Redis in pipelines:
// while one batch is on the wire, the calls that arrive meanwhile queue up
// and go out together in the next, so under load a claim or commit costs a
// fraction of a round trip and one write syscall is shared by many
// messages. Each call is still its own atomic script on its own key, so
// batching changes no outcome; an idle proxy sends batches of one with no
// added delay.
type batcher struct {
	c       redis.UniversalClient
	calls   chan *call
	stop    chan struct{}
	wg      sync.WaitGroup
	timeout time.Duration
	once    sync.Once
}

type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	n      int64
	err    error
	done   chan struct{}
}

// Pipelines in flight at once: enough to keep Redis busy while a batch
// is being written or answered, few enough that batches still fill.
const (
	batchLoops = 4
	maxBatch   = 128
)

var errClosed = errors.New("store closed")

func newBatcher(c redis.UniversalClient, timeout time.Duration) *batcher {
	b := &batcher{c: c, calls: make(chan *call, maxBatch*batchLoops), stop: make(chan struct{}), timeout: timeout}
	b.wg.Add(batchLoops)
	for range batchLoops {
		go b.loop()
	}
	return b
}

func (b *batcher) close() {
	b.once.Do(func() { close(b.stop) })
	b.wg.Wait()
}

// do runs script on key. The error is the driver's, untranslated.
func (b *batcher) do(ctx context.Context, s *redis.Script, key string, args ...any) (int64, error) {
	c := &call{ctx: ctx, script: s, keys: []string{key}, args: args, done: make(chan struct{})}
	select {
	case b.calls <- c:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-b.stop:
		return 0, errClosed
	}
	select {
	case <-c.done:
		return c.n, c.err
	case <-ctx.Done():
		// Like a lost reply: the script may still run. Every script is
		// idempotent for the same token, so the caller's retry is safe.
		return 0, ctx.Err()
	}
}

func (b *batcher) loop() {
	defer b.wg.Done()
	batch := make([]*call, 0, maxBatch)
	for {
		select {
		case c := <-b.calls:
			batch = append(batch[:0], c)
		case <-b.stop:
			b.drain()
			return
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case c := <-b.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		b.exec(batch)
	}
}

func (b *batcher) drain() {
	for {
		select {
		case c := <-b.calls:
			c.err = errClosed
			c.finish()
		default:
			return
		}
	}
}

func (b *batcher) exec(batch []*call) {
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			// Its caller gave up: do not run a claim nobody waits for.
			c.err = err
			c.finish()
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		c.n, c.err = c.script.Run(c.ctx, b.c, c.keys, c.args...).Int64()
		c.finish()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	pipe := b.c.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range live {
		n, err := cmds[i].Int64()
		if err != nil && isNoScript(err) {
			// First use, or Redis restarted and lost its script cache:
			// Run loads the script and retries this one call.
			n, err = c.script.Run(ctx, b.c, c.keys, c.args...).Int64()
		}
		c.n, c.err = n, err
		c.finish()
	}
}

// finish wakes the caller waiting in do; a batch call (ClaimMany) has no
// one waiting, its caller reads the result after exec returns.
func (c *call) finish() {
	if c.done != nil {
		close(c.done)
	}
}

func isNoScript(err error) bool {
	return strings.HasPrefix(err.Error(), "NOSCRIPT")
}
