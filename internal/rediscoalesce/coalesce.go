// Package rediscoalesce coalesces the Redis commands that many goroutines
// send into pipelines, one in flight at a time: the one way the proxy
// talks to Redis on its hot path, for the seen-set's claims and commits
// and for a Redis source's acks alike.
package rediscoalesce

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Coalescer coalesces the store calls of every message into pipelines,
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
type Coalescer struct {
	c     redis.UniversalClient
	calls chan *Call
	stop  chan struct{}
	// exited is closed when the loop has returned: a call queued after
	// its last drain would never be answered, so its caller stops
	// waiting (ErrClosed).
	exited  chan struct{}
	wg      sync.WaitGroup
	timeout time.Duration
	once    sync.Once
	// waitReplicas > 0 ends every batch with WAIT waitReplicas
	// waitTimeout on the connection that carried its writes (see
	// execWaiting).
	waitReplicas int
	waitTimeout  time.Duration
}

// Call is one script run (Script set: N is its integer reply) or one
// plain command (Cmd set: Val is its string reply, Absent when Redis
// answered nil; with IntReply, N is its integer reply). The reply fields
// are the caller's to read only once the call has its answer (DoMany
// says which have).
type Call struct {
	Script   *redis.Script
	Keys     []string
	Args     []any
	Cmd      []any
	IntReply bool
	// OftenNil: the reply is usually nil (a claim's SET NX GET of a new
	// key). A pipeline leads with a call that is not, where it has one:
	// go-redis takes a nil first reply for a failed pipeline and runs
	// its retry classification on it, a dozen errors.As, about 18,000
	// instructions per pipeline. So an OftenNil call may run after a
	// call queued behind it; mark only calls whose order against the
	// others does not matter (claims of distinct keys).
	OftenNil bool
	// merge: an XACK of one ID (Cmd is XACK stream group id) that joins
	// the other XACKs of its pipeline on the same stream and group.
	merge bool

	N      int64
	Val    string
	Absent bool
	Err    error

	ctx context.Context
	// group is what the caller waits on: the call's own (one call), or
	// a DoMany's, which closes its done after the last of its calls.
	group    *callGroup
	own      callGroup
	answered atomic.Bool
}

// callGroup is calls waited on together: one channel and one wait for
// all of a DoMany's, where a channel and a select each were most of what
// a batch claim or commit cost per key in the calling process.
type callGroup struct {
	left atomic.Int32
	done chan struct{}
}

// start readies c to be queued, waited on through g.
func (c *Call) start(ctx context.Context, g *callGroup) {
	c.ctx, c.group = ctx, g
	c.answered.Store(false)
}

// has reports whether c has its answer (its fields may be read).
func (c *Call) has() bool { return c.answered.Load() }

// maxBatch bounds one pipeline; more waiting calls go in the next. The
// queue holds a few pipelines' worth, so a burst of batch claims
// (ClaimMany of many partitions) waits in it rather than in a send.
const (
	maxBatch = 256
	queueLen = 4 * maxBatch
)

// ErrClosed is the error of a call made after Close.
var ErrClosed = errors.New("redis batcher closed")

// New starts a Coalescer on c. timeout bounds each pipeline; waitReplicas
// > 0 ends each with WAIT waitReplicas waitTimeout (see execWaiting).
func New(c redis.UniversalClient, timeout time.Duration, waitReplicas int, waitTimeout time.Duration) *Coalescer {
	b := &Coalescer{c: c, calls: make(chan *Call, queueLen), stop: make(chan struct{}), exited: make(chan struct{}), timeout: timeout,
		waitReplicas: waitReplicas, waitTimeout: waitTimeout}
	b.wg.Add(1)
	go b.loop()
	return b
}

// Close stops the loop; calls still queued fail with ErrClosed.
func (b *Coalescer) Close() {
	b.once.Do(func() { close(b.stop) })
	b.wg.Wait()
}

// Do runs script on keys (all in one slot on a Cluster) and returns its
// integer reply. The error is the driver's, untranslated.
func (b *Coalescer) Do(ctx context.Context, s *redis.Script, keys []string, args ...any) (int64, error) {
	c := &Call{Script: s, Keys: keys, Args: args}
	if err := b.wait(ctx, c); err != nil {
		// c may still be running: its fields are not ours to read.
		return 0, err
	}
	return c.N, nil
}

// DoCmd runs one plain command whose reply is a string or nil.
func (b *Coalescer) DoCmd(ctx context.Context, cmd ...any) (val string, absent bool, err error) {
	c := &Call{Cmd: cmd}
	if err := b.wait(ctx, c); err != nil {
		return "", false, err
	}
	return c.Val, c.Absent, nil
}

// Run runs c, a plain command or a script, and returns its error; its
// reply is in c (N, Val, Absent).
func (b *Coalescer) Run(ctx context.Context, c *Call) error {
	return b.wait(ctx, c)
}

// DoInt runs one plain command whose reply is an integer (XACK, LREM).
func (b *Coalescer) DoInt(ctx context.Context, cmd ...any) (int64, error) {
	c := &Call{Cmd: cmd, IntReply: true}
	if err := b.wait(ctx, c); err != nil {
		return 0, err
	}
	return c.N, nil
}

// XAck acks one entry of a stream's consumer group. The XAcks that wait
// for the same pipeline on the same stream and group go out as one XACK
// with every ID, so a batch of acks costs Redis one command instead of
// one per entry. XACK answers only how many of its IDs were pending, so
// the reply is 1 when every ID of that XACK was (this one was), 0 when
// this entry went alone and was not pending, and -1 when a shared XACK
// acked fewer than it carried: every entry of it is acked now, but
// whether this one still was pending is not known. On a Cluster the
// stream's one key keeps every merged XACK on one node.
func (b *Coalescer) XAck(ctx context.Context, stream, group, id string) (int64, error) {
	c := &Call{Cmd: []any{"XACK", stream, group, id}, IntReply: true, merge: true}
	if err := b.wait(ctx, c); err != nil {
		return 0, err
	}
	return c.N, nil
}

// DoMany runs every call in the coalesced pipelines and returns when
// each has its answer or the calls' context ended: the calls of one
// batch claim or commit usually share one round trip with each other and
// with whatever else is waiting. gone[i] set means call i has no answer
// to read (it may still run, so its fields are not the caller's) and
// gone[i] is why.
func (b *Coalescer) DoMany(ctx context.Context, calls []*Call) (gone []error) {
	gone = make([]error, len(calls))
	if len(calls) == 0 {
		return gone
	}
	g := &callGroup{done: make(chan struct{})}
	g.left.Store(int32(len(calls)))
	queued := len(calls)
	for i, c := range calls {
		c.start(ctx, g)
		if b.enqueue(c) {
			continue
		}
		select {
		case b.calls <- c:
			continue
		case <-ctx.Done():
			gone[i] = ctx.Err()
		case <-b.stop:
			gone[i] = ErrClosed
		}
		for j := i + 1; j < len(calls); j++ {
			gone[j] = gone[i]
		}
		queued = i
		break
	}
	// The calls never queued are never answered: the group stops
	// waiting for them.
	if n := len(calls) - queued; n > 0 && g.left.Add(-int32(n)) == 0 {
		close(g.done)
	}
	select {
	case <-g.done:
	case <-b.exited:
		for i, c := range calls[:queued] {
			if !c.has() || errors.Is(c.Err, ErrClosed) {
				gone[i] = ErrClosed
			}
		}
	case <-ctx.Done():
		// Like a lost reply, as in wait.
		for i, c := range calls[:queued] {
			if !c.has() {
				gone[i] = ctx.Err()
			}
		}
	}
	return gone
}

// enqueue queues c if the queue has room, without waiting. The queue
// almost always has room, and a send with nothing else to choose from
// costs a fraction of the select that waits on the context and Close
// too; a call queued after either is answered all the same (exec drops
// a call whose context ended, and a caller stops waiting once the loop
// exited).
func (b *Coalescer) enqueue(c *Call) bool {
	select {
	case b.calls <- c:
		return true
	default:
		return false
	}
}

// wait runs c alone, in a group of its own.
func (b *Coalescer) wait(ctx context.Context, c *Call) error {
	c.own.done = make(chan struct{})
	c.own.left.Store(1)
	c.start(ctx, &c.own)
	if !b.enqueue(c) {
		select {
		case b.calls <- c:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.stop:
			return ErrClosed
		}
	}
	select {
	case <-c.own.done:
		return c.Err
	case <-ctx.Done():
		// Like a lost reply: the call may still run. Every transition is
		// idempotent for the same token, so the caller's retry is safe.
		return ctx.Err()
	case <-b.exited:
		return b.answered(c)
	}
}

// answered is a call's error once the loop has exited: its own if the
// loop finished it, ErrClosed if it was queued too late to be.
func (b *Coalescer) answered(c *Call) error {
	if c.has() {
		return c.Err
	}
	return ErrClosed
}

func (b *Coalescer) loop() {
	defer b.wg.Done()
	defer close(b.exited)
	batch := make([]*Call, 0, maxBatch)
	for {
		select {
		case c := <-b.calls:
			batch = append(batch[:0], c)
		case <-b.stop:
			b.drain()
			return
		}
		if len(b.calls) == 0 {
			// Woken from idle by one call: the goroutines that became
			// runnable with its caller (a list reservation's workers, a
			// RabbitMQ prefetch's deliveries) are about to queue theirs.
			// One yield lets them, so they share this round trip rather
			// than each waiting for the next; it costs no timer, and
			// nothing when nobody else is runnable.
			runtime.Gosched()
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

func (b *Coalescer) drain() {
	for {
		select {
		case c := <-b.calls:
			c.Err = ErrClosed
			c.finish()
		default:
			return
		}
	}
}

func (b *Coalescer) exec(batch []*Call) {
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			// Its caller gave up: do not run a claim nobody waits for.
			c.Err = err
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
		if c.Cmd != nil {
			c.setReply(b.c.Do(c.ctx, c.Cmd...))
		} else {
			c.N, c.Err = c.Script.Run(c.ctx, b.c, c.Keys, c.Args...).Int64()
		}
		c.finish()
		return
	}
	leadWithNonNil(live)
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	pipe := b.c.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	var acks map[[2]any]*xack
	for i, c := range live {
		if c.merge {
			// XACK stream group id: one XACK per stream and group, sent
			// where the first of them stood.
			k := [2]any{c.Cmd[1], c.Cmd[2]}
			if acks == nil {
				acks = map[[2]any]*xack{}
			}
			if x := acks[k]; x != nil {
				x.calls = append(x.calls, c)
				x.args = append(x.args, c.Cmd[3])
				continue
			}
			acks[k] = &xack{calls: []*Call{c}, args: append([]any(nil), c.Cmd...)}
			continue
		}
		if c.Cmd != nil {
			cmds[i] = pipe.Do(ctx, c.Cmd...)
			continue
		}
		cmds[i] = c.Script.EvalSha(ctx, pipe, c.Keys, c.Args...)
	}
	// In the order the first of each stood, so one caller's commands keep
	// their order in the pipeline.
	for _, c := range live {
		if !c.merge {
			continue
		}
		if x := acks[[2]any{c.Cmd[1], c.Cmd[2]}]; x != nil && x.calls[0] == c {
			x.cmd = pipe.Do(ctx, x.args...)
		}
	}
	_, _ = pipe.Exec(ctx)
	for _, x := range acks {
		x.answer()
	}
	for i, c := range live {
		if c.merge {
			continue
		}
		if c.Cmd != nil {
			c.setReply(cmds[i])
			c.finish()
			continue
		}
		n, err := cmds[i].Int64()
		if err != nil && isNoScript(err) {
			// First use, or Redis restarted and lost its script cache:
			// Run loads the script and retries this one call.
			n, err = c.Script.Run(ctx, b.c, c.Keys, c.Args...).Int64()
		}
		c.N, c.Err = n, err
		c.finish()
	}
}

// leadWithNonNil moves the first call that is neither OftenNil nor a
// merged XACK (those go last) to the front of calls, when the first is
// OftenNil, keeping the order of the others: the one moved overtakes
// OftenNil calls only, which say their order does not matter.
func leadWithNonNil(calls []*Call) {
	if len(calls) == 0 || !calls[0].OftenNil {
		return
	}
	for j, c := range calls {
		if !c.OftenNil && !c.merge {
			copy(calls[1:j+1], calls[:j])
			calls[0] = c
			return
		}
	}
}

// xack is the one XACK that carries the XAck calls of a pipeline on one
// stream and group.
type xack struct {
	calls []*Call
	args  []any
	cmd   *redis.Cmd
}

// answer gives each call of the shared XACK its reply (see XAck).
func (x *xack) answer() {
	n, err := x.cmd.Int64()
	for _, c := range x.calls {
		switch {
		case err != nil:
			c.Err = err
		case len(x.calls) == 1 || n == int64(len(x.calls)):
			c.N = min(n, 1)
		default:
			c.N = -1
		}
		c.finish()
	}
}

// setReply reads a plain command's reply: an integer, or a string or nil.
func (c *Call) setReply(cmd *redis.Cmd) {
	if c.IntReply {
		c.N, c.Err = cmd.Int64()
		return
	}
	v, err := cmd.Text()
	if errors.Is(err, redis.Nil) {
		c.Absent = true
		return
	}
	c.Val, c.Err = v, err
}

// finish wakes the caller waiting in wait or doMany.
func (c *Call) finish() {
	c.answered.Store(true)
	if g := c.group; g.left.Add(-1) == 0 {
		close(g.done)
	}
}

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
func (b *Coalescer) execWaiting(live []*Call) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout+b.waitTimeout)
	defer cancel()
	type group struct {
		p     pipeliner
		calls []*Call
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
			c.Err = err
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
func (b *Coalescer) runWaiting(ctx context.Context, p pipeliner, calls []*Call) bool {
	pipe := p.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if c.Cmd != nil {
			cmds[i] = pipe.Do(ctx, c.Cmd...)
		} else {
			cmds[i] = c.Script.Eval(ctx, pipe, c.Keys, c.Args...)
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
		if c.Cmd != nil {
			c.setReply(cmds[i])
		} else {
			c.N, c.Err = cmds[i].Int64()
		}
		if c.Err == nil && werr != nil {
			c.Err, c.Val, c.Absent, c.N = werr, "", false, 0
		}
		if movedOrLost(c.Err) {
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
func (c *Call) key() string {
	if c.Cmd != nil {
		switch k := c.Cmd[1].(type) {
		case string:
			return k
		case *string:
			// As go-redis writes it: callers pass *string to save the
			// allocation of boxing a string.
			return *k
		}
	}
	if len(c.Keys) > 0 {
		return c.Keys[0]
	}
	return ""
}

// WaitReplicas is the number of replicas each pipeline's writes wait
// for (0: none).
func (b *Coalescer) WaitReplicas() int { return b.waitReplicas }
