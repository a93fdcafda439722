package seenset

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Scanner is a Store that can list its keys, for operators (`keys list`).
// Scan calls fn with each key that starts with prefix (a full key:
// "<consumer>:<key space>:<key prefix>") and its status, in no particular
// order, until fn returns false or every key was seen. A key that
// changes during the scan may be reported in its old or its new state,
// or not at all if it expired meanwhile. Redis and the memory store are
// Scanners.
type Scanner interface {
	Scan(ctx context.Context, prefix string, fn func(key string, st Status) bool) error
}

// ErrNoScan: the store cannot list its keys.
var ErrNoScan = errors.New("seenset: this store cannot list its keys")

// Scan lists through the observed store's own Scan.
func (o observed) Scan(ctx context.Context, prefix string, fn func(key string, st Status) bool) error {
	sc, ok := o.s.(Scanner)
	if !ok {
		return ErrNoScan
	}
	return sc.Scan(ctx, prefix, fn)
}

// scanPage is how many keys one SCAN step asks for: SCAN never blocks the
// server as KEYS would, and a page's values are read in one round trip.
const scanPage = 500

// Scan pages through the keys under prefix with SCAN (on a Cluster, each
// master in turn) and reads each page's values and expiries in one
// pipeline. Keys stored hashed (seenset.redis.hash_keys_over) have no
// prefix left to match and are not listed.
func (r *Redis) Scan(ctx context.Context, prefix string, fn func(key string, st Status) bool) error {
	match := r.prefix + globEscape(prefix) + "*"
	var stop stopFlag
	scanOne := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for !stop.is() {
			keys, next, err := c.Scan(ctx, cursor, match, scanPage).Result()
			if err != nil {
				return unavailable(ctx, err)
			}
			if err := r.report(ctx, c, keys, fn, &stop); err != nil {
				return err
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
		return nil
	}
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		// One master at a time: fn is called from one goroutine only.
		var mu sync.Mutex
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scanOne(ctx, c)
		})
	}
	return scanOne(ctx, r.c)
}

func (r *Redis) report(ctx context.Context, c redis.Cmdable, keys []string, fn func(string, Status) bool, stop *stopFlag) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := c.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
		ttls[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return unavailable(ctx, err)
	}
	for i, k := range keys {
		v, err := gets[i].Result()
		if err != nil {
			continue // expired since the SCAN, or not a string: not the seen-set's
		}
		st, ok := parseValue(v)
		if !ok {
			continue
		}
		if d := ttls[i].Val(); d > 0 {
			st.TTL = d
		}
		if !fn(strings.TrimPrefix(k, r.prefix), st) {
			stop.set()
			return nil
		}
	}
	return nil
}

// parseValue reads a stored value: "inflight:<token>" or "done:<token>".
func parseValue(v string) (Status, bool) {
	switch {
	case strings.HasPrefix(v, "inflight:"):
		return Status{State: Inflight, Token: v[len("inflight:"):]}, true
	case strings.HasPrefix(v, "done:"):
		return Status{State: Done, Token: v[len("done:"):]}, true
	}
	return Status{}, false
}

// globEscape makes s match itself in a Redis glob pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

type stopFlag struct {
	mu sync.Mutex
	v  bool
}

func (s *stopFlag) set() { s.mu.Lock(); s.v = true; s.mu.Unlock() }
func (s *stopFlag) is() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v
}

// Scan lists the live keys under prefix.
func (m *Memory) Scan(ctx context.Context, prefix string, fn func(key string, st Status) bool) error {
	now, err := m.begin(ctx)
	if err != nil {
		return err
	}
	type item struct {
		key string
		st  Status
	}
	var items []item
	for k, e := range m.entries {
		if strings.HasPrefix(k, prefix) && now.Before(e.expires) {
			items = append(items, item{k, Status{State: e.state, TTL: e.expires.Sub(now), Token: e.token}})
		}
	}
	m.mu.Unlock()
	for _, it := range items {
		if !fn(it.key, it.st) {
			return nil
		}
	}
	return nil
}
