package seenset

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Memory is a process-local Store for tests and single-replica use. It
// cannot dedupe across replicas or survive a restart.
//
// Expired entries are removed lazily when touched, plus a bounded sweep every
// sweepEvery writes, so memory stays bounded by the live keys without a
// background goroutine that would outlive its owner.
type Memory struct {
	mu      sync.Mutex
	entries map[string]memEntry
	writes  int
	closed  bool
	now     func() time.Time // replaced only by in-package tests
}

type memEntry struct {
	state   State // Inflight or Done; absence is the missing map entry
	token   string
	expires time.Time
}

const (
	// Each sweep scans at most sweepBudget entries starting at Go's
	// randomised map iteration point, about 4 per write: enough to keep dead
	// entries a minority of the map, and a bounded pause under the lock.
	sweepEvery  = 64
	sweepBudget = 256
)

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store. Close is optional; it only drops the
// entries.
func NewMemory() *Memory {
	return &Memory{entries: make(map[string]memEntry), now: time.Now}
}

// lookup returns the live entry for key, deleting it if it has expired.
// Caller holds mu.
func (m *Memory) lookup(key string, now time.Time) (memEntry, bool) {
	e, ok := m.entries[key]
	if !ok {
		return memEntry{}, false
	}
	if !now.Before(e.expires) {
		delete(m.entries, key)
		return memEntry{}, false
	}
	return e, true
}

// put stores e and occasionally sweeps. Caller holds mu.
func (m *Memory) put(key string, e memEntry, now time.Time) {
	m.entries[key] = e
	m.writes++
	if m.writes%sweepEvery != 0 {
		return
	}
	n := 0
	for k, v := range m.entries {
		if !now.Before(v.expires) {
			delete(m.entries, k)
		}
		n++
		if n >= sweepBudget {
			break
		}
	}
}

// begin locks the store after the checks every method shares. On success the
// caller must unlock mu.
func (m *Memory) begin(ctx context.Context) (time.Time, error) {
	// A cancelled caller gets the same answer as from Redis, so code tested
	// against Memory handles it.
	if err := ctx.Err(); err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return time.Time{}, fmt.Errorf("%w: memory store closed", ErrUnavailable)
	}
	return m.now(), nil
}

func (m *Memory) Claim(ctx context.Context, key, token string, lease time.Duration) (ClaimResult, error) {
	if err := validateArgs(key, token, lease); err != nil {
		return 0, err
	}
	now, err := m.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	e, ok := m.lookup(key, now)
	switch {
	case !ok || (e.state == Inflight && e.token == token):
		m.put(key, memEntry{state: Inflight, token: token, expires: now.Add(lease)}, now)
		return Claimed, nil
	case e.state == Done && reused(e.token, token):
		return Reused, nil
	case e.state == Done:
		return Duplicate, nil
	default:
		return Busy, nil
	}
}

func (m *Memory) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	if err := validateArgs(key, token, lease); err != nil {
		return err
	}
	now, err := m.begin(ctx)
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	e, ok := m.lookup(key, now)
	if !ok || e.state != Inflight || e.token != token {
		return ErrNotOwner
	}
	e.expires = now.Add(lease)
	m.put(key, e, now)
	return nil
}

func (m *Memory) Commit(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := validateArgs(key, token, ttl); err != nil {
		return err
	}
	now, err := m.begin(ctx)
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	e, held := m.lookup(key, now)
	m.put(key, memEntry{state: Done, token: token, expires: now.Add(ttl)}, now)
	if held && e.token != token {
		return ErrNotOwner
	}
	return nil
}

func (m *Memory) Release(ctx context.Context, key, token string) error {
	if err := validateKeyToken(key, token); err != nil {
		return err
	}
	now, err := m.begin(ctx)
	if err != nil {
		return err
	}
	defer m.mu.Unlock()
	e, ok := m.lookup(key, now)
	if !ok {
		return nil
	}
	if e.state != Inflight || e.token != token {
		return ErrNotOwner
	}
	delete(m.entries, key)
	return nil
}

func (m *Memory) Forget(ctx context.Context, key string) (bool, error) {
	if err := validateKey(key); err != nil {
		return false, err
	}
	now, err := m.begin(ctx)
	if err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	_, ok := m.lookup(key, now)
	delete(m.entries, key)
	return ok, nil
}

func (m *Memory) Status(ctx context.Context, key string) (Status, error) {
	if err := validateKey(key); err != nil {
		return Status{}, err
	}
	now, err := m.begin(ctx)
	if err != nil {
		return Status{}, err
	}
	defer m.mu.Unlock()
	e, ok := m.lookup(key, now)
	if !ok {
		return Status{State: Absent}, nil
	}
	return Status{State: e.state, TTL: e.expires.Sub(now), Token: e.token}, nil
}

func (m *Memory) Ping(ctx context.Context) error {
	_, err := m.begin(ctx)
	if err != nil {
		return err
	}
	m.mu.Unlock()
	return nil
}

// Close drops every entry; later calls fail with ErrUnavailable, as they
// would on a closed Redis client.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.entries = nil
	return nil
}

// size reports the number of stored entries, live or not yet swept, for
// in-package tests of the sweep.
func (m *Memory) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}
