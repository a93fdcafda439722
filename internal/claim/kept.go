package claim

import (
	"sync"
	"time"
)

// keptClaims records the keys whose claim this process left to expire
// because their last request may still be running at the app (Session.keep):
// another delivery of such a key finds it busy, and the log must say it is
// held here, not by another replica. Only timed-out or aborted requests
// land here, so one lock will do.
type keptClaims struct {
	mu sync.Mutex
	m  map[string]time.Time // key → when its lease runs out
}

func (k *keptClaims) keep(key string, until time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]time.Time{}
	}
	now := time.Now()
	for key, t := range k.m {
		if now.After(t) {
			delete(k.m, key)
		}
	}
	k.m[key] = until
}

// until reports when the claim this process left on key runs out, if it
// may still run.
func (k *keptClaims) until(key string) (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.m[key]
	if ok && time.Now().After(t) {
		delete(k.m, key)
		return time.Time{}, false
	}
	return t, ok
}

// takenHere reports whether another claim of this process now holds key
// (token's lease ran out and a local delivery claimed it).
func (l *localClaims) takenHere(key, token string) bool {
	s := l.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[key]
	return ok && c.token != token
}
