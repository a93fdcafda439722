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

// call is one script run (script set: n is its integer reply) or one
// plain command (cmd set: val is its string reply, absent when Redis
// answered nil).
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    []any
	n      int64
	val    string
	absent bool
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
	if err := b.wait(c); err != nil {
		// c may still be running: its fields are not ours to read.
		return 0, err
	}
	return c.n, nil
}

// doCmd runs one plain command whose reply is a string or nil.
func (b *batcher) doCmd(ctx context.Context, cmd ...any) (val string, absent bool, err error) {
	c := &call{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	if err := b.wait(c); err != nil {
		return "", false, err
	}
	return c.val, c.absent, nil
}

func (b *batcher) wait(c *call) error {
	ctx := c.ctx
	select {
	case b.calls <- c:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.stop:
		return errClosed
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		// Like a lost reply: the call may still run. Every transition is
		// idempotent for the same token, so the caller's retry is safe.
		return ctx.Err()
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
		if c.cmd != nil {
			c.setReply(b.c.Do(c.ctx, c.cmd...))
		} else {
			c.n, c.err = c.script.Run(c.ctx, b.c, c.keys, c.args...).Int64()
		}
		c.finish()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	pipe := b.c.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		if c.cmd != nil {
			cmds[i] = pipe.Do(ctx, c.cmd...)
			continue
		}
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range live {
		if c.cmd != nil {
			c.setReply(cmds[i])
			c.finish()
			continue
		}
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

// setReply reads a plain command's string-or-nil reply.
func (c *call) setReply(cmd *redis.Cmd) {
	v, err := cmd.Text()
	if errors.Is(err, redis.Nil) {
		c.absent = true
		return
	}
	c.val, c.err = v, err
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
