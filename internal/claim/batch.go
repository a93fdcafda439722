package claim

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// Batch is the claims and commits of a run of messages handled together
// (a Kafka partition's fetch): their keys are claimed in one round trip up
// front (Take), and the successes of its sessions are committed in the
// background while the next messages are forwarded: while one commit
// round trip is on the wire, successes queue up and go together in the
// next. It never waits to fill a round trip: a success waiting for its
// commit is the one crash window (the app acted, the key is not done), so
// delaying commits to share round trips would widen it by as many
// messages as they share. Each session's Committed is told after its
// commit, so that its message is acked only then, as on its own.
type Batch struct {
	p       *Protocol
	mu      sync.Mutex
	idle    sync.Cond // broadcast when the flush loop ends
	pending []pendingCommit
	// spare is the slice of the commit before last, emptied: pending
	// and it take turns, so successes queue without growing a new slice
	// for every commit.
	spare []pendingCommit
	// items is the commit round trip's keys and tokens, reused by each
	// (only the one loop at a time builds them).
	items   []seenset.KeyToken
	running bool
}

type pendingCommit struct {
	s *Session
	c Committed
}

// NewBatch returns an empty Batch.
func (p *Protocol) NewBatch() *Batch {
	b := &Batch{p: p}
	b.idle.L = &b.mu
	return b
}

// Join makes s's success commit with the Batch's (Succeeded).
func (b *Batch) Join(s *Session) {
	if s.Begun() {
		s.batch = b
	}
}

// Take joins the sessions at(0) … at(n-1) to the Batch and claims, in one
// round trip, the keys of those begun. A key twice is claimed once, for
// its first session: were both claimed, the first could find the key
// busy under the second's claim (another replica let go between the two)
// and wait for a lease that only it can end; the later one claims on its
// own (Take) once the earlier ones settled, and finds the key done.
//
// It returns each session's answer, zero for one not claimed: on any
// error it releases what it claimed and claims nothing, and a session
// whose answer was lost claims under the same token next (it may hold
// the key). A session answered Claimed holds its claim; it is forwarded
// under once UseAhead passes it.
func (b *Batch) Take(ctx context.Context, n int, at func(i int) *Session) []seenset.ClaimResult {
	p := b.p
	results := make([]seenset.ClaimResult, n)
	items := make([]seenset.KeyToken, 0, n)
	idx := make([]int, 0, n)
	var inBatch map[string]struct{}
	for i := range n {
		s := at(i)
		b.Join(s)
		if !s.Active() {
			continue
		}
		if inBatch == nil {
			inBatch = make(map[string]struct{}, n)
		}
		if _, twice := inBatch[s.key]; twice {
			continue
		}
		inBatch[s.key] = struct{}{}
		s.nextToken()
		items = append(items, seenset.KeyToken{Key: s.key, Token: s.token})
		idx = append(idx, i)
	}
	if len(items) == 0 {
		return results
	}
	b.reserve(len(items))
	// The leases start no earlier than this.
	ends := time.Now().Add(p.lease)
	ctx, cancel := p.ops.bound(ctx)
	replies := seenset.ClaimMany(ctx, p.store, items, p.lease)
	cancel()
	var err error
	for _, r := range replies {
		if r.Err != nil {
			err = r.Err
			break
		}
	}
	for j, i := range idx {
		s, r := at(i), replies[j]
		switch {
		case err == nil:
			results[i] = r.Result
			if r.Result == seenset.Claimed {
				s.state |= held | local
				s.ends = ends
				p.locals.hold(s.key, s.token)
			}
		case r.Err != nil:
			s.state |= prior
		case r.Result == seenset.Claimed:
			_ = s.LetGo(context.WithoutCancel(ctx)) // harmless if it fails: the lease expires
		}
	}
	return results
}

// reserve sizes the commit queue for n successes up front: it grew from
// empty in every batch, up to two allocations per message when commits
// went one or two at a time. pending and spare share one array, each in
// its own half (a full slice expression keeps an append to one out of
// the other).
func (b *Batch) reserve(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cap(b.pending) >= n || len(b.pending) > 0 || b.running {
		return
	}
	buf := make([]pendingCommit, 2*n)
	b.pending, b.spare = buf[:0:n], buf[n:n:2*n]
}

func (b *Batch) add(s *Session, c Committed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = append(b.pending, pendingCommit{s, c})
	if !b.running {
		b.running = true
		go b.loop()
	}
}

func (b *Batch) loop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.pending) > 0 {
		todo := b.pending
		b.pending = b.spare
		b.mu.Unlock()
		b.commit(todo)
		b.mu.Lock()
		clear(todo)
		b.spare = todo[:0]
	}
	b.running = false
	b.idle.Broadcast()
}

// Wait returns once every success handed over so far is committed and
// its Committed told.
func (b *Batch) Wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.running {
		b.idle.Wait()
	}
}

func (b *Batch) commit(todo []pendingCommit) {
	p := b.p
	items := b.items[:0]
	for _, t := range todo {
		items = append(items, seenset.KeyToken{Key: t.s.key, Token: t.s.token})
	}
	defer func() { clear(items); b.items = items[:0] }()
	// As a single commit: even during shutdown, the app already acted.
	ctx, cancel := p.ops.bound(context.Background())
	errs := seenset.CommitMany(ctx, p.store, items, p.ttl)
	cancel()
	for i, t := range todo {
		err := errs[i]
		if err != nil && !errors.Is(err, seenset.ErrNotOwner) {
			// Alone, with the commit's retries.
			err = p.commit(context.Background(), t.s.key, t.s.token)
		}
		t.s.dropLocal()
		t.c.Committed(err)
	}
}
