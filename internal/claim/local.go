package claim

import (
	"hash/maphash"
	"sync"
)

// localClaims records the keys this process holds or is claiming, so that a
// session that finds its key busy can tell "another replica has it" from
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

// localClaim is one key this process holds or is claiming: the held
// claim's token ("" while only being claimed), the claims of the key in
// flight from here, and a channel closed when the key is let go, made
// only once someone waits for it.
type localClaim struct {
	token   string
	pending int
	done    chan struct{}
	// lets counts the holders that let go while claims were pending: a
	// claim answered "busy" by a holder that finished meanwhile is stale.
	lets int
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

// reserve records a claim of key about to be sent from here. Claims that
// arrive together go to the store in one round trip and their answers
// come back together: recorded only once the winner's answer is read, a
// loser could find the key busy and nothing here, and take it for
// another replica's.
func (l *localClaims) reserve(key string) (since int) {
	s := l.shard(key)
	s.mu.Lock()
	c := s.m[key]
	c.pending++
	s.m[key] = c
	s.mu.Unlock()
	return c.lets
}

// unreserve ends a reservation once the claim's answer is in; won: token
// now holds key. For a lost claim it reports whether a holder here let go
// of key while the claim was on its way (since is what reserve returned):
// a "busy" answer may then be stale, and the caller may claim again at
// once; and, when the key is still held or being claimed here, the
// channel closed when that ends — taken under the same lock, so a holder
// letting go right after cannot be missed.
func (l *localClaims) unreserve(key, token string, won bool, since int) (letGo bool, wait <-chan struct{}) {
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.m[key]
	letGo = c.lets != since
	c.pending--
	if won {
		c = c.take(token)
	}
	if c.token == "" && c.pending <= 0 {
		// Nobody here holds or claims it: whoever waited looks again.
		delete(s.m, key)
		if c.done != nil {
			close(c.done)
		}
		return letGo, nil
	}
	if !won {
		if c.done == nil {
			c.done = make(chan struct{})
		}
		wait = c.done
	}
	s.m[key] = c
	return letGo, wait
}

// take makes token the holder. A claim taken over from an earlier local
// holder (its lease had run out) wakes that holder's waiters: they may go
// and look. A claim following a reservation keeps them waiting for its
// outcome.
func (c localClaim) take(token string) localClaim {
	if c.token != "" && c.token != token {
		c.lets++
		if c.done != nil {
			close(c.done)
			c.done = nil
		}
	}
	c.token = token
	return c
}

// hold records that token holds key here.
func (l *localClaims) hold(key, token string) {
	s := l.shard(key)
	s.mu.Lock()
	s.m[key] = s.m[key].take(token)
	s.mu.Unlock()
}

// drop lets go of key if token still holds it here, waking its waiters.
func (l *localClaims) drop(key, token string) {
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[key]
	if !ok || c.token != token {
		return
	}
	if c.done != nil {
		close(c.done)
		c.done = nil
	}
	c.token = ""
	c.lets++
	if c.pending <= 0 {
		delete(s.m, key)
		return
	}
	s.m[key] = c
}

// waitFor returns a channel closed when this process lets go of key, or
// nil when it neither holds nor is claiming key.
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
