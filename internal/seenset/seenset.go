// Package seenset is the shared record of which message keys have been
// processed. It is the heart of dedupe-proxy's guarantee: a key moves
//
//	absent → inflight:<token> (lease) → done (TTL)
//
// and back to absent on Release, lease expiry or Forget. Every transition is
// atomic (Redis: one conditional command or Lua script; memory: one lock).
// Renew and Release act only on the caller's own token, so a replica
// whose lease expired can never end or extend the claim of the replica
// that took over. Commit records a success whoever holds the key: a
// message that reached the app and succeeded is done, and the key must
// say so even if the lease ran out meanwhile.
//
// The key is marked done only after the app succeeded (Commit), never
// before: a store that marks first loses every message whose first attempt
// fails (watermill's Deduplicator, Benthos' dedupe).
package seenset

import (
	"context"
	"errors"
	"time"
)

// ClaimResult is the answer to a Claim.
type ClaimResult int

const (
	// Claimed: the caller owns the key until its lease expires; forward it.
	Claimed ClaimResult = iota + 1
	// Duplicate: the key was processed already; ack without forwarding.
	Duplicate
	// Busy: another owner holds a live lease on the key (it is being
	// forwarded right now); neither forward nor ack, try again later.
	Busy
	// Reused: the key was processed already, for another body: the done
	// mark's token and the claim's carry digests (WithDigest) that
	// differ. Nothing was changed; what becomes of the message is the
	// source's key_reuse.
	Reused
)

func (r ClaimResult) String() string {
	switch r {
	case Claimed:
		return "claimed"
	case Duplicate:
		return "duplicate"
	case Busy:
		return "busy"
	case Reused:
		return "reused"
	}
	return "unknown"
}

// State is where a key is in its life.
type State int

const (
	// Absent: never seen, released, forgotten or expired.
	Absent State = iota
	// Inflight: claimed, with a live lease.
	Inflight
	// Done: processed; duplicates are skipped until the TTL runs out.
	Done
)

func (s State) String() string {
	switch s {
	case Absent:
		return "absent"
	case Inflight:
		return "inflight"
	case Done:
		return "done"
	}
	return "unknown"
}

// Status describes one key for operators.
type Status struct {
	State State
	// TTL is the time left before the lease or the done mark expires; zero
	// when Absent.
	TTL time.Duration
	// Token is the owner token of the lease or of the commit; empty when
	// Absent. TokenDigest(Token) is the digest of the body it was taken
	// for, if it carries one.
	Token string
}

// Errors returned by every Store. Backend errors are translated at the
// package boundary so callers never import a driver to test an error.
var (
	// ErrNotOwner: the key is held (inflight or done) under another token,
	// so the caller's lease was lost — it expired and someone else claimed
	// the key. Nothing was changed.
	ErrNotOwner = errors.New("seenset: key is owned by another token")
	// ErrInvalidTTL: a lease or TTL was zero or negative. Redis treats a
	// zero expiry as "never expires", which would pin a key forever.
	ErrInvalidTTL = errors.New("seenset: lease and ttl must be positive")
	// ErrInvalidArgument: an empty key or token.
	ErrInvalidArgument = errors.New("seenset: key and token must not be empty")
	// ErrUnavailable wraps every failure to reach or use the backend
	// (connection refused, timeout, cluster down). The outcome of the
	// operation is unknown; callers fail closed and retry.
	ErrUnavailable = errors.New("seenset: store unavailable")
	// ErrKeyUnusable: the key holds something the seen-set did not write
	// (another type, a foreign value), so no transition applies and
	// retrying cannot help until an operator removes it. Nothing was
	// changed. It is not ErrUnavailable: the store answered.
	ErrKeyUnusable = errors.New("seenset: key holds a value the seen-set cannot use")
)

// Store is a seen-set backend. All methods are safe for concurrent use.
// The key passed in is the full, already namespaced key
// ("<consumer>:<message key>"); a backend may add its own prefix.
type Store interface {
	// Claim takes the key for processing under token with a lease.
	// Absent (or expired) → inflight:<token>, Claimed. Done → Duplicate.
	// Inflight under another token → Busy. Inflight under the same token
	// → Claimed, and the lease is reset (a retried Claim is idempotent).
	// Done under a token whose digest differs from token's (both made by
	// WithDigest) → Reused, nothing changed.
	Claim(ctx context.Context, key, token string, lease time.Duration) (ClaimResult, error)

	// Renew extends the caller's lease. ErrNotOwner when the key is no
	// longer inflight under token (lease lost).
	Renew(ctx context.Context, key, token string, lease time.Duration) error

	// Commit marks the key done under token for ttl, whatever held it:
	// the app succeeded, so every later delivery must find the key done.
	// It returns nil when the key was inflight or done under token (a
	// retried Commit whose first reply was lost) or absent (the lease
	// lapsed and nobody took over), and ErrNotOwner when another token
	// held it — the caller's lease had expired and another owner took the
	// key, which may be forwarding it again right now; that owner's own
	// commit or release then finds the key done and changes nothing.
	Commit(ctx context.Context, key, token string, ttl time.Duration) error

	// Release gives up the caller's claim so the key can be claimed again
	// at once (the app failed). Absent → nil. Held by another token or
	// done → ErrNotOwner, nothing changed.
	Release(ctx context.Context, key, token string) error

	// Forget removes the key whatever its state, for an operator's
	// intentional replay. It reports whether the key existed.
	Forget(ctx context.Context, key string) (bool, error)

	// Status reports the key's state without changing it.
	Status(ctx context.Context, key string) (Status, error)

	// Ping checks the backend is reachable (readiness).
	Ping(ctx context.Context) error

	// Close releases connections. The Store must not be used after.
	Close() error
}

// validateArgs is the argument check every backend performs first.
func validateArgs(key, token string, d time.Duration) error {
	if key == "" || token == "" {
		return ErrInvalidArgument
	}
	if d <= 0 {
		return ErrInvalidTTL
	}
	return nil
}

// KeyToken is one item of a batch call: the full key and the caller's
// token for it.
type KeyToken struct {
	Key   string
	Token string
}

// ClaimReply is the answer for one item of ClaimMany.
type ClaimReply struct {
	Result ClaimResult
	Err    error
}

// BatchStore is a Store that can run many claims or commits in one round
// trip. Each item is still its own atomic transition, run in the order
// given, with exactly the outcome and error the single call would give:
// only the round trip is shared. A Kafka partition claims the messages it
// has already fetched this way before forwarding them in order. Redis is
// one; the memory store has no round trips to share.
type BatchStore interface {
	Store
	ClaimMany(ctx context.Context, items []KeyToken, lease time.Duration) []ClaimReply
	CommitMany(ctx context.Context, items []KeyToken, ttl time.Duration) []error
}

// ClaimMany claims every item, in one round trip when s is a BatchStore
// and one call per item otherwise.
func ClaimMany(ctx context.Context, s Store, items []KeyToken, lease time.Duration) []ClaimReply {
	if b, ok := s.(BatchStore); ok {
		return b.ClaimMany(ctx, items, lease)
	}
	out := make([]ClaimReply, len(items))
	for i, it := range items {
		out[i].Result, out[i].Err = s.Claim(ctx, it.Key, it.Token, lease)
	}
	return out
}

// CommitMany commits every item, in one round trip when s is a
// BatchStore and one call per item otherwise.
func CommitMany(ctx context.Context, s Store, items []KeyToken, ttl time.Duration) []error {
	if b, ok := s.(BatchStore); ok {
		return b.CommitMany(ctx, items, ttl)
	}
	out := make([]error, len(items))
	for i, it := range items {
		out[i] = s.Commit(ctx, it.Key, it.Token, ttl)
	}
	return out
}
