// Package storetest is the conformance suite every seenset.Store backend
// must pass, so the pipeline can rely on the Store contract and not on one
// backend's behaviour.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupe-proxy/dedupe-proxy/internal/seenset"
)

// Durations of the timing cases: long enough that scheduling noise under
// -race on a small machine does not expire a lease early, short enough that
// the suite runs in a few seconds. long is for leases that must not expire
// during a case.
const (
	lease = 200 * time.Millisecond
	slack = 100 * time.Millisecond
	long  = time.Minute
)

// Run runs the suite. newStore is called once per case and must return a
// store whose keys are not shared with any other call (Redis: a unique key
// prefix); it must register its own cleanup (Close, key removal) with
// t.Cleanup. Cases run in parallel.
func Run(t *testing.T, newStore func(t *testing.T) seenset.Store) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s seenset.Store)
	}{
		{"Ping", testPing},
		{"ClaimDuplicateBusy", testClaimDuplicateBusy},
		{"ConcurrentClaimOneWinner", testConcurrentClaim},
		{"ReclaimSameTokenResetsLease", testReclaimSameToken},
		{"StaleTokenCannotAct", testStaleToken},
		{"LeaseExpiryLetsNewClaimWin", testLeaseExpiry},
		{"RenewKeepsLeaseAlive", testRenewKeepsAlive},
		{"RenewOnlyOwnInflight", testRenewOnlyOwn},
		{"CommitThenClaimIsDuplicate", testCommitThenClaim},
		{"CommitIdempotent", testCommitIdempotent},
		{"CommitAbsent", testCommitAbsent},
		{"CommitOtherTokenRecorded", testCommitOther},
		{"DoneTTLExpiry", testDoneTTLExpiry},
		{"ReleaseMakesClaimable", testRelease},
		{"ReleaseRejected", testReleaseRejected},
		{"ForgetEachState", testForget},
		{"StatusStatesAndTTL", testStatus},
		{"InvalidTTL", testInvalidTTL},
		{"SubMillisecondLease", testSubMillisecond},
		{"InvalidArgument", testInvalidArgument},
		{"KeyAndTokenShapes", testShapes},
		// Through the backend's BatchStore methods when it has them, and
		// through the per-item fallback: the same answers either way.
		{"ClaimManyCommitMany", testBatch},
		{"ClaimManyFallback", func(t *testing.T, s seenset.Store) { testBatch(t, plainStore{s}) }},
		{"DigestReusedOrDuplicate", testDigest},
		{"DigestKeptByClaimAndCommit", testDigestKept},
		{"DigestReusedInBatch", func(t *testing.T, s seenset.Store) { testDigestBatch(t, s) }},
		{"DigestReusedInBatchFallback", func(t *testing.T, s seenset.Store) { testDigestBatch(t, plainStore{s}) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newStore(t))
		})
	}
}

func testPing(t *testing.T, s seenset.Store) {
	if err := s.Ping(ctx(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func testClaimDuplicateBusy(t *testing.T, s seenset.Store) {
	k := key(t)
	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustClaim(t, s, k, "B", long, seenset.Busy)
	mustStatus(t, s, k, seenset.Inflight, "A")
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", long))
	mustClaim(t, s, k, "B", long, seenset.Duplicate)
	// The committer itself is told Duplicate too: a redelivery to the same
	// replica must not be forwarded again.
	mustClaim(t, s, k, "A", long, seenset.Duplicate)
	mustStatus(t, s, k, seenset.Done, "A")
}

func testConcurrentClaim(t *testing.T, s seenset.Store) {
	const n = 50
	k := key(t)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]seenset.ClaimResult, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = s.Claim(context.Background(), k, tok(i), long)
		}()
	}
	close(start)
	wg.Wait()
	winner, busy := -1, 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claimer %d: %v", i, errs[i])
		}
		switch results[i] {
		case seenset.Claimed:
			if winner >= 0 {
				t.Fatalf("claimers %d and %d both won", winner, i)
			}
			winner = i
		case seenset.Busy:
			busy++
		default:
			t.Fatalf("claimer %d: got %v, want claimed or busy", i, results[i])
		}
	}
	if winner < 0 || busy != n-1 {
		t.Fatalf("winner %d, busy %d; want one winner and %d busy", winner, busy, n-1)
	}
	mustStatus(t, s, k, seenset.Inflight, tok(winner))
}

func testReclaimSameToken(t *testing.T, s seenset.Store) {
	k := key(t)
	mustClaim(t, s, k, "A", time.Second, seenset.Claimed)
	mustClaim(t, s, k, "A", long, seenset.Claimed)
	st := mustStatus(t, s, k, seenset.Inflight, "A")
	if st.TTL <= time.Second {
		t.Fatalf("re-claim did not reset the lease: TTL %v", st.TTL)
	}
}

func testStaleToken(t *testing.T, s seenset.Store) {
	k := key(t)
	mustClaim(t, s, k, "A", lease, seenset.Claimed)
	time.Sleep(lease + slack)
	mustClaim(t, s, k, "B", long, seenset.Claimed)

	// A's lease expired and B holds the key: A can neither end nor extend
	// B's claim. (A's commit would record its success: CommitOtherToken.)
	before := mustStatus(t, s, k, seenset.Inflight, "B")
	mustNotOwner(t, "Release", s.Release(ctx(t), k, "A"))
	mustNotOwner(t, "Renew", s.Renew(ctx(t), k, "A", long))
	after := mustStatus(t, s, k, seenset.Inflight, "B")
	if after.TTL > before.TTL {
		t.Fatalf("stale token changed B's lease: TTL %v → %v", before.TTL, after.TTL)
	}

	// Same once B has committed.
	mustOK(t, "Commit B", s.Commit(ctx(t), k, "B", long))
	before = mustStatus(t, s, k, seenset.Done, "B")
	mustNotOwner(t, "Release", s.Release(ctx(t), k, "A"))
	mustNotOwner(t, "Renew", s.Renew(ctx(t), k, "A", long))
	after = mustStatus(t, s, k, seenset.Done, "B")
	if after.TTL > before.TTL {
		t.Fatalf("stale token changed B's done TTL: %v → %v", before.TTL, after.TTL)
	}
}

func testLeaseExpiry(t *testing.T, s seenset.Store) {
	k := key(t)
	mustClaim(t, s, k, "A", lease, seenset.Claimed)
	mustClaim(t, s, k, "B", long, seenset.Busy)
	time.Sleep(lease + slack)
	mustStatus(t, s, k, seenset.Absent, "")
	mustClaim(t, s, k, "B", long, seenset.Claimed)
	mustStatus(t, s, k, seenset.Inflight, "B")
}

func testRenewKeepsAlive(t *testing.T, s seenset.Store) {
	// A second, not less: the suite runs in parallel with the rest of CI
	// on two cores, and a renewal delayed past a short lease by the
	// scheduler once failed the test with the store working.
	const leaseR = time.Second
	k := key(t)
	mustClaim(t, s, k, "A", leaseR, seenset.Claimed)
	// Renew every lease/6 until well past the original expiry; a lapse
	// would let B in.
	deadline := time.Now().Add(3 * leaseR)
	for time.Now().Before(deadline) {
		time.Sleep(leaseR / 6)
		mustOK(t, "Renew", s.Renew(ctx(t), k, "A", leaseR))
		mustClaim(t, s, k, "B", long, seenset.Busy)
	}
	mustStatus(t, s, k, seenset.Inflight, "A")
	// Without renewal the lease lapses as usual.
	time.Sleep(leaseR + slack)
	mustClaim(t, s, k, "B", long, seenset.Claimed)
}

func testRenewOnlyOwn(t *testing.T, s seenset.Store) {
	k := key(t)
	mustNotOwner(t, "Renew absent", s.Renew(ctx(t), k, "A", long))
	mustStatus(t, s, k, seenset.Absent, "")
	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustNotOwner(t, "Renew other", s.Renew(ctx(t), k, "B", long))
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", long))
	// Done is not a lease: renewing it would be a second commit with a
	// lease-sized TTL.
	mustNotOwner(t, "Renew done", s.Renew(ctx(t), k, "A", long))
	mustStatus(t, s, k, seenset.Done, "A")
}

func testCommitThenClaim(t *testing.T, s seenset.Store) {
	k := key(t)
	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", long))
	mustClaim(t, s, k, "B", long, seenset.Duplicate)
	mustStatus(t, s, k, seenset.Done, "A")
}

func testCommitIdempotent(t *testing.T, s seenset.Store) {
	k := key(t)
	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", long))
	mustOK(t, "Commit again", s.Commit(ctx(t), k, "A", long))
	mustStatus(t, s, k, seenset.Done, "A")
}

func testCommitAbsent(t *testing.T, s seenset.Store) {
	k := key(t)
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", long))
	mustStatus(t, s, k, seenset.Done, "A")
	mustClaim(t, s, k, "B", long, seenset.Duplicate)

	// Also after the own lease lapsed with nobody taking over.
	k2 := key(t) + ":lapsed"
	mustClaim(t, s, k2, "A", lease, seenset.Claimed)
	time.Sleep(lease + slack)
	mustOK(t, "Commit after lapse", s.Commit(ctx(t), k2, "A", long))
	mustStatus(t, s, k2, seenset.Done, "A")
}

// A commit over another owner's claim reports it and still records the
// success: the app succeeded, so later deliveries must find the key done.
// The other owner's release then changes nothing; its commit is told.
func testCommitOther(t *testing.T, s seenset.Store) {
	k := key(t)
	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustNotOwner(t, "Commit over A's claim", s.Commit(ctx(t), k, "B", long))
	mustStatus(t, s, k, seenset.Done, "B")
	mustNotOwner(t, "Release by A", s.Release(ctx(t), k, "A"))
	mustNotOwner(t, "Renew by A", s.Renew(ctx(t), k, "A", long))
	mustStatus(t, s, k, seenset.Done, "B")
	mustNotOwner(t, "Commit by A", s.Commit(ctx(t), k, "A", long))
	mustStatus(t, s, k, seenset.Done, "A")
	mustClaim(t, s, k, "C", long, seenset.Duplicate)
}

func testDoneTTLExpiry(t *testing.T, s seenset.Store) {
	k := key(t)
	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", lease))
	mustClaim(t, s, k, "B", long, seenset.Duplicate)
	time.Sleep(lease + slack)
	mustStatus(t, s, k, seenset.Absent, "")
	mustClaim(t, s, k, "B", long, seenset.Claimed)
}

func testRelease(t *testing.T, s seenset.Store) {
	k := key(t)
	mustOK(t, "Release absent", s.Release(ctx(t), k, "A"))
	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustOK(t, "Release", s.Release(ctx(t), k, "A"))
	mustStatus(t, s, k, seenset.Absent, "")
	mustClaim(t, s, k, "B", long, seenset.Claimed)
	// A late Release from A (say, a retry whose first reply was lost) must
	// not free the claim B took in between.
	mustNotOwner(t, "Release stale", s.Release(ctx(t), k, "A"))
	mustStatus(t, s, k, seenset.Inflight, "B")
}

func testReleaseRejected(t *testing.T, s seenset.Store) {
	k := key(t)
	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustNotOwner(t, "Release other", s.Release(ctx(t), k, "B"))
	mustStatus(t, s, k, seenset.Inflight, "A")
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", long))
	// Done is never undone by Release, not even by its own token: only
	// Forget (an operator) may replay processed work.
	mustNotOwner(t, "Release own done", s.Release(ctx(t), k, "A"))
	mustNotOwner(t, "Release other done", s.Release(ctx(t), k, "B"))
	mustStatus(t, s, k, seenset.Done, "A")
}

func testForget(t *testing.T, s seenset.Store) {
	k := key(t)
	mustForget(t, s, k, false)

	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustForget(t, s, k, true)
	mustStatus(t, s, k, seenset.Absent, "")
	mustForget(t, s, k, false)

	mustClaim(t, s, k, "A", long, seenset.Claimed)
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", long))
	mustForget(t, s, k, true)
	mustStatus(t, s, k, seenset.Absent, "")
	mustClaim(t, s, k, "B", long, seenset.Claimed)

	// An expired key does not exist any more.
	k2 := key(t) + ":expired"
	mustClaim(t, s, k2, "A", lease, seenset.Claimed)
	time.Sleep(lease + slack)
	mustForget(t, s, k2, false)
}

func testStatus(t *testing.T, s seenset.Store) {
	k := key(t)
	st := mustStatus(t, s, k, seenset.Absent, "")
	if st.TTL != 0 {
		t.Fatalf("absent TTL %v, want 0", st.TTL)
	}
	const leaseS, ttl = 10 * time.Second, time.Hour
	mustClaim(t, s, k, "A", leaseS, seenset.Claimed)
	st = mustStatus(t, s, k, seenset.Inflight, "A")
	ttlWithin(t, st.TTL, leaseS)
	// Status must not change anything.
	st2 := mustStatus(t, s, k, seenset.Inflight, "A")
	if st2.TTL > st.TTL {
		t.Fatalf("Status extended the lease: %v → %v", st.TTL, st2.TTL)
	}
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", ttl))
	st = mustStatus(t, s, k, seenset.Done, "A")
	ttlWithin(t, st.TTL, ttl)
	// A Duplicate answer must not refresh the done TTL either.
	mustClaim(t, s, k, "B", long, seenset.Duplicate)
	st2 = mustStatus(t, s, k, seenset.Done, "A")
	if st2.TTL > st.TTL {
		t.Fatalf("Claim on done changed its TTL: %v → %v", st.TTL, st2.TTL)
	}
}

func testInvalidTTL(t *testing.T, s seenset.Store) {
	k := key(t)
	for _, d := range []time.Duration{0, -time.Nanosecond, -time.Second} {
		if _, err := s.Claim(ctx(t), k, "A", d); !errors.Is(err, seenset.ErrInvalidTTL) {
			t.Fatalf("Claim(lease %v): err %v, want ErrInvalidTTL", d, err)
		}
		mustStatus(t, s, k, seenset.Absent, "")
		if err := s.Commit(ctx(t), k, "A", d); !errors.Is(err, seenset.ErrInvalidTTL) {
			t.Fatalf("Commit(ttl %v) on absent: err %v, want ErrInvalidTTL", d, err)
		}
		mustStatus(t, s, k, seenset.Absent, "")
	}

	mustClaim(t, s, k, "A", long, seenset.Claimed)
	before := mustStatus(t, s, k, seenset.Inflight, "A")
	for _, d := range []time.Duration{0, -time.Nanosecond, -time.Second} {
		if err := s.Renew(ctx(t), k, "A", d); !errors.Is(err, seenset.ErrInvalidTTL) {
			t.Fatalf("Renew(lease %v): err %v, want ErrInvalidTTL", d, err)
		}
		if err := s.Commit(ctx(t), k, "A", d); !errors.Is(err, seenset.ErrInvalidTTL) {
			t.Fatalf("Commit(ttl %v): err %v, want ErrInvalidTTL", d, err)
		}
		if _, err := s.Claim(ctx(t), k, "A", d); !errors.Is(err, seenset.ErrInvalidTTL) {
			t.Fatalf("re-Claim(lease %v): err %v, want ErrInvalidTTL", d, err)
		}
	}
	after := mustStatus(t, s, k, seenset.Inflight, "A")
	// A zero expiry reaching Redis would make the key permanent; a negative
	// one would delete it.
	if after.TTL <= 0 || after.TTL > before.TTL {
		t.Fatalf("rejected calls changed the lease: TTL %v → %v", before.TTL, after.TTL)
	}
}

func testSubMillisecond(t *testing.T, s seenset.Store) {
	// Positive but below Redis' resolution: must be accepted and expire
	// promptly, not be rounded to "no expiry".
	k := key(t)
	mustClaim(t, s, k, "A", time.Nanosecond, seenset.Claimed)
	time.Sleep(slack)
	mustStatus(t, s, k, seenset.Absent, "")
	mustOK(t, "Commit", s.Commit(ctx(t), k, "A", time.Microsecond))
	time.Sleep(slack)
	mustStatus(t, s, k, seenset.Absent, "")
}

func testInvalidArgument(t *testing.T, s seenset.Store) {
	c := ctx(t)
	k := key(t)
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, seenset.ErrInvalidArgument) {
			t.Fatalf("%s: err %v, want ErrInvalidArgument", op, err)
		}
	}
	_, err := s.Claim(c, "", "A", long)
	check("Claim empty key", err)
	_, err = s.Claim(c, k, "", long)
	check("Claim empty token", err)
	check("Renew empty key", s.Renew(c, "", "A", long))
	check("Renew empty token", s.Renew(c, k, "", long))
	check("Commit empty key", s.Commit(c, "", "A", long))
	check("Commit empty token", s.Commit(c, k, "", long))
	check("Release empty key", s.Release(c, "", "A"))
	check("Release empty token", s.Release(c, k, ""))
	_, err = s.Forget(c, "")
	check("Forget empty key", err)
	_, err = s.Status(c, "")
	check("Status empty key", err)
	mustStatus(t, s, k, seenset.Absent, "")
}

func testShapes(t *testing.T, s seenset.Store) {
	base := key(t)
	keys := []string{
		base + ":ключ:ü:🙂",
		base + ":a:b:c",
		base + ":with  spaces ",
		base + ":*?[glob]\\",
		base + ":inflight:x",
		base + ":done:y",
		base + ":nul\x00byte",
		base + ":" + strings.Repeat("k", 512),
		// Keys that are prefixes of each other must not collide.
		base + ":p",
		base + ":p:",
		base + ":p:q",
	}
	for i, k := range keys {
		owner := "tok:" + tok(i) + ":ü " // tokens with separators too
		mustClaim(t, s, k, owner, long, seenset.Claimed)
		mustClaim(t, s, k, "tok:"+tok(i), long, seenset.Busy) // a prefix of the owner
		mustStatus(t, s, k, seenset.Inflight, owner)
	}
	for i, k := range keys {
		owner := "tok:" + tok(i) + ":ü "
		mustNotOwner(t, "Release prefix token", s.Release(ctx(t), k, "tok:"+tok(i)))
		mustNotOwner(t, "Renew prefix token", s.Renew(ctx(t), k, "tok:"+tok(i), long))
		mustOK(t, "Commit", s.Commit(ctx(t), k, owner, long))
		mustClaim(t, s, k, "other", long, seenset.Duplicate)
		mustStatus(t, s, k, seenset.Done, owner)
	}
	for _, k := range keys {
		mustForget(t, s, k, true)
		mustStatus(t, s, k, seenset.Absent, "")
	}
}

// Helpers.

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// key is unique per case and per run, so a backend that leaked keys from an
// earlier run cannot make a case pass or fail.
func key(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "storetest:" + t.Name() + ":" + hex.EncodeToString(b[:])
}

func tok(i int) string {
	return "token-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
}

func mustClaim(t *testing.T, s seenset.Store, k, token string, l time.Duration, want seenset.ClaimResult) {
	t.Helper()
	got, err := s.Claim(ctx(t), k, token, l)
	if err != nil {
		t.Fatalf("Claim(%q, %q): %v", k, token, err)
	}
	if got != want {
		t.Fatalf("Claim(%q, %q) = %v, want %v", k, token, got, want)
	}
}

func mustStatus(t *testing.T, s seenset.Store, k string, state seenset.State, token string) seenset.Status {
	t.Helper()
	st, err := s.Status(ctx(t), k)
	if err != nil {
		t.Fatalf("Status(%q): %v", k, err)
	}
	if st.State != state || st.Token != token {
		t.Fatalf("Status(%q) = %v/%q, want %v/%q", k, st.State, st.Token, state, token)
	}
	if state == seenset.Absent && st.TTL != 0 {
		t.Fatalf("Status(%q) absent with TTL %v", k, st.TTL)
	}
	if state != seenset.Absent && st.TTL <= 0 {
		t.Fatalf("Status(%q) %v with TTL %v, want > 0", k, state, st.TTL)
	}
	return st
}

func mustForget(t *testing.T, s seenset.Store, k string, existed bool) {
	t.Helper()
	got, err := s.Forget(ctx(t), k)
	if err != nil {
		t.Fatalf("Forget(%q): %v", k, err)
	}
	if got != existed {
		t.Fatalf("Forget(%q) = %v, want %v", k, got, existed)
	}
}

func mustOK(t *testing.T, op string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
}

func mustNotOwner(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, seenset.ErrNotOwner) {
		t.Fatalf("%s: err %v, want ErrNotOwner", op, err)
	}
}

// ttlWithin checks 0 < got <= set and that little of it has gone: the
// backend stored what it was given, at millisecond precision or better.
func ttlWithin(t *testing.T, got, set time.Duration) {
	t.Helper()
	if got <= 0 || got > set || got < set-2*time.Second {
		t.Fatalf("TTL %v, want in (%v, %v]", got, set-2*time.Second, set)
	}
}

// plainStore hides a backend's BatchStore methods.
type plainStore struct{ seenset.Store }

// testBatch: each item of a batch gets exactly the single call's answer,
// in order, and an invalid item spoils nothing else.
func testBatch(t *testing.T, s seenset.Store) {
	fresh, done, busy := key(t), key(t), key(t)
	mustClaim(t, s, done, tok(9), long, seenset.Claimed)
	mustOK(t, "Commit", s.Commit(ctx(t), done, tok(9), long))
	mustClaim(t, s, busy, tok(9), long, seenset.Claimed)

	replies := seenset.ClaimMany(ctx(t), s, []seenset.KeyToken{
		{Key: fresh, Token: tok(1)}, {Key: done, Token: tok(2)}, {Key: busy, Token: tok(3)},
		{Key: fresh, Token: tok(4)}, // the same key again later in the batch: held by tok(1)
		{Key: "", Token: tok(5)},
		{Key: busy, Token: tok(9)}, // the owner reclaiming: Claimed
	}, long)
	want := []seenset.ClaimResult{seenset.Claimed, seenset.Duplicate, seenset.Busy, seenset.Busy, 0, seenset.Claimed}
	if len(replies) != len(want) {
		t.Fatalf("ClaimMany: %d replies, want %d", len(replies), len(want))
	}
	for i, r := range replies {
		if i == 4 {
			if !errors.Is(r.Err, seenset.ErrInvalidArgument) {
				t.Fatalf("ClaimMany item %d (empty key): err %v, want ErrInvalidArgument", i, r.Err)
			}
			continue
		}
		if r.Err != nil || r.Result != want[i] {
			t.Fatalf("ClaimMany item %d = %v, %v; want %v", i, r.Result, r.Err, want[i])
		}
	}
	mustStatus(t, s, fresh, seenset.Inflight, tok(1))

	absent := key(t)
	errs := seenset.CommitMany(ctx(t), s, []seenset.KeyToken{
		{Key: fresh, Token: tok(1)}, {Key: busy, Token: tok(2)}, {Key: absent, Token: tok(3)}, {Key: done, Token: tok(4)}, {Key: fresh, Token: ""},
	}, long)
	if len(errs) != 5 {
		t.Fatalf("CommitMany: %d replies, want 5", len(errs))
	}
	mustOK(t, "CommitMany own lease", errs[0])
	mustNotOwner(t, "CommitMany other's lease", errs[1])
	mustOK(t, "CommitMany absent", errs[2])
	mustNotOwner(t, "CommitMany other's done", errs[3])
	if !errors.Is(errs[4], seenset.ErrInvalidArgument) {
		t.Fatalf("CommitMany empty token: err %v, want ErrInvalidArgument", errs[4])
	}
	mustStatus(t, s, fresh, seenset.Done, tok(1))
	mustStatus(t, s, busy, seenset.Done, tok(2))
	mustStatus(t, s, absent, seenset.Done, tok(3))
	mustStatus(t, s, done, seenset.Done, tok(4))

	if got := seenset.ClaimMany(ctx(t), s, nil, long); len(got) != 0 {
		t.Fatalf("ClaimMany(nil) = %v", got)
	}
}

var (
	bodyA = seenset.SumDigest([]byte(`{"meta":{"id":"ord-1"},"payload":{"amount":10}}`))
	bodyB = seenset.SumDigest([]byte(`{"meta":{"id":"ord-1"},"payload":{"amount":99}}`))
)

// testDigest: a done key claimed for another body is Reused and left as
// it was; for the same body, or when either side has no digest (a mark
// written before digests were kept, a caller keeping none), Duplicate.
func testDigest(t *testing.T, s seenset.Store) {
	k := key(t)
	a := seenset.WithDigest(tok(1), bodyA)
	mustClaim(t, s, k, a, long, seenset.Claimed)
	mustOK(t, "Commit", s.Commit(ctx(t), k, a, long))
	mustClaim(t, s, k, seenset.WithDigest(tok(2), bodyB), long, seenset.Reused)
	mustClaim(t, s, k, seenset.WithDigest(tok(3), bodyA), long, seenset.Duplicate)
	mustClaim(t, s, k, tok(4), long, seenset.Duplicate)
	st := mustStatus(t, s, k, seenset.Done, a)
	if got := seenset.TokenDigest(st.Token); got != bodyA.String() {
		t.Fatalf("digest after a refused reuse = %q, want the first body's %q", got, bodyA)
	}

	old := key(t)
	mustClaim(t, s, old, tok(5), long, seenset.Claimed)
	mustOK(t, "Commit", s.Commit(ctx(t), old, tok(5), long))
	mustClaim(t, s, old, seenset.WithDigest(tok(6), bodyB), long, seenset.Duplicate)
	mustStatus(t, s, old, seenset.Done, tok(5))
}

// testDigestKept: the claim holds its digest while inflight (another
// body finds it Busy, not Reused: the holder may still fail), Renew and
// Release act on the whole token, and a commit keeps the digest.
func testDigestKept(t *testing.T, s seenset.Store) {
	k := key(t)
	a, b := seenset.WithDigest(tok(1), bodyA), seenset.WithDigest(tok(2), bodyB)
	mustClaim(t, s, k, a, long, seenset.Claimed)
	st := mustStatus(t, s, k, seenset.Inflight, a)
	if got := seenset.TokenDigest(st.Token); got != bodyA.String() {
		t.Fatalf("inflight digest = %q, want %q", got, bodyA)
	}
	mustClaim(t, s, k, b, long, seenset.Busy)
	mustClaim(t, s, k, a, long, seenset.Claimed) // its own claim again
	mustNotOwner(t, "Renew without the digest", s.Renew(ctx(t), k, tok(1), long))
	mustOK(t, "Renew", s.Renew(ctx(t), k, a, long))
	mustOK(t, "Release", s.Release(ctx(t), k, a))
	mustClaim(t, s, k, b, long, seenset.Claimed)
	mustOK(t, "Commit", s.Commit(ctx(t), k, b, long))
	mustClaim(t, s, k, a, long, seenset.Reused)
	mustOK(t, "Commit again", s.Commit(ctx(t), k, b, long))
	mustStatus(t, s, k, seenset.Done, b)
}

func testDigestBatch(t *testing.T, s seenset.Store) {
	done := key(t)
	a := seenset.WithDigest(tok(1), bodyA)
	mustClaim(t, s, done, a, long, seenset.Claimed)
	mustOK(t, "Commit", s.Commit(ctx(t), done, a, long))
	replies := seenset.ClaimMany(ctx(t), s, []seenset.KeyToken{
		{Key: done, Token: seenset.WithDigest(tok(2), bodyB)},
		{Key: done, Token: seenset.WithDigest(tok(3), bodyA)},
	}, long)
	want := []seenset.ClaimResult{seenset.Reused, seenset.Duplicate}
	for i, r := range replies {
		if r.Err != nil || r.Result != want[i] {
			t.Fatalf("ClaimMany item %d = %v, %v; want %v", i, r.Result, r.Err, want[i])
		}
	}
}
