package seenset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher coalesces the store calls of every message into pipelines,
// one in flight at a time: while a pipeline is on the wire, the claims,
// renewals and commits that other messages want queue up, and all of
// them go out together in the next. Under load one round trip then
// serves many messages, which is what a message's store work costs most
// (a write and a read syscall on each side, and Redis's event loop),
// not the commands themselves. An idle proxy sends a call at once, in a
// pipeline of one, so nothing waits when the load is low. Each call is
// still its own command or script on its own key, so coalescing changes
// no outcome.
//
// On a Cluster the client splits a pipeline by node and runs the parts
// side by side, so each node has one pipeline of this proxy's in flight.
type batcher struct {
	c       redis.UniversalClient
	calls   chan *call
	stop    chan struct{}
	wg      sync.WaitGroup
	timeout time.Duration
	once    sync.Once
	// waitReplicas > 0 ends every batch with WAIT waitReplicas
	// waitTimeout on the connection that carried its writes (see
	// execWaiting).
	waitReplicas int
	waitTimeout  time.Duration
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

// maxBatch bounds one pipeline; more waiting calls go in the next. The
// queue holds a few pipelines' worth, so a burst of batch claims
// (ClaimMany of many partitions) waits in it rather than in a send.
const (
	maxBatch = 256
	queueLen = 4 * maxBatch
)

var errClosed = errors.New("store closed")

func newBatcher(c redis.UniversalClient, timeout time.Duration, waitReplicas int, waitTimeout time.Duration) *batcher {
	b := &batcher{c: c, calls: make(chan *call, queueLen), stop: make(chan struct{}), timeout: timeout,
		waitReplicas: waitReplicas, waitTimeout: waitTimeout}
	b.wg.Add(1)
	go b.loop()
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

// doMany runs every call in the coalesced pipelines and returns when
// each has its answer or the calls' context ended: the calls of one
// batch claim or commit usually share one round trip with each other and
// with whatever else is waiting. gone[i] set means call i has no answer
// to read (it may still run, so its fields are not the caller's) and
// gone[i] is why.
func (b *batcher) doMany(ctx context.Context, calls []*call) (gone []error) {
	gone = make([]error, len(calls))
	queued := len(calls)
	for i, c := range calls {
		c.ctx, c.done = ctx, make(chan struct{})
		select {
		case b.calls <- c:
			continue
		case <-ctx.Done():
			gone[i] = ctx.Err()
		case <-b.stop:
			gone[i] = errClosed
		}
		for j := i + 1; j < len(calls); j++ {
			gone[j] = gone[i]
		}
		queued = i
		break
	}
	for i, c := range calls[:queued] {
		select {
		case <-c.done:
		case <-ctx.Done():
			// Like a lost reply, as in wait.
			for j := i; j < queued; j++ {
				select {
				case <-calls[j].done:
				default:
					gone[j] = ctx.Err()
				}
			}
			return gone
		}
	}
	return gone
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
	if b.waitReplicas > 0 && len(live) > 0 {
		b.execWaiting(live)
		return
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

// finish wakes the caller waiting in wait or doMany.
func (c *call) finish() { close(c.done) }

func isNoScript(err error) bool {
	return strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// errReplicas: WAIT returned before enough replicas acknowledged the
// batch's writes. The writes stand on the master, but a failover now may
// lose them, so the caller must not act on them (ErrUnavailable).
var errReplicas = errors.New("not enough replicas acknowledged the write")

// execWaiting runs the batch followed by WAIT on each master that holds
// part of it. WAIT counts the replicas that have the writes of the
// connection it runs on, so it must follow the writes on that same
// connection: one pipeline per master (a Cluster's keys are grouped by
// their slot's master; standalone and Sentinel have one), SETs then
// WAIT. A call on a master whose WAIT fell short fails, whatever it
// answered. Scripts run as EVAL rather than EVALSHA here, so that no
// NOSCRIPT retry on another connection escapes the WAIT.
func (b *batcher) execWaiting(live []*call) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout+b.waitTimeout)
	defer cancel()
	type group struct {
		p     pipeliner
		calls []*call
	}
	var groups []*group
	var reload atomic.Bool
	byNode := map[*redis.Client]*group{}
	cc, cluster := b.c.(*redis.ClusterClient)
	for _, c := range live {
		if !cluster {
			if len(groups) == 0 {
				groups = append(groups, &group{p: b.c})
			}
			groups[0].calls = append(groups[0].calls, c)
			continue
		}
		node, err := cc.MasterForKey(ctx, c.key())
		if err != nil {
			c.err = err
			c.finish()
			reload.Store(true)
			continue
		}
		g := byNode[node]
		if g == nil {
			g = &group{p: node}
			byNode[node] = g
			groups = append(groups, g)
		}
		g.calls = append(g.calls, c)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !b.runWaiting(ctx, g.p, g.calls) {
				reload.Store(true)
			}
		}()
	}
	wg.Wait()
	if cluster && reload.Load() {
		// A node moved its slots or died: let the client read the
		// cluster's layout again before the callers retry.
		cc.ReloadState(ctx)
	}
}

type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// runWaiting runs calls and WAIT in one pipeline; false when the node
// was lost or moved slots (movedOrLost).
func (b *batcher) runWaiting(ctx context.Context, p pipeliner, calls []*call) bool {
	pipe := p.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if c.cmd != nil {
			cmds[i] = pipe.Do(ctx, c.cmd...)
		} else {
			cmds[i] = c.script.Eval(ctx, pipe, c.keys, c.args...)
		}
	}
	wait := pipe.Do(ctx, "WAIT", b.waitReplicas, b.waitTimeout.Milliseconds())
	_, _ = pipe.Exec(ctx)
	acks, werr := wait.Int64()
	if werr == nil && acks < int64(b.waitReplicas) {
		werr = fmt.Errorf("%w: WAIT %d %d answered %d", errReplicas, b.waitReplicas, b.waitTimeout.Milliseconds(), acks)
	}
	ok := werr == nil
	for i, c := range calls {
		if c.cmd != nil {
			c.setReply(cmds[i])
		} else {
			c.n, c.err = cmds[i].Int64()
		}
		if c.err == nil && werr != nil {
			c.err, c.val, c.absent, c.n = werr, "", false, 0
		}
		if movedOrLost(c.err) {
			ok = false
		}
		c.finish()
	}
	return ok && !movedOrLost(werr)
}

// movedOrLost is an error after which a Cluster client should read the
// layout again: the node is gone (not a reply from Redis) or says the
// slot is elsewhere or unserved. A short WAIT or a refused value is not.
func movedOrLost(err error) bool {
	if err == nil || errors.Is(err, errReplicas) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "READONLY"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// key is the one key a call touches.
func (c *call) key() string {
	if c.cmd != nil {
		if k, ok := c.cmd[1].(string); ok {
			return k
		}
	}
	if len(c.keys) > 0 {
		return c.keys[0]
	}
	return ""
}
