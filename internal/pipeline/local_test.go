package pipeline

import "testing"

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Two claims of one key sent together: whichever answer is read first,
// the loser finds the key held here and waits for the winner's outcome.
func TestLocalClaimsLoserReadFirstWaitsForWinner(t *testing.T) {
	l := newLocalClaims()
	l.reserve("k") // winner
	l.reserve("k") // loser
	l.unreserve("k", "loser", false, 0)
	ch := l.waitFor("k")
	if ch == nil {
		t.Fatal("the loser found nothing held here while the winner's answer was unread: it would be requeued")
	}
	l.unreserve("k", "winner", true, 0)
	if closed(ch) {
		t.Fatal("the winner's claim woke the waiter before any outcome")
	}
	l.drop("k", "winner")
	if !closed(ch) {
		t.Fatal("the winner let go, the waiter still waits")
	}
	if l.waitFor("k") != nil {
		t.Fatal("the key is still recorded after its holder let go")
	}
}

func TestLocalClaimsWinnerReadFirst(t *testing.T) {
	l := newLocalClaims()
	l.reserve("k")
	l.reserve("k")
	l.unreserve("k", "winner", true, 0)
	l.unreserve("k", "loser", false, 0)
	ch := l.waitFor("k")
	if ch == nil || closed(ch) {
		t.Fatal("the loser does not wait for the winner")
	}
	l.drop("k", "loser") // not the holder: no effect
	if closed(ch) {
		t.Fatal("a drop by a token that does not hold the key woke the waiters")
	}
	l.drop("k", "winner")
	if !closed(ch) {
		t.Fatal("the waiter was not woken")
	}
}

// Both lost (another replica holds the key): the last answer wakes the
// waiter, which then finds nothing here and is requeued by its caller.
func TestLocalClaimsBothLost(t *testing.T) {
	l := newLocalClaims()
	l.reserve("k")
	l.reserve("k")
	l.unreserve("k", "a", false, 0)
	ch := l.waitFor("k")
	if ch == nil {
		t.Fatal("a claim in flight here is not waited for")
	}
	l.unreserve("k", "b", false, 0)
	if !closed(ch) {
		t.Fatal("no claim left here, the waiter still waits")
	}
	if l.waitFor("k") != nil {
		t.Fatal("an entry is left with nobody holding or claiming")
	}
}

// A claim taken over from an earlier local holder whose lease ran out
// wakes that holder's waiters.
func TestLocalClaimsTakeoverWakes(t *testing.T) {
	l := newLocalClaims()
	l.hold("k", "old")
	ch := l.waitFor("k")
	l.reserve("k")
	l.unreserve("k", "new", true, 0)
	if !closed(ch) {
		t.Fatal("the takeover did not wake the old holder's waiters")
	}
	l.drop("k", "old")
	if l.waitFor("k") == nil {
		t.Fatal("the old holder's drop removed the new holder's record")
	}
}

// The holder here finished while a claim was on its way: its "busy"
// answer is reported stale, so the caller claims again instead of taking
// the key for another replica's.
func TestLocalClaimsStaleBusy(t *testing.T) {
	l := newLocalClaims()
	l.hold("k", "a")
	since := l.reserve("k")
	l.drop("k", "a")
	if !l.unreserve("k", "b", false, since) {
		t.Fatal("the holder let go during the claim, the busy answer is not reported stale")
	}
	if l.waitFor("k") != nil {
		t.Fatal("an entry is left with nobody holding or claiming")
	}
	l.hold("k", "c")
	since = l.reserve("k")
	if l.unreserve("k", "d", false, since) {
		t.Fatal("a busy answer reported stale while the holder still holds the key")
	}
}
