package pipeline

import (
	"hash/maphash"
	"sync"
)

// localClaims records the keys this process holds a claim on, so that a
// message that finds its key busy can tell "another replica has it" from
// "this replica is forwarding it right now". In the second case it waits
// here for that outcome — the original commits (the message is then a
// duplicate, acked with no second forward) or gives the key up — instead
// of being requeued to come back after busy_delay. The seen-set stays
// the only authority: after the wait the message claims again.
type localClaims struct {
	seed   maphash.Seed
	shards [16]localShard
}

type localShard struct {
	mu sync.Mutex
	m  map[string]localClaim
}

// localClaim is one held key: the claim's token, and a channel closed
// when it is let go, made only once someone waits for it.
type localClaim struct {
	token string
	done  chan struct{}
}

func newLocalClaims() *localClaims {
	l := &localClaims{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[string]localClaim)
	}
	return l
}

func (l *localClaims) shard(key string) *localShard {
	return &l.shards[maphash.String(l.seed, key)%uint64(len(l.shards))]
}

// hold records that token holds key here.
func (l *localClaims) hold(key, token string) {
	s := l.shard(key)
	s.mu.Lock()
	if old, ok := s.m[key]; ok && old.done != nil {
		// A claim taken over from an earlier local holder (its lease had
		// run out): whoever waited for that one may go and look.
		close(old.done)
	}
	s.m[key] = localClaim{token: token}
	s.mu.Unlock()
}

// drop lets go of key if token still holds it here, waking its waiters.
func (l *localClaims) drop(key, token string) {
	s := l.shard(key)
	s.mu.Lock()
	if c, ok := s.m[key]; ok && c.token == token {
		delete(s.m, key)
		if c.done != nil {
			close(c.done)
		}
	}
	s.mu.Unlock()
}

// waitFor returns a channel closed when this process lets go of key, or
// nil when it does not hold key.
func (l *localClaims) waitFor(key string) <-chan struct{} {
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[key]
	if !ok {
		return nil
	}
	if c.done == nil {
		c.done = make(chan struct{})
		s.m[key] = c
	}
	return c.done
}

// holdLocal records the claim this message now holds.
func (w *work) holdLocal(token string) {
	w.p.locals.hold(w.full, token)
	w.localToken = token
}

// dropLocal lets go of the local record of the claim, if any: the claim
// was committed, released, or left to expire.
func (w *work) dropLocal() {
	if w.localToken != "" {
		w.p.locals.drop(w.full, w.localToken)
		w.localToken = ""
	}
}
